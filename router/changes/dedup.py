"""The last change per key of a batch, computed column-wise (one sort, then numpy reductions).

Which change of a key is the last:

1. With ``sequence_by``, the change with the highest sequence value. A change
   without one (an upsert tombstone, a null column) takes the value of the
   change before it of the same key in the same topic-partition (offset order);
   when there is none, it is older than every change that has a value.
2. Among changes with that same sequence value (and always without
   ``sequence_by``), the last one by offset within each topic-partition: the
   log's order within a partition is never overruled.
3. When several topic-partitions remain (fan-in with equal sequence values),
   the highest op priority c < r < u < d wins (as debezium-server-iceberg),
   then the highest offset, then the topic-partition sorted last.

The result: every key touched (their current rows are to be deleted) and the
images of the keys whose last change is not a delete (to be inserted).
Within one call; across batches the stored row's sequence value decides at
commit (router/catalog/sequence.py): a change older than the live row is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from router.arrays import one_chunk
from router.changes.exceptions import ChangeStreamError, KeyColumnsError
from router.changes.extract import OP_DELETE, ChangeSet

__all__ = ["FinalImages", "Resolved", "last_change_per_key"]

_OFFSET_BITS = 58  # score = op priority << 58 | offset rank
_UNKNOWN = np.iinfo(np.int64).min  # sequence of a change with none and nothing before it


@dataclass(frozen=True)
class FinalImages:
    """Rows to insert that came from one ChangeSet (its table columns), in offset order."""

    change_set: int  # position of the ChangeSet in the input
    source: Any  # that ChangeSet's tag
    image: pa.Table
    rows: np.ndarray  # the caller's row positions of these images
    sequence: pa.Array | None = None  # their sequence_by values (None without sequence_by)


@dataclass(frozen=True)
class Resolved:
    """``touched``: each key changed in the batch once (key columns); ``last_op[i]`` is the op
    of key i's last change; ``inserts``: the final images of keys whose last op is not a delete."""

    touched: pa.Table
    last_op: np.ndarray
    inserts: tuple[FinalImages, ...]
    changes: int
    sequence: pa.Array | None = None  # sequence_by value of key i's last change (null: none known)

    @property
    def deleted(self) -> int:
        """Keys whose last change is a delete."""
        return int((self.last_op == OP_DELETE).sum())

    @property
    def inserted(self) -> int:
        return sum(f.image.num_rows for f in self.inserts)


def _concat(arrays: list[pa.Array]) -> pa.Array:
    """One array, types unified as ``concat_tables(promote_options="permissive")`` does (int -> long, null)."""
    if len(arrays) == 1:
        return one_chunk(arrays[0])
    table = pa.concat_tables([pa.table({"c": a}) for a in arrays], promote_options="permissive")
    return one_chunk(table.column(0))


def _key_ids(keys: pa.Table) -> np.ndarray:
    """One int64 per row, equal exactly when all key columns are equal."""
    cols = [one_chunk(c) for c in keys.columns]
    if len(cols) == 1 and pa.types.is_integer(cols[0].type) and not cols[0].null_count:
        return cols[0].to_numpy().astype(np.int64, copy=False)
    ids, cardinality = None, 1
    for col in cols:
        if pa.types.is_temporal(col.type):
            col = col.cast(pa.int64() if col.type.bit_width == 64 else pa.int32())
        encoded = pc.dictionary_encode(col)
        codes = encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        size = max(len(encoded.dictionary), 1)
        if ids is None:
            ids, cardinality = codes, size
            continue
        if cardinality * size >= 1 << 62:  # re-number densely before the product overflows
            uniques, ids = np.unique(ids, return_inverse=True)
            cardinality = len(uniques)
        ids, cardinality = ids * size + codes, cardinality * size
    return ids


def _topic_partitions(sets: list[ChangeSet]) -> np.ndarray:
    """One int64 per change naming its (topic, partition)."""
    codes: dict[str, int] = {}
    parts = []
    for s in sets:
        topic = s.topic if pa.types.is_dictionary(s.topic.type) else pc.dictionary_encode(s.topic)
        lookup = np.array([codes.setdefault(t, len(codes)) for t in topic.dictionary.to_pylist()] or [0], np.int64)
        parts.append((lookup[topic.indices.to_numpy(zero_copy_only=False)] << 32) | s.partition)
    return np.concatenate(parts)


