"""Decoded Kafka records -> changes (key, op, image, sequence, position), column-wise.

Runs on the executors, on Arrow only. One call handles the rows of one writer
schema (``decode_values``'s ``group.batch``) or the tombstones of a topic, with
the Kafka keys of the same rows (``decode_kafka_keys(...).take(indices)``).

Where a change's key comes from:

* a row with an image to write (Debezium c/r/u: ``after``; upsert: the value):
  from the image when the key columns are fields of its schema, else from the
  Kafka key. A null key column in an image is bad input (the row could never be
  found again);
* a Debezium delete: from ``before`` when it holds the key, else the Kafka key;
* an upsert-mode tombstone: from the Kafka key. A Debezium-mode tombstone
  (written after each delete for log compaction) is consumed: no change.

A Kafka key of a primitive type (decoded as one column ``value``) supplies the
single key column whatever its name. Every input row ends up in exactly one of
``changes``, ``bad`` (dead letters: error class + reason) or ``consumed``.

Dead-letter classes: ``unknown_op`` (op not c/r/u/d, or null), ``missing_after``
(c/r/u without ``after``), ``not_envelope`` (no ``op`` / ``after`` in this writer
schema), ``null_key`` (a key column or the Kafka key is null), ``missing_key``
(key columns neither in the row nor in the Kafka key), ``key_<decode class>``
(e.g. ``key_wire_format``: the Kafka key did not decode where it was needed),
``key_schema_conflict``, ``key_type`` (a Kafka key column that does not cast to
the row's type), ``delete_without_key`` (a delete without ``before`` and without
a usable Kafka key), ``missing_sequence`` (no ``sequence_by`` field, or one of a
type that does not order).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from registry.client import CachedRegistry
from registry.decode import DecodeFailure, DecodeResult, decode_keys
from router.arrays import one_chunk
from router.changes.envelope import (
    AFTER_FIELD, BEFORE_FIELD, FLAT_DELETED_FIELD, FLAT_FIELDS, FLAT_OP_FIELD, OP_FIELD, is_flattened,
)
from router.changes.exceptions import ChangeStreamError
from router.routing.columns import field_column

__all__ = ["BAD_INPUT_CLASSES", "UPSERT", "DEBEZIUM", "OP_CREATE", "OP_READ", "OP_UPDATE", "OP_DELETE", "OP_CODES",
           "ChangeSpec", "BadInput", "KafkaKeys", "ChangeSet", "decode_kafka_keys", "kafka_keys_of", "extract_changes"]

UPSERT, DEBEZIUM = "upsert", "debezium"
#: Op codes; their order is the tie-break of equal sequence values across partitions (c < r < u < d).
OP_CREATE, OP_READ, OP_UPDATE, OP_DELETE = 0, 1, 2, 3
OP_CODES = {"c": OP_CREATE, "r": OP_READ, "u": OP_UPDATE, "d": OP_DELETE}
_OTHER_OPS = {"t": "truncate", "m": "message"}  # Debezium ops that carry no row change
#: error classes of dead-lettered rows (plus ``key_<class>`` for each of registry.decode.ERROR_CLASSES)
BAD_INPUT_CLASSES = ("unknown_op", "missing_after", "not_envelope", "null_key", "missing_key", "key_schema_conflict",
                     "key_type", "delete_without_key", "missing_sequence")


@dataclass(frozen=True)
class ChangeSpec:
    """How a route reads changes.

    ``sequence_by``: a dotted path in the value (the whole envelope in Debezium
    mode: ``source.lsn``, ``ts_ms``), or None to rely on offsets alone."""

    mode: str  # UPSERT | DEBEZIUM
    key: tuple[str, ...]
    sequence_by: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", tuple(self.key))
        if self.mode not in (UPSERT, DEBEZIUM):
            raise ChangeStreamError(f"unknown change mode {self.mode!r}; use {UPSERT!r} or {DEBEZIUM!r}")
        if not self.key or len(set(self.key)) != len(self.key):
            raise ChangeStreamError(f"key columns must be distinct and at least one, got {list(self.key)}")


@dataclass(frozen=True)
class BadInput:
    """Rows (the caller's positions) dead-lettered for one reason."""

    rows: np.ndarray
    error_class: str
    reason: str


@dataclass(frozen=True)
class KafkaKeys:
    """Decoded Kafka keys, one row per record; where a key did not decode its row is null
    and ``error_class`` / ``reason`` say why (None where it decoded)."""

    table: pa.Table
    error_class: np.ndarray
    reason: np.ndarray

    def __len__(self) -> int:
        return len(self.error_class)

    def take(self, indices: Any) -> "KafkaKeys":
        idx = np.asarray(indices, dtype=np.int64)
        table = self.table.take(pa.array(idx)) if self.table.num_columns else self.table
        return KafkaKeys(table, self.error_class[idx], self.reason[idx])


def decode_kafka_keys(registry: CachedRegistry, keys: Any, *, headers: Sequence[Any] | None = None) -> KafkaKeys:
    """Decode wire-format keys (Avro or JSON Schema) with the value decoder; transient registry errors raise."""
    return kafka_keys_of(decode_keys(registry, keys, "avro", headers=headers), len(keys))


def kafka_keys_of(result: DecodeResult, n: int) -> KafkaKeys:
    """The keys a decode of `n` Kafka keys gave (framed, or by an unframed route's format: a
    Debezium JSON topic's keys are Connect JSON like its values); transient registry errors raise."""
    transient = [f for f in result.failures if f.transient]
    if transient:
        raise transient[0].to_exception()
    result.failures = [f if f.error_class != "tombstone" else
                       DecodeFailure(f.index, f.schema_id, "null_key", "null key", False) for f in result.failures]
    error_class = np.full(n, None, dtype=object)
    reason = np.full(n, None, dtype=object)
    for f in result.failures:
        error_class[f.index] = f.error_class if f.error_class == "null_key" else f"key_{f.error_class}"
        reason[f.index] = f.reason
    groups = sorted(result.groups, key=lambda g: -g.batch.num_rows)
    if len(groups) == 1 and len(groups[0].indices) == n and (np.diff(groups[0].indices) == 1).all():
        return KafkaKeys(pa.Table.from_batches([groups[0].batch]), error_class, reason)
    tables, indices = [], []
    for g in groups:  # keys of several schemas: columns by name, widened; a clash fails that schema's rows
        part = pa.Table.from_batches([g.batch])
        try:
            pa.concat_tables(tables + [part], promote_options="permissive")
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
            error_class[g.indices] = "key_schema_conflict"
            reason[g.indices] = f"schema {g.schema_id} does not match the other keys' columns"
            continue
        tables.append(part)
        indices.append(g.indices)
    if not tables:  # no key decoded: no columns, every row has its reason
        return KafkaKeys(pa.table({}), error_class, reason)
    joined = pa.concat_tables(tables, promote_options="permissive")
    position = np.full(n, -1, dtype=np.int64)
    position[np.concatenate(indices)] = np.arange(joined.num_rows)
    return KafkaKeys(joined.take(pa.array(position, mask=position < 0)), error_class, reason)


@dataclass(frozen=True)
class ChangeSet:
    """The changes of one ``extract_changes`` call, one entry per change in every per-change field."""

    keys: pa.Table  # the key columns, named as ChangeSpec.key (types of the image, else of the Kafka key)
    ops: np.ndarray  # int8 OP_* (upsert mode: OP_UPDATE for a value, OP_DELETE for a tombstone)
    sequence: pa.Array | None  # sequence_by values (null: none, e.g. a tombstone); None without sequence_by
    topic: pa.Array  # topic names (dictionary-encoded when given as one string)
    partition: np.ndarray  # int64
    offset: np.ndarray  # int64
    rows: np.ndarray  # int64, the caller's row positions (``rows`` argument)
    image: pa.Table | None  # table columns (Debezium: after's fields; upsert: the value) of every input row
    image_rows: np.ndarray  # change i's image is image row image_rows[i] (unused for deletes)
    bad: tuple[BadInput, ...] = ()  # input rows dead-lettered, grouped by reason
    consumed: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # rows without effect
    source: Any = None  # the caller's tag, handed back with the final images

    def __len__(self) -> int:
        return len(self.ops)

    def images(self, changes: np.ndarray) -> pa.Table:
        """The image rows of the given changes (positions in this set), in that order."""
        return self.image.take(pa.array(self.image_rows[changes]))


class _Bad:
    """Collects dead-lettered rows; the first reason a row gets is its reason."""

    def __init__(self, n: int) -> None:
        self.mask = np.zeros(n, dtype=bool)
        self.items: list[tuple[np.ndarray, str, str]] = []

    def add(self, mask: np.ndarray, error_class: str, reason: str) -> None:
        mask = mask & ~self.mask
        if mask.any():
            self.items.append((mask, error_class, reason))
            self.mask |= mask

    def result(self, rows: np.ndarray) -> tuple[BadInput, ...]:
        merged: dict[tuple[str, str], np.ndarray] = {}
        for mask, cls, reason in self.items:
            prev = merged.get((cls, reason))
            merged[(cls, reason)] = mask if prev is None else prev | mask
        return tuple(BadInput(rows[m], cls, reason) for (cls, reason), m in merged.items())


def _column(table: pa.Table | pa.RecordBatch, name: str) -> pa.Array | None:
    return one_chunk(table.column(name)) if name in table.schema.names else None


def _all_valid(columns: list[pa.Array], n: int) -> np.ndarray:
    ok = np.ones(n, dtype=bool)
    for col in columns:
        if col.null_count:
            ok &= col.is_valid().to_numpy(zero_copy_only=False)
    return ok


def _kafka_columns(spec: ChangeSpec, keys: KafkaKeys | None, n: int, bad: _Bad, need: np.ndarray,
                   targets: dict[str, pa.DataType], what: str,
                   error_class: str | None = None) -> dict[str, pa.Array] | None:
    """The key columns from the Kafka key for the ``need`` rows; rows it cannot serve become bad.

    ``what`` says why the Kafka key is needed; ``error_class`` replaces the specific classes."""
    if not need.any():
        return None
    if keys is None:
        bad.add(need, error_class or "missing_key", f"{what}; no Kafka key was given")
        return None
    failed = np.flatnonzero(need & ~bad.mask & (keys.error_class != None))  # noqa: E711 - element-wise
    by_reason: dict[tuple[str, str], list[int]] = {}
    for i in failed:  # keys that did not decode: their own reason first
        by_reason.setdefault((str(keys.error_class[i]), str(keys.reason[i])), []).append(i)
    for (cls, reason), where in by_reason.items():
        mask = np.zeros(n, dtype=bool)
        mask[where] = True
        bad.add(mask, error_class or cls, f"{what}; Kafka key: {reason}")
    names = keys.table.schema.names
    cols: dict[str, pa.Array] = {}
    for name in spec.key:
        if name in names:
            col = one_chunk(keys.table.column(name))
        elif len(spec.key) == 1 and names == ["value"]:  # a key of a primitive type
            col = one_chunk(keys.table.column("value"))
        else:
            bad.add(need, error_class or "missing_key", f"{what}; the Kafka key has no column {name!r}")
            return None
        if name in targets and col.type != targets[name]:
            try:
                col = pc.cast(col, targets[name])
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                bad.add(need, error_class or "key_type",
                        f"{what}; the Kafka key's column {name!r} does not fit {targets[name]}: {exc}")
                return None
        cols[name] = col
    for name, col in cols.items():
        if col.null_count:
            bad.add(need & col.is_null().to_numpy(zero_copy_only=False), error_class or "null_key",
                    f"{what}; the Kafka key's column {name!r} is null")
    return cols


def _debezium_ops(values: pa.Table | pa.RecordBatch, bad: _Bad) -> np.ndarray:
    n = values.num_rows
    op = _column(values, OP_FIELD)
    if op is None:
        bad.add(np.ones(n, dtype=bool), "not_envelope", "not a Debezium envelope: no 'op' field")
        return np.full(n, -1, dtype=np.int8)
    encoded = pc.dictionary_encode(op)
    names = encoded.dictionary.to_pylist()
    lookup = np.array([OP_CODES.get(v, -1) for v in names] + [-1], dtype=np.int8)
    index = encoded.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)
    ops = lookup[index]
    for j in np.flatnonzero(lookup[:-1] < 0):
        name = names[j]
        what = f" ({_OTHER_OPS[name]}) is not applied" if name in _OTHER_OPS else ""
        bad.add(index == j, "unknown_op", f"unknown Debezium op {name!r}{what}" if not what
                else f"Debezium op {name!r}{what}")
    bad.add(index == len(names), "unknown_op", "Debezium op is null")
    return ops


