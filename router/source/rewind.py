"""Backfills and rewinds read in bounded batches, and run even when no new record arrives.

Why: Spark runs a micro-batch only when the end offsets it is given differ from
the start (the checkpoint). A new route on a quiet topic (its table must be
backfilled from `kafka.starting_offsets`) or a table rolled back behind the
checkpoint needs records *below* the checkpoint: with no new records, Spark
would never run the batch, and reading the whole backlog in the first batch
ignores `kafka.max_records_per_batch`.

So a partition that must be read again carries a *rewind cursor* in the offsets
document itself, under a key no topic can have (``#rewind:<topic>/<partition>``:
'#' is not legal in a Kafka topic name). Each batch reads the cursor's next
stretch, within the batch limit shared with the other partitions, and moves the
cursor; the partition's own position waits until the cursor passes it, then the
key leaves the document and the position moves on to where the read got. Every change of the
document is a batch Spark runs, so a cursor that reaches its position in the batch that opens it
(a backlog within one batch, the usual case) stays in the document at its position and closes in
the next batch: without it the end would equal the start and no batch would run. The checkpoint
keeps the cursor, so a restart goes on where the rewind was. The
tables drop what they already hold (router/progress.py), so nothing is written
twice; if the checkpoint is lost, the tables' offsets plan the start again
(router/driver/resume.py).
"""

from __future__ import annotations

from typing import Mapping

from router.source.offsets import Offsets, Range, advance, merge_end, normalize, plan_limited, split_key

__all__ = ["REWIND_PREFIX", "split_rewinds", "join_rewinds", "open_rewinds", "next_end", "batch_ranges"]

REWIND_PREFIX = "#rewind:"


def split_rewinds(doc: Mapping[str, int]) -> tuple[Offsets, Offsets]:
    """(positions, rewind cursors), both keyed by "topic/partition"."""
    positions, rewinds = {}, {}
    for key, value in doc.items():
        if key.startswith(REWIND_PREFIX):
            rewinds[key[len(REWIND_PREFIX):]] = value
        else:
            positions[key] = value
    return normalize(positions), normalize(rewinds)


def join_rewinds(positions: Mapping[str, int], rewinds: Mapping[str, int]) -> Offsets:
    """The offsets document Spark checkpoints: positions plus the open cursors."""
    return normalize({**positions, **{REWIND_PREFIX + k: v for k, v in rewinds.items()}})


def open_rewinds(positions: Mapping[str, int], backfill: Mapping[str, int]) -> Offsets:
    """Cursors for the partitions whose backfill starts below where the checkpoint stands."""
    return normalize({k: v for k, v in backfill.items() if k in positions and v < positions[k]})


def next_end(start: Mapping[str, int], latest: Mapping[str, int], max_records: int | None, catch_up: str,
             turn: str | None, opened: Mapping[str, int] | None = None) -> tuple[Offsets, str | None]:
    """The end document of the next batch from its start (cursors included) and the latest offsets.

    ``opened``: cursors to open now (the first batch after a start). A rewinding partition reads
    from its cursor up to its position, within ``max_records`` shared with the others."""
    positions, rewinds = split_rewinds(start)
    rewinds = {**rewinds, **(opened or {})}
    end = merge_end(positions, latest)
    lo = {**positions, **rewinds}
    if max_records:
        ranges, turn = plan_limited(lo, end, max_records, catch_up, turn)
        reached = advance(lo, ranges)
    else:
        reached = end
    # a cursor short of its partition's position stays open, the position waits for it; one that
    # passed it closes, and the position moves on to where the read got. A partition new to the
    # document (a topic found by pattern) that the limit left no room for joins in a later batch.
    cursors = {k: reached[k] for k in rewinds if reached[k] < positions[k]}
    doc = join_rewinds({k: (positions[k] if k in cursors else v) for k, v in reached.items()}, cursors)
    if doc == normalize(start):
        # Cursors opened now that reach their position within this very batch (a backlog that fits
        # in one batch) would leave the document as it was, and Spark runs no batch for an end equal
        # to its start: they stay in it, at their position, and close in the next batch.
        cursors = {k: positions[k] for k in (opened or {}) if reached[k] > (opened or {})[k]}
        doc = join_rewinds({k: v for k, v in reached.items()}, cursors)
    return doc, turn


def batch_ranges(start: Mapping[str, int], end: Mapping[str, int],
                 opened: Mapping[str, int] | None = None) -> tuple[Offsets, Offsets]:
    """(from, until) per partition of a batch planned by `next_end` (``opened``: as it was given).
    A rewinding partition reads from its cursor to its next cursor, or on past its position when
    the cursor closes: one contiguous range per partition."""
    s_pos, s_rew = split_rewinds(start)
    e_pos, e_rew = split_rewinds(end)
    s_rew = {**s_rew, **(opened or {})}
    begin = {k: s_rew.get(k, v) for k, v in s_pos.items()}
    until = {k: e_rew.get(k, v) for k, v in e_pos.items()}
    for key in until:
        split_key(key)
    return normalize(begin), normalize(until)


def rewind_ranges(start: Mapping[str, int], end: Mapping[str, int],
                  opened: Mapping[str, int] | None = None) -> list[Range]:
    """The non-empty ranges of a batch (for tests and logs)."""
    begin, until = batch_ranges(start, end, opened)
    return [Range(*split_key(k), begin.get(k, 0), v) for k, v in until.items() if v > begin.get(k, 0)]