def _sequence(sets: list[ChangeSet]) -> tuple[np.ndarray, np.ndarray] | None:
    """Sequence values as order-preserving int64 plus their validity; None without sequence_by."""
    if all(s.sequence is None for s in sets):
        return None
    try:
        seq = _concat([s.sequence if s.sequence is not None else pa.nulls(len(s)) for s in sets])
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise ChangeStreamError(f"sequence_by values of one table have types that do not compare: {exc}") from None
    valid = seq.is_valid().to_numpy(zero_copy_only=False)
    t = seq.type
    if pa.types.is_null(t):
        return np.zeros(len(seq), np.int64), valid
    if pa.types.is_temporal(t):
        seq, t = seq.cast(pa.int64() if t.bit_width == 64 else pa.int32()), pa.int64()
    if pa.types.is_integer(t) and t != pa.uint64():
        return seq.fill_null(0).to_numpy().astype(np.int64, copy=False), valid
    ranks = pc.rank(seq, sort_keys="ascending", tiebreaker="dense")  # strings, decimals, floats
    return ranks.to_numpy().astype(np.int64), valid


def _fill_unknown(kid: np.ndarray, tp: np.ndarray, offset: np.ndarray, seq: np.ndarray,
                  valid: np.ndarray) -> np.ndarray:
    """A missing sequence value takes the previous one of its key in its topic-partition (or _UNKNOWN)."""
    order = np.lexsort((offset, tp, kid))
    k, t, v = kid[order], tp[order], valid[order]
    i = np.arange(len(order))
    run_start = np.ones(len(order), dtype=bool)
    run_start[1:] = (k[1:] != k[:-1]) | (t[1:] != t[:-1])
    start_of = np.maximum.accumulate(np.where(run_start, i, 0))
    last_valid = np.maximum.accumulate(np.where(v, i, -1))
    filled = np.where(last_valid >= start_of, seq[order][np.maximum(last_valid, 0)], _UNKNOWN)
    out = np.empty_like(seq)
    out[order] = filled
    return out


def last_change_per_key(changes: ChangeSet | Sequence[ChangeSet]) -> Resolved:
    """Resolve the changes of one table in one batch (all its ChangeSets together) to keys and images."""
    sets = [changes] if isinstance(changes, ChangeSet) else list(changes)
    if not sets:
        raise ValueError("last_change_per_key needs at least one ChangeSet")
    names = sets[0].keys.schema.names
    if any(s.keys.schema.names != names for s in sets):
        raise ValueError("ChangeSets of one table must have the same key columns")
    sizes = np.array([len(s) for s in sets], dtype=np.int64)
    n = int(sizes.sum())
    nonempty = [s.keys for s in sets if len(s)] or [sets[0].keys]
    try:
        keys = pa.concat_tables(nonempty, promote_options="permissive") if len(nonempty) > 1 else nonempty[0]
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        raise KeyColumnsError(f"key columns of one table have types that do not compare: {exc}") from None
    if n == 0:
        return Resolved(keys.slice(0, 0), np.empty(0, np.int8), (), 0)
    ops = np.concatenate([s.ops for s in sets])
    offset = np.concatenate([s.offset for s in sets])
    tp = _topic_partitions(sets)
    kid = _key_ids(keys)
    sequence = _sequence(sets)
    seq = None
    if sequence is not None:
        seq, valid = sequence
        if not valid.all():
            seq = _fill_unknown(kid, tp, offset, seq, valid)
    order = np.lexsort((offset, tp, kid) if seq is None else (offset, tp, seq, kid))

    k, t = kid[order], tp[order]
    changed = k[1:] != k[:-1]
    starts = np.flatnonzero(np.concatenate(([True], changed)))
    lengths = np.diff(np.append(starts, n))
    run_end = np.ones(n, dtype=bool)  # last change of its (key, sequence, topic-partition) run
    run_end[:-1] = changed | (t[1:] != t[:-1])
    if seq is not None:
        s = seq[order]
        run_end[:-1] |= s[1:] != s[:-1]
        run_end &= s == np.repeat(s[starts + lengths - 1], lengths)  # only the key's highest sequence
    rank = offset if offset.max() < 1 << _OFFSET_BITS and offset.min() >= 0 else \
        np.unique(offset, return_inverse=True)[1].astype(np.int64)
    score = np.where(run_end, (ops[order].astype(np.int64) << _OFFSET_BITS) | rank[order], -1)
    best = np.maximum.reduceat(score, starts)
    position = np.where(score == np.repeat(best, lengths), np.arange(n), -1)
    winners = order[np.maximum.reduceat(position, starts)]

    last_op = ops[winners]
    inserted = np.sort(winners[last_op != OP_DELETE])
    bounds = np.concatenate(([0], np.cumsum(sizes)))
    cuts = np.searchsorted(inserted, bounds)
    inserts = []
    for j, s in enumerate(sets):
        local = inserted[cuts[j]:cuts[j + 1]] - bounds[j]
        if len(local):
            inserts.append(FinalImages(j, s.source, s.images(local), s.rows[local],
                                       None if s.sequence is None else s.sequence.take(pa.array(local))))
    touched = keys.take(pa.array(order[starts]))
    values = None
    if sequence is not None:
        values = _concat([s.sequence if s.sequence is not None else pa.nulls(len(s)) for s in sets])
        values = values.take(pa.array(winners))
    return Resolved(touched, last_op, tuple(inserts), n, values)
