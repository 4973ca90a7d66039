"""One ledger per table: which Kafka records a table holds, asked by every path in one place.

A table's ledger is the job's offsets document (router/progress.py: the table property
``icerouter.offsets.<job>`` and the summary of the snapshot that wrote it), so it moves with the
rows: a rollback, a restore or a compaction carries the ledger of the snapshot the table stands on.
It holds, per "topic/partition":

- ``offsets``: the next offset of the job's contiguous read. Every record below it that routes
  here is in the table, or was dead-lettered for it (a letter says so), or routes elsewhere.
- ``replayed``: the offsets `icerouter dlq replay` put in the table (sorted [lo, hi] runs), and
  ``superseded``: those of upsert letters a newer row won over (the letter is settled, no row).
- ``reads``: where and when each read of the partition began, grouped by when (the reading task's
  wall clock, ms): {"<ms>": {"topic/partition": first offset}}; a table's first read of each
  partition, and every read again after a rollback. A letter older than the read that
  covers its offset was decided again by that read (a route added later took the record then).
- ``gaps``: runs below ``offsets`` the table does not hold: a replay's rows a rollback took away.
  The job reads them again, and its commits close them.

Who asks what:
- the job's tasks drop the rows a table has settled (`Ledger.keep_rows`) and the commit refuses a
  result the table holds in part (`Ledger.overlap`); the driver's start reads from where a table's
  rollback or gaps leave it (`Ledger.rewind_from`);
- `dlq replay` and its dry run ask whether a letter's record is in a table (`Ledger.holds_letter`);
- status, metrics and the consumer group count from the same documents.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import pyarrow as pa

from router.arrays import one_chunk
from router.progress import next_offsets, overlap, stored_and_latest, tp_keys, trim_rows

REPLAYED, SUPERSEDED, READS, GAPS = "replayed", "superseded", "reads", "gaps"
#: replays before the ledger moved into the offsets document kept their offsets in this property
LEGACY_REPLAYED_PROPERTY = "icerouter.replayed.{job}"

Ranges = dict  # "topic/partition" -> sorted disjoint [[lo, hi], ...]


# ----------------------------------------------------------------------------- offset ranges

def add_offsets(ranges: Ranges, taken: Mapping[str, list[int]]) -> Ranges:
    """`ranges` with the offsets of `taken` added, as sorted disjoint [lo, hi] runs per partition."""
    return add_runs(ranges, {k: [[o, o] for o in set(v)] for k, v in taken.items()})


def add_runs(ranges: Ranges, runs: Ranges) -> Ranges:
    out = {k: [list(r) for r in v] for k, v in ranges.items()}
    for key, extra in runs.items():
        merged: list[list[int]] = []
        for lo, hi in sorted([*out.get(key, []), *(list(r) for r in extra)]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        if merged:
            out[key] = merged
    return dict(sorted(out.items()))


def subtract_runs(ranges: Ranges, runs: Ranges) -> Ranges:
    """The offsets of `ranges` that `runs` does not hold."""
    out: Ranges = {}
    for key, mine in ranges.items():
        left = [list(r) for r in mine]
        for lo, hi in runs.get(key, ()):
            cut = []
            for a, b in left:
                if b < lo or a > hi:
                    cut.append([a, b])
                    continue
                if a < lo:
                    cut.append([a, lo - 1])
                if b > hi:
                    cut.append([hi + 1, b])
            left = cut
        if left:
            out[key] = left
    return out


def below(ranges: Ranges, limits: Mapping[str, int]) -> Ranges:
    """The runs of `ranges` below each partition's limit (cut at it)."""
    out: Ranges = {}
    for key, runs in ranges.items():
        cut = [[lo, min(hi, limits.get(key, 0) - 1)] for lo, hi in runs if lo < limits.get(key, 0)]
        if cut:
            out[key] = cut
    return out


def holds(ranges: Ranges, key: str, offset: int) -> bool:
    return any(lo <= offset <= hi for lo, hi in ranges.get(key, ()))


def parse_ranges(raw: str | None) -> Ranges:
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _in_runs(runs: list, offsets: np.ndarray) -> np.ndarray:
    if not runs:
        return np.zeros(len(offsets), dtype=bool)
    los = np.array([r[0] for r in runs], dtype=np.int64)
    his = np.array([r[1] for r in runs], dtype=np.int64)
    i = np.searchsorted(los, offsets, side="right") - 1
    return (i >= 0) & (offsets <= his[np.maximum(i, 0)])


# ----------------------------------------------------------------------------- the ledger