def _flattened_ops(values: pa.Table | pa.RecordBatch, bad: _Bad) -> np.ndarray:
    """ExtractNewRecordState's records: ``__deleted`` true (rewrite mode: the row as it was) or ``__op``
    d is a delete; ``__op`` c / r / u, or no ``__op``, writes the row."""
    n = values.num_rows
    ops = np.full(n, OP_UPDATE, dtype=np.int8)
    op = _column(values, FLAT_OP_FIELD)
    if op is not None:
        ops = _debezium_ops(values.select([FLAT_OP_FIELD]).rename_columns([OP_FIELD]), bad)
    deleted = _column(values, FLAT_DELETED_FIELD)
    if deleted is not None:
        flag = pc.equal(pc.utf8_lower(deleted.cast(pa.string())), "true").fill_null(False)
        ops[flag.to_numpy(zero_copy_only=False)] = OP_DELETE
    return ops


def _struct(values: pa.Table | pa.RecordBatch, name: str) -> pa.StructArray | None:
    col = _column(values, name)
    return col if col is not None and pa.types.is_struct(col.type) else None


def _sequence(spec: ChangeSpec, values: pa.Table | pa.RecordBatch | None, n: int, bad: _Bad) -> pa.Array | None:
    if spec.sequence_by is None:
        return None
    if values is None:
        return pa.nulls(n)
    col = field_column(values, spec.sequence_by)
    if col is None:
        bad.add(np.ones(n, dtype=bool), "missing_sequence",
                f"the value has no field {spec.sequence_by!r} (sequence_by)")
        return pa.nulls(n)
    t = col.type
    if not (pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t) or pa.types.is_temporal(t)
            or pa.types.is_string(t) or pa.types.is_large_string(t)):
        bad.add(np.ones(n, dtype=bool), "missing_sequence", f"sequence_by {spec.sequence_by!r} has type {t}, "
                                                            "which does not order changes")
        return pa.nulls(n)
    return col


