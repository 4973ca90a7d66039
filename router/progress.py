"""What each table already holds, by Kafka offset: the source of truth for exactly-once.

Every commit of the job stores, per table, the next Kafka offset per
topic-partition ("every record of that partition below this offset that routes
here is in the table"). The same document goes into the table property
``icerouter.offsets.<job>`` (fast to read, survives snapshot expiry) and into the
summary of the snapshot it commits (moves with the data: a table rolled back to
an older snapshot reports the offsets of that snapshot, not the property's).

Shared by both sides: executors drop rows a table already holds before writing
(`trim_mask`); the commit (router/catalog/commit.py, in a task or on the
driver) skips a result the table holds entirely and refuses one it holds in
part (`overlap`); the driver computes where to start reading when the Spark
checkpoint is missing or disagrees with the tables (router/driver/resume.py).

The dead-letter table's document keeps two maps: ``offsets`` (next offset per
"<table>|topic/partition", the table a dead letter was headed for, empty before
routing) to trim replayed dead letters exactly, and ``settled`` (per
topic-partition, everything the batch read), committed with every batch after
all the other tables, so it says "every record below this offset is settled".
A batch without dead letters moves only its property (no snapshot), which then
names the table's snapshot at that commit (``at_snapshot``): `stored_progress`
reads the property while that snapshot is still the current one.
"""

from __future__ import annotations

import json
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from router.arrays import one_chunk
from router.source.offsets import KEY_SEPARATOR

OFFSETS_PROPERTY = "icerouter.offsets.{job}"
ANCESTORS_SEARCHED = 64  # snapshots walked back from the current one looking for our summary
LETTER_SEPARATOR = "|"


def property_name(job: str) -> str:
    return OFFSETS_PROPERTY.format(job=job)


def empty_progress() -> dict:
    return {"batch_id": -1, "offsets": {}}


def _parse(raw: str | None) -> dict | None:
    if not raw:
        return None
    try:
        doc = json.loads(raw)
    except (TypeError, ValueError):
        return None
    return doc if isinstance(doc, dict) and isinstance(doc.get("offsets", {}), dict) else None


def stored_progress(table, job: str) -> dict:
    """The progress document of `job` on `table`, as of the table's current snapshot.

    Walks back from the current snapshot to the newest one whose summary carries
    the job's document (the job's own commits, and compactions, which carry
    their parent's; other writers' snapshots are passed over) and reads it;
    when none is reachable (expired, or written before summaries carried it),
    the table property answers. A partition the summary lacks but the property
    holds reads as next offset 0 (`_behind`).
    """
    return stored_and_latest(table, job)[0]


def stored_and_latest(table, job: str) -> tuple[dict, dict | None]:
    """(`stored_progress`, the job's latest commit's document: the table property, parsed once)."""
    name = property_name(job)
    metadata = table.metadata
    prop = _parse(metadata.properties.get(name))
    if prop is not None and "at_snapshot" in prop and _latest_word(metadata, prop["at_snapshot"], job):
        return prop, prop  # moved without a snapshot (dead-letter table, batch without letters)
    for snapshot in _ancestors(metadata):
        summary = snapshot.summary
        doc = _parse(summary.additional_properties.get(name) if summary is not None else None)
        if doc is not None:
            return _behind(doc, prop), prop
    return prop or empty_progress(), prop


def _latest_word(metadata, at_snapshot, job: str) -> bool:
    """The property, moved without a snapshot on `at_snapshot`, still says what the table holds: that
    snapshot is the current one, or is reached from it over snapshots the job did not commit (a
    compaction carries an older summary of its parent's ancestors; a replay). Read by commit order,
    never by batch id (batch ids start again at 0 when the checkpoint is lost)."""
    for snapshot in _ancestors(metadata):
        if snapshot.snapshot_id == at_snapshot:
            return True
        summary = snapshot.summary.additional_properties if snapshot.summary is not None else {}
        if summary.get("icerouter.job") == job:
            return False
    return at_snapshot is None and metadata.current_snapshot_id is None


def _ancestors(metadata):
    """The current snapshot and its ancestors still in the metadata, newest first, at most ANCESTORS_SEARCHED."""
    by_id = {s.snapshot_id: s for s in metadata.snapshots}
    snapshot_id = metadata.current_snapshot_id
    for _ in range(ANCESTORS_SEARCHED):
        snapshot = by_id.get(snapshot_id) if snapshot_id is not None else None
        if snapshot is None:
            return
        yield snapshot
        snapshot_id = snapshot.parent_snapshot_id


def held_summaries(metadata) -> dict[str, str]:
    """Every job's offsets document as of the current snapshot (each the nearest ancestor's), as
    snapshot summary properties. A snapshot that rewrites the same rows (compaction) carries them,
    so a table rolled back to it reports what it holds even after its parents expired."""
    prefix = OFFSETS_PROPERTY.format(job="")
    found: dict[str, str] = {}
    for snapshot in _ancestors(metadata):
        for key, value in (snapshot.summary.additional_properties if snapshot.summary else {}).items():
            if key.startswith(prefix):
                found.setdefault(key, value)
    return found