@dataclass(frozen=True)
class Ledger:
    """What one table holds for one job, as of the snapshot it stands on (module docstring)."""

    offsets: dict = field(default_factory=dict)
    replayed: Ranges = field(default_factory=dict)
    superseded: Ranges = field(default_factory=dict)
    reads: dict = field(default_factory=dict)  # "<ms>" -> {key: from offset}: when each read began
    gaps: Ranges = field(default_factory=dict)
    batch_id: int = -1
    doc: dict = field(default_factory=dict)  # the document as stored (the dead-letter table's `settled` too)
    behind: dict = field(default_factory=dict)  # key -> next offset, where the latest commit stood further on

    @property
    def written(self) -> bool:
        """The job or a replay committed rows of this job to the table."""
        return bool(self.offsets or self.replayed or self.superseded)

    @property
    def job_committed(self) -> bool:
        """The job itself committed to the table (a table only replays wrote is still new to it)."""
        return self.batch_id >= 0 or bool(self.offsets)

    def position(self, key: str) -> int:
        """Every record of the partition below this offset is settled for the table: the job's next
        offset, carried on through the runs replays took from there, cut at the first gap."""
        at = self.offsets.get(key, 0)
        for lo, hi in sorted([*self.replayed.get(key, []), *self.superseded.get(key, [])]):
            if lo <= at:
                at = max(at, hi + 1)
        gaps = self.gaps.get(key)
        return min(at, gaps[0][0]) if gaps else at

    def positions(self) -> dict[str, int]:
        """`position` of every partition the table holds records of."""
        keys = {*self.offsets, *self.replayed, *self.superseded}
        return {key: self.position(key) for key in sorted(keys)}

    def settled(self, key: str, offset: int) -> bool:
        """The job has nothing more to write of this record to this table."""
        return ((offset < self.offsets.get(key, 0) and not holds(self.gaps, key, offset))
                or holds(self.replayed, key, offset) or holds(self.superseded, key, offset))

    def keep_rows(self, topics: pa.Array, partitions: pa.Array, offsets: pa.Array) -> pa.Array | None:
        """Mask of the rows the table has not settled (None: it settled none of them)."""
        if not self.written or len(offsets) == 0:
            return None
        if not (self.gaps or self.replayed or self.superseded):  # the common case, tuned in router/progress.py
            return trim_rows(topics, partitions, offsets, self.offsets)
        keys = tp_keys(topics, partitions).dictionary_encode()
        names = keys.dictionary.to_pylist()
        codes = keys.indices.to_numpy(zero_copy_only=False)
        values = np.asarray(one_chunk(offsets).to_numpy(zero_copy_only=False), dtype=np.int64)
        floors = np.array([self.offsets.get(k, -1) for k in names], dtype=np.int64)
        held = values < floors[codes]
        for i, key in enumerate(names):
            if key in self.gaps or key in self.replayed or key in self.superseded:
                mine = codes == i
                at = values[mine]
                held[mine] = (held[mine] & ~_in_runs(self.gaps.get(key, []), at)) \
                    | _in_runs(self.replayed.get(key, []), at) | _in_runs(self.superseded.get(key, []), at)
        return None if not held.any() else pa.array(~held)

    def read_at(self, key: str, offset: int) -> int | None:
        """When the read that covers `offset` began (ms), None when no read of the table covers it."""
        if offset >= self.offsets.get(key, 0) or holds(self.gaps, key, offset):
            return None
        began = None  # the read of the latest start at or below `offset`
        for ms, starts in self.reads.items():
            start = starts.get(key)
            if start is not None and start <= offset and (began is None or start > began[0]):
                began = (start, int(ms))
        if began is None:
            return 0 if key in self.offsets and not self._read(key) else None  # read before reads were kept
        return began[1]

    def _read(self, key: str) -> bool:
        return any(key in starts for starts in self.reads.values())

    def holds_letter(self, key: str, offset: int, failed_ms: int, concerned: bool = True) -> bool:
        """The letter's record is in the table (or settled for it by a replay).

        A letter proves the read that made it did not put its record in the tables it concerns; a read
        that began after the letter decided the record again (a route added since, a rollback). A table
        the letter does not concern (another route's, when its own route is gone) read the record then."""
        if holds(self.replayed, key, offset) or holds(self.superseded, key, offset):
            return True
        began = self.read_at(key, offset)
        if began is None:
            return False
        return not concerned or began > failed_ms

    def was_superseded(self, key: str, offset: int) -> bool:
        return holds(self.superseded, key, offset)

    def overlap(self, covered: Mapping[str, list]) -> str | None:
        """None when a result's rows are new to the table, "all" when it holds all of them, else why not."""
        gaps = {k for k in covered if k in self.gaps}
        plain = {k: v for k, v in covered.items() if k not in gaps}
        held, partial = overlap(self.offsets, plain)
        for key in gaps:  # a read again of a gap: new when it starts in one
            lo, hi = covered[key]
            (held if self.settled(key, lo) and self.settled(key, hi) else partial if self.settled(key, lo)
             else []).append(key)
        if not held and not partial:
            return None
        if held and not partial and len(held) == len(covered):
            return "all"
        keys = sorted(partial or held)
        return (f"the table already holds part of these rows ({', '.join(keys[:3])}: next offset "
                f"{self.offsets.get(keys[0], 0)}, rows from {covered[keys[0]][0]}); is a second job using "
                "this job name?")

    def rewind_from(self) -> dict[str, int]:
        """{"topic/partition": offset} where the job must read again from, below its next offset: the
        table was rolled back (or restored) since the job's latest commit to it, or it has gaps."""
        out = dict(self.behind)
        for key, runs in self.gaps.items():
            out[key] = min(out.get(key, runs[0][0]), runs[0][0])
        return out

    def advance(self, covered: Mapping[str, list], batch_id: int, read_ms: int | None) -> dict:
        """The document after a commit of rows covering `covered` ({key: [min, max]}), read at `read_ms`."""
        doc = {k: v for k, v in self.doc.items() if k not in ("at_snapshot",)}
        doc["batch_id"] = batch_id
        doc["offsets"] = next_offsets(self.offsets, covered)
        reads, now = dict(self.reads), str(int(read_ms or 0))
        rewinds = self.rewind_from()
        for key, (lo, hi) in covered.items():
            again = rewinds.get(key)
            if key in self.offsets and again is None:
                continue  # the read goes on
            start = lo if again is None else min(lo, again)
            if again is not None:  # a read again replaces the reads that began at or past its start
                for ms, starts in list(reads.items()):
                    if starts.get(key, -1) >= start:
                        reads[ms] = {k: v for k, v in starts.items() if k != key}
            reads[now] = {**reads.get(now, {}), key: start}
        reads = {ms: starts for ms, starts in reads.items() if starts}
        gaps = subtract_runs(self.gaps, {k: [[0, hi]] for k, (_, hi) in covered.items()}) if self.gaps else {}
        for name, value in ((REPLAYED, self.replayed), (SUPERSEDED, self.superseded), (READS, reads), (GAPS, gaps)):
            if value:
                doc[name] = value if value is self.doc.get(name) else dict(sorted(value.items()))
            else:
                doc.pop(name, None)
        return doc

    def with_replayed(self, taken: Mapping[str, list[int]], superseded: Mapping[str, list[int]]) -> dict:
        """The document after a replay committed the offsets `taken` (of which `superseded` lost to
        newer rows): ranges added, the rest as it was."""
        doc = {k: v for k, v in self.doc.items() if k != "at_snapshot"}
        doc.setdefault("batch_id", self.batch_id)
        doc.setdefault("offsets", dict(self.offsets))
        lost = {k: [o for o in v if o in set(superseded.get(k, ()))] for k, v in taken.items()}
        landed = {k: [o for o in v if o not in set(superseded.get(k, ()))] for k, v in taken.items()}
        for name, ranges, extra in ((REPLAYED, self.replayed, landed), (SUPERSEDED, self.superseded, lost)):
            merged = add_offsets(ranges, {k: v for k, v in extra.items() if v})
            if merged:
                doc[name] = merged
        return doc