def extract_changes(spec: ChangeSpec, values: pa.RecordBatch | pa.Table | None, *,
                    topic: str | pa.Array, partition: Any, offset: Any,
                    kafka_keys: KafkaKeys | None = None, rows: Any = None, source: Any = None) -> ChangeSet:
    """The changes of one batch of decoded values (one writer schema), or of tombstones (``values`` None).

    ``partition`` / ``offset`` (and ``topic`` unless one string) are per row;
    ``kafka_keys`` the same rows' decoded keys; ``rows`` the caller's positions
    of the rows (default 0..n-1), carried into changes, dead letters and
    ``consumed``; ``source`` an opaque tag returned with the final images.
    """
    offset = np.asarray(one_chunk(offset) if isinstance(offset, (pa.Array, pa.ChunkedArray)) else offset,
                        dtype=np.int64)
    n = len(offset)
    partition = np.asarray(one_chunk(partition) if isinstance(partition, (pa.Array, pa.ChunkedArray))
                           else partition, dtype=np.int64)
    rows = np.arange(n, dtype=np.int64) if rows is None else np.asarray(
        one_chunk(rows) if isinstance(rows, (pa.Array, pa.ChunkedArray)) else rows, dtype=np.int64)
    if isinstance(topic, str):
        topic = pa.DictionaryArray.from_arrays(np.zeros(n, dtype=np.int32), pa.array([topic]))
    else:
        topic = one_chunk(topic)
    if values is not None and values.num_rows != n or len(partition) != n or len(rows) != n or len(topic) != n \
            or (kafka_keys is not None and len(kafka_keys) != n):
        raise ValueError("extract_changes: values, topic, partition, offset, rows and kafka_keys differ in length")
    bad = _Bad(n)
    image: pa.Table | None = None
    if values is None:
        if spec.mode == DEBEZIUM:  # the tombstone after a delete: the delete did the work
            return _empty(spec, rows, topic, source)
        ops = np.full(n, OP_DELETE, dtype=np.int8)
        keys = _kafka_columns(spec, kafka_keys, n, bad, np.ones(n, dtype=bool), {}, "tombstone")
    elif spec.mode == DEBEZIUM and is_flattened(values.schema.names):
        ops = _flattened_ops(values, bad)
        names = [c for c in values.schema.names if c not in FLAT_FIELDS]
        image = (values if isinstance(values, pa.Table) else pa.Table.from_batches([values])).select(names)
        keys = _image_keys(spec, image, kafka_keys, n, bad)
    elif spec.mode == DEBEZIUM:
        ops = _debezium_ops(values, bad)
        after, before = _struct(values, AFTER_FIELD), _struct(values, BEFORE_FIELD)
        if after is None:
            bad.add(np.ones(n, dtype=bool), "not_envelope", "not a Debezium envelope: no 'after' struct")
            after = pa.nulls(n, pa.struct([]))
        is_delete = ops == OP_DELETE
        bad.add(~is_delete & after.is_null().to_numpy(zero_copy_only=False), "missing_after",
                "Debezium change without 'after'")
        image = pa.Table.from_arrays(after.flatten(), schema=pa.schema(list(after.type)))  # the table's shape
        keys = _debezium_keys(spec, after, before, is_delete, kafka_keys, n, bad)
    else:
        ops = np.full(n, OP_UPDATE, dtype=np.int8)
        image = values if isinstance(values, pa.Table) else pa.Table.from_batches([values])
        keys = _image_keys(spec, image, kafka_keys, n, bad)
    sequence = _sequence(spec, values, n, bad)
    good = np.flatnonzero(~bad.mask)
    take = pa.array(good)
    key_table = pa.table({name: keys[name].take(take) for name in spec.key}) if keys is not None and len(good) \
        else pa.table({name: pa.nulls(0) for name in spec.key})
    return ChangeSet(key_table, ops[good], None if sequence is None else sequence.take(take), topic.take(take),
                     partition[good], offset[good], rows[good], image, good, bad.result(rows),
                     np.empty(0, np.int64), source)