def _behind(doc: dict, prop: dict | None) -> dict:
    """`doc`, plus next offset 0 for each partition the property (the job's latest commit) holds and
    `doc` does not: the table was rolled back to before its first rows of that partition, so it
    holds none of them. Left out, the job would take the partition's start from the other tables
    and never give this one back the rows it lost."""
    offsets = doc.get("offsets", {})
    gone = [key for key in (prop or {}).get("offsets", {}) if key not in offsets]
    if not gone:
        return doc
    return {**doc, "offsets": dict(sorted({**offsets, **dict.fromkeys(gone, 0)}.items()))}


def next_offsets(previous: Mapping[str, int], covered: Mapping[str, list]) -> dict:
    """Merge what a batch covered ({key: [min, max]}) into {key: next_offset}, sorted."""
    merged = dict(previous)
    for key, (_, hi) in covered.items():
        merged[key] = max(merged.get(key, 0), hi + 1)
    return dict(sorted(merged.items()))


def overlap(stored: Mapping[str, int], covered: Mapping[str, list]) -> tuple[list[str], list[str]]:
    """(keys the table already holds entirely, keys it holds in part) for what a result covers."""
    held, partial = [], []
    for key, (lo, hi) in covered.items():
        nxt = stored.get(key, 0)
        if nxt > hi:
            held.append(key)
        elif nxt > lo:
            partial.append(key)
    return held, partial


def _array(values) -> pa.Array:
    return one_chunk(values)


def tp_keys(topics: pa.Array, partitions: pa.Array, tables: pa.Array | None = None) -> pa.Array:
    """`router.source.offsets.tp_key` per row ("topic/partition"), or "<table>|topic/partition" when
    `tables` (dead letters) is given."""
    topics, partitions = _array(topics).cast(pa.string()), _array(partitions)
    keys = pc.binary_join_element_wise(topics, pc.cast(partitions, pa.string()), KEY_SEPARATOR)
    if tables is not None:
        keys = pc.binary_join_element_wise(pc.fill_null(_array(tables).cast(pa.string()), ""), keys, LETTER_SEPARATOR)
    return keys


def widen(into: dict, other: Mapping[str, list]) -> None:
    """Widen `into` ({key: [min, max]}) by the ranges of `other`."""
    for key, (lo, hi) in other.items():
        cur = into.get(key)
        into[key] = [min(lo, cur[0]), max(hi, cur[1])] if cur else [lo, hi]


#: Below this many rows the row helpers below loop in Python: Arrow's string joins, group-by and
#: dictionary encoding cost ~0.1 ms each even for the 30 rows of a table in a small batch.
SMALL_ROWS = 256


def _small_keys(topics, partitions) -> list[str]:
    """`tp_keys` as Python strings (the same text: Arrow casts integers to decimal strings too)."""
    return [f"{t}{KEY_SEPARATOR}{p}" for t, p in zip(_array(topics).to_pylist(), _array(partitions).to_pylist())]


def cover_rows(topics: pa.Array, partitions: pa.Array, offsets: pa.Array, into: dict) -> None:
    """`cover(tp_keys(topics, partitions), offsets, into)`."""
    if len(offsets) >= SMALL_ROWS:
        cover(tp_keys(topics, partitions), offsets, into)
        return
    ranges: dict = {}
    for key, offset in zip(_small_keys(topics, partitions), _array(offsets).to_pylist()):
        cur = ranges.get(key)
        if cur is None:
            ranges[key] = [offset, offset]
        elif offset < cur[0]:
            cur[0] = offset
        elif offset > cur[1]:
            cur[1] = offset
    widen(into, ranges)


def trim_rows(topics: pa.Array, partitions: pa.Array, offsets: pa.Array, stored: Mapping[str, int]) -> pa.Array | None:
    """`trim_mask(tp_keys(topics, partitions), offsets, stored)`."""
    if not stored or len(offsets) == 0:
        return None
    if len(offsets) >= SMALL_ROWS:
        return trim_mask(tp_keys(topics, partitions), offsets, stored)
    keep = [offset >= stored.get(key, -1)
            for key, offset in zip(_small_keys(topics, partitions), _array(offsets).to_pylist())]
    return None if all(keep) else pa.array(keep)


def cover(keys: pa.Array, offsets: pa.Array, into: dict) -> None:
    """Widen `into` ({key: [min, max]}) by the offsets of each key."""
    if len(offsets) == 0:
        return
    grouped = pa.table({"k": keys, "o": offsets}).group_by("k").aggregate([("o", "min"), ("o", "max")])
    widen(into, {k: [lo, hi] for k, lo, hi in zip(*(grouped.column(c).to_pylist() for c in ("k", "o_min", "o_max")))})


def trim_mask(keys: pa.Array, offsets: pa.Array, stored: Mapping[str, int]) -> pa.Array | None:
    """Boolean mask of the rows a table does not hold yet; None when it holds none of them.

    `stored` maps each key (see `tp_keys`) to the next offset the table expects.
    """
    if not stored or len(offsets) == 0:
        return None
    encoded = _array(keys).dictionary_encode()
    floors = np.array([stored.get(k, -1) for k in encoded.dictionary.to_pylist()], dtype=np.int64)
    if (floors < 0).all():
        return None
    floor = floors[encoded.indices.to_numpy(zero_copy_only=False)]
    keep = np.asarray(_array(offsets).to_numpy(zero_copy_only=False), dtype=np.int64) >= floor
    return None if keep.all() else pa.array(keep)