def from_document(doc: dict | None, latest: dict | None = None, legacy: str | None = None) -> Ledger:
    """The ledger of a stored document (`latest`: the job's latest commit, the table property; `legacy`:
    the old replayed property)."""
    doc = doc or {}
    replayed = doc.get(REPLAYED) or {}
    if REPLAYED not in doc and legacy:
        replayed = parse_ranges(legacy)
    offsets = dict(doc.get("offsets") or {})
    latest = latest or {}
    behind = {k: offsets.get(k, 0) for k, v in (latest.get("offsets") or {}).items() if offsets.get(k, 0) < v}
    # a replay's rows the table lost (rolled back past the replay, not past the read): gaps to read again
    lost = below(subtract_runs(latest.get(REPLAYED) or {}, replayed), offsets)
    return Ledger(offsets=offsets, replayed=replayed, superseded=doc.get(SUPERSEDED) or {},
                  reads=doc.get(READS) or {}, gaps=add_runs(doc.get(GAPS) or {}, lost),
                  batch_id=int(doc.get("batch_id", -1)), doc=doc, behind=behind)


def table_ledger(table, job: str, doc: dict | None = None) -> Ledger:
    """The ledger of `job` on `table` (a loaded table or a router.catalog.progress_views.TableView), as
    of its current snapshot. `doc`: `stored_progress(table, job)` when known."""
    stored, latest = stored_and_latest(table, job)
    return from_document(stored if doc is None else doc, latest,
                         table.metadata.properties.get(LEGACY_REPLAYED_PROPERTY.format(job=job)))


def property_document(doc: dict) -> dict:
    """The document as the table property keeps it: without `reads`, which only the snapshot that holds
    the rows needs (the property answers for the latest commit's offsets, replays and gaps; a letter
    against a table whose summaries are gone is taken as older than its reads)."""
    return {k: v for k, v in doc.items() if k != READS}
