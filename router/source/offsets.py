"""Pure offset arithmetic: the offsets document, fair range planning and task packing.

Offsets are a flat mapping ``{"topic/partition": next_offset}``. Spark compares
serialized offsets as strings, so they are always emitted with sorted keys;
otherwise equal offsets compare unequal and Spark runs empty batches forever.
"""

from __future__ import annotations

import bisect
import heapq
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping

from router.source.exceptions import OffsetsError

Offsets = dict[str, int]

#: Kafka's special offsets in a starting-offsets mapping (same as Spark's JVM source).
LATEST, EARLIEST = -1, -2


@dataclass(frozen=True, order=True)
class Range:
    """Offsets ``[from_offset, until)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until: int

    @property
    def count(self) -> int:
        """Upper bound of the records in the range (gaps make the real count smaller)."""
        return max(0, self.until - self.from_offset)

    def as_tuple(self) -> tuple[str, int, int, int]:
        return (self.topic, self.partition, self.from_offset, self.until)


#: Between topic and partition in an offsets key. Topic names cannot contain it.
KEY_SEPARATOR = "/"


def tp_key(topic: str, partition: int) -> str:
    """``"topic/partition"``: the key of one topic-partition in every offsets document (Spark's
    checkpoint here, the tables' progress in router/progress.py, whose `tp_keys` builds whole columns)."""
    return f"{topic}{KEY_SEPARATOR}{partition}"


def split_key(key: str) -> tuple[str, int]:
    """``"a/b/3"`` -> ``("a/b", 3)``; topic names cannot contain '/', but be lenient."""
    topic, sep, partition = key.rpartition(KEY_SEPARATOR)
    if not sep or not topic:
        raise OffsetsError(f"offset key {key!r} is not 'topic/partition'")
    try:
        return topic, int(partition)
    except ValueError:
        raise OffsetsError(f"offset key {key!r} has a non-numeric partition") from None


def normalize(offsets: Mapping[str, int]) -> Offsets:
    """A new dict with sorted keys and int values (what Spark must see)."""
    out: Offsets = {}
    for key in sorted(offsets):
        split_key(key)
        value = offsets[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise OffsetsError(f"offset for {key!r} must be a non-negative integer, got {value!r}")
        out[key] = value
    return out


def to_json(offsets: Mapping[str, int]) -> str:
    return json.dumps(normalize(offsets), sort_keys=True, separators=(",", ":"))


def from_json(text: str) -> Offsets:
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise OffsetsError(f"offsets are not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise OffsetsError("offsets must be a JSON object")
    return normalize(doc)


def merge_end(start: Mapping[str, int], latest: Mapping[str, int]) -> Offsets:
    """End offsets for a batch: every start key kept, never moving backwards.

    A partition absent from ``start`` (newly discovered) starts at 0; the reader
    clamps to the earliest retained offset.
    """
    end = dict(start)
    for key, value in latest.items():
        end[key] = max(value, start.get(key, 0))
    return normalize(end)


#: How a backlog larger than the batch limit is shared (``kafka.catch_up``).
CATCH_UP_MODES = ("turns", "even")

#: In turns, one partition takes at most this fraction of the limit per turn: a deep backlog
#: cannot hold the other partitions back for many batches.
TURN_SHARE = 4


def plan_ranges(
    start: Mapping[str, int], end: Mapping[str, int], max_records: int | None = None
) -> list[Range]:
    """Non-empty ranges between two offsets documents, at most ``max_records`` in total.

    The limit is shared evenly (water-filling): small partitions are drained
    completely and the remainder is split evenly over the larger ones, so no
    partition starves behind a busy one.
    """
    ranges, _ = plan_limited(start, end, max_records, "even")
    return ranges


def plan_limited(start: Mapping[str, int], end: Mapping[str, int], max_records: int | None,
                 catch_up: str = "turns", turn: str | None = None) -> tuple[list[Range], str | None]:
    """The ranges of the next batch and where the following batch's turns begin.

    ``turns`` reads whole backlogs partition after partition (take_turns);
    ``even`` shares the limit over every partition (fair_shares) and keeps no turn.
    """
    avail: dict[str, tuple[int, int]] = {}
    for key in sorted(end):
        lo = start.get(key, 0)
        hi = end[key]
        if hi > lo:
            avail[key] = (lo, hi)
    if max_records is not None:
        if max_records <= 0:
            raise OffsetsError(f"max_records must be positive, got {max_records}")
        if catch_up not in CATCH_UP_MODES:
            raise OffsetsError(f"catch_up must be one of {', '.join(CATCH_UP_MODES)}, got {catch_up!r}")
        sizes = {k: hi - lo for k, (lo, hi) in avail.items()}
        if catch_up == "turns":
            grant, turn = take_turns(sizes, max_records, turn)
        else:
            grant = fair_shares(sizes, max_records)
        avail = {k: (lo, lo + grant.get(k, 0)) for k, (lo, hi) in avail.items() if grant.get(k, 0) > 0}
    return [Range(*split_key(k), lo, hi) for k, (lo, hi) in avail.items()], turn


def take_turns(sizes: Mapping[str, int], budget: int, after: str | None) -> tuple[dict[str, int], str | None]:
    """Grant ``budget`` as whole backlogs, in key order from the partition after ``after``.

    When everything fits, everything is granted. Otherwise partitions take
    their turn one after the other (a topic's partitions are neighbours in key
    order), each taking its whole backlog up to ``budget // TURN_SHARE``; the
    turn that does not fit fills the batch and the next batch goes on with it;
    what a full round leaves goes to the capped backlogs, in the same order. A partition read
    whole is fetched once, where an even share re-fetches the rest of its
    backlog every batch (a broker answers with up to the fetch size past the
    range) and every table it feeds gets a file and a commit per batch.
    Returns the grants and the last key whose turn is done; with no ``after``
    (a new reader) the turns begin at the deepest backlog.
    """
    keys = sorted(k for k, n in sizes.items() if n > 0)
    if sum(sizes[k] for k in keys) <= budget:
        return {k: sizes[k] for k in keys}, after
    if after is None:
        deepest = max(sizes[k] for k in keys)
        first = next(i for i, k in enumerate(keys) if sizes[k] == deepest)
    else:
        first = bisect.bisect_right(keys, after) % len(keys)
    order = keys[first:] + keys[:first]
    cap = max(1, budget // TURN_SHARE)
    grant: dict[str, int] = {}
    remaining, last = budget, after
    for key in order:
        want = min(sizes[key], cap)
        if want > remaining:  # the batch ends inside this turn, which the next batch goes on with
            if remaining:
                grant[key] = remaining
            break
        grant[key] = want
        remaining -= want
        last = key
    else:
        for key in order:  # a full round: what is left goes to the capped backlogs, in the same order
            more = min(sizes[key] - grant[key], remaining)
            grant[key] += more
            remaining -= more
    return grant, last


def fair_shares(sizes: Mapping[str, int], budget: int) -> dict[str, int]:
    """Split ``budget`` over keys, none getting more than its size, as evenly as possible."""
    grant = {k: 0 for k in sizes}
    pending = sorted(sizes, key=lambda k: (sizes[k], k))
    remaining = budget
    while pending and remaining > 0:
        share, extra = divmod(remaining, len(pending))
        if share == 0:
            # fewer records left than partitions: one each, in key order (deterministic)
            for k in sorted(pending)[:remaining]:
                grant[k] += 1
            break
        smallest = sizes[pending[0]] - grant[pending[0]]
        if smallest <= share:
            take = sizes[pending[0]] - grant[pending[0]]
            grant[pending[0]] += take
            remaining -= take
            pending.pop(0)
            continue
        for i, k in enumerate(sorted(pending)):
            grant[k] += share + (1 if i < extra else 0)
        break
    return grant


def advance(start: Mapping[str, int], ranges: Iterable[Range]) -> Offsets:
    """The offsets document after reading ``ranges`` from ``start``."""
    out = dict(start)
    for r in ranges:
        out[tp_key(r.topic, r.partition)] = r.until
    return normalize(out)


#: Ranges are only split into pieces at least this large (a task costs ~30 ms, ~15k records).
MIN_SPLIT_RECORDS = 100_000


def pack_ranges(
    ranges: Iterable[Range], target_tasks: int, min_split: int = MIN_SPLIT_RECORDS
) -> list[list[Range]]:
    """Bin-pack ranges into at most ``target_tasks`` tasks of similar record counts.

    Ranges larger than the ideal task size (and ``min_split``) are split so one hot partition does
    not serialize the batch; the pieces of one partition always go to distinct
    tasks (a task reads each topic-partition with a single assignment).
    Largest-first greedy (LPT) keeps the tasks within 4/3 of optimal.
    """
    if target_tasks <= 0:
        raise OffsetsError(f"target_tasks must be positive, got {target_tasks}")
    items = [r for r in ranges if r.count > 0]
    if not items:
        return []
    total = sum(r.count for r in items)
    ideal = max(-(-total // target_tasks), min_split)
    pieces: list[Range] = []
    for r in items:
        n = min(target_tasks, -(-r.count // ideal))
        if n <= 1:
            pieces.append(r)
            continue
        step, extra = divmod(r.count, n)
        lo = r.from_offset
        for i in range(n):
            hi = lo + step + (1 if i < extra else 0)
            pieces.append(Range(r.topic, r.partition, lo, hi))
            lo = hi
    # Keep a topic's partitions in one task when they fit in one: every task writes one data file
    # per table it touches, so spreading a topic over all tasks multiplies the small files.
    per_tp = Counter((r.topic, r.partition) for r in pieces)
    split = {tp for tp, n in per_tp.items() if n > 1}
    by_topic: dict[str, list[Range]] = {}
    units: list[list[Range]] = []
    for piece in pieces:
        if (piece.topic, piece.partition) in split:
            units.append([piece])
        else:
            by_topic.setdefault(piece.topic, []).append(piece)
    for group in by_topic.values():
        if sum(r.count for r in group) <= ideal:
            units.append(group)
        else:
            units.extend([r] for r in group)
    n_bins = min(target_tasks, len(units))
    units.sort(key=lambda u: (-sum(r.count for r in u), u))
    heap = [(0, i) for i in range(n_bins)]
    bins: list[list[Range]] = [[] for _ in range(n_bins)]
    members: list[set[tuple[str, int]]] = [set() for _ in range(n_bins)]
    for unit in units:
        tps = {(r.topic, r.partition) for r in unit}
        weight = sum(r.count for r in unit)
        skipped = []
        load, i = heapq.heappop(heap)
        while tps & members[i]:
            skipped.append((load, i))
            load, i = heapq.heappop(heap)
        bins[i].extend(unit)
        members[i] |= tps
        heapq.heappush(heap, (load + weight, i))
        for item in skipped:
            heapq.heappush(heap, item)
    return [sorted(b) for b in bins if b]


@dataclass
class ResumePlan:
    """Start offsets decided from what the tables hold (router/driver/resume.py computes it on the driver)."""

    resume: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> offset
    backfill: dict[str, int] = field(default_factory=dict)  # new and rolled-back tables: rewinds (source/rewind.py)
    notes: list[str] = field(default_factory=list)  # one line per topic: where it starts and why
    # table -> "topic/partition" -> (from, until): what each backfill reads, until = the end at the start
    # (the driver's start and last log lines; not sent to the source)
    backfills: dict[str, dict[str, tuple[int, int]]] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps({"resume": dict(sorted(self.resume.items())),
                           "backfill": dict(sorted(self.backfill.items()))}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> "ResumePlan":
        doc = json.loads(text) if text else {}
        if not isinstance(doc, dict):
            raise OffsetsError("resume plan must be a JSON object")
        return cls({k: int(v) for k, v in doc.get("resume", {}).items()},
                   {k: int(v) for k, v in doc.get("backfill", {}).items()})


def resume_start(start: Mapping[str, int], end: Mapping[str, int], plan: ResumePlan,
                 keep: Collection[str] = ()) -> Offsets:
    """The offsets a batch really reads from: never below what every table holds (skip ahead),
    except the partitions in ``keep`` (rewinds: read again on purpose, router/source/rewind.py)."""
    out = dict(start)
    for key, hi in end.items():
        lo = start.get(key, 0)
        if key in plan.resume and key not in keep:
            lo = max(lo, plan.resume[key])
        out[key] = min(lo, hi)
    return normalize(out)