def _image_keys(spec: ChangeSpec, image: pa.Table, kafka_keys: KafkaKeys | None, n: int,
                bad: _Bad) -> dict[str, pa.Array] | None:
    """Upsert rows: key columns from the value when it has them all, else from the Kafka key."""
    if all(name in image.schema.names for name in spec.key):
        cols = {name: one_chunk(image.column(name)) for name in spec.key}
        for name, col in cols.items():
            if col.null_count:
                bad.add(col.is_null().to_numpy(zero_copy_only=False), "null_key", f"key column {name!r} is null")
        return cols
    return _kafka_columns(spec, kafka_keys, n, bad, np.ones(n, dtype=bool), {}, "the value has no key columns")


def _debezium_keys(spec: ChangeSpec, after: pa.StructArray, before: pa.StructArray | None, is_delete: np.ndarray,
                   kafka_keys: KafkaKeys | None, n: int, bad: _Bad) -> dict[str, pa.Array] | None:
    """Key columns: from ``after`` for c/r/u, ``before`` for deletes, the Kafka key where those lack them."""
    row_names = [f.name for f in after.type]
    writes = ~is_delete
    if not all(name in row_names for name in spec.key):
        return _kafka_columns(spec, kafka_keys, n, bad, np.ones(n, dtype=bool), {},
                              "the row has no key columns")
    from_after = {name: pc.struct_field(after, name) for name in spec.key}
    for name, col in from_after.items():
        if col.null_count:
            bad.add(writes & col.is_null().to_numpy(zero_copy_only=False), "null_key", f"key column {name!r} is null")
    if not is_delete.any():
        return from_after
    before_names = [f.name for f in before.type] if before is not None else []
    if before is not None and all(name in before_names for name in spec.key):
        from_before = {name: pc.struct_field(before, name) for name in spec.key}
        usable = is_delete & _all_valid(list(from_before.values()), n)
    else:
        from_before, usable = {}, np.zeros(n, dtype=bool)
    targets = {name: col.type for name, col in from_after.items()}
    kafka = _kafka_columns(spec, kafka_keys, n, bad, is_delete & ~usable, targets,
                           "Debezium delete without a key in 'before'", "delete_without_key")
    cols = {}
    mask = pa.array(is_delete & usable)
    for name in spec.key:
        col = from_after[name]
        if name in from_before:
            col = pc.if_else(mask, pc.cast(from_before[name], col.type), col)
        if kafka is not None:
            col = pc.if_else(pa.array(is_delete & ~usable), kafka[name], col)
        cols[name] = col
    return cols


def _empty(spec: ChangeSpec, rows: np.ndarray, topic: pa.Array, source: Any) -> ChangeSet:
    none = np.empty(0, np.int64)
    return ChangeSet(pa.table({name: pa.nulls(0) for name in spec.key}), np.empty(0, np.int8),
                     None if spec.sequence_by is None else pa.nulls(0), topic.slice(0, 0), none, none, none, None,
                     none, (), rows, source)
