"""Schemas of change-stream routes: the table a Debezium envelope fills, and usable key columns.

Pure (pyiceberg schemas in, schemas or problems out, no Arrow data), so the job's
executors and ``icerouter plan`` / ``check`` reach the same verdicts.

A Debezium envelope is a record with ``op`` (string: c, r, u, d), ``after`` and
usually ``before`` (the row before and after the change, one struct type) and
metadata (``source``, ``ts_ms``, ``transaction``). The table holds the rows: its
columns are the fields of ``after``, with field ids numbered as a fresh schema
(exactly what ``avro_to_iceberg`` gives the row record on its own). The flattened
records of Debezium's ExtractNewRecordState (the row, with ``__op`` and, under
``delete.handling.mode=rewrite``, ``__deleted``) are read as change events too.

Key columns must be top-level primitive columns of the table, and, to be
declared as Iceberg identifier fields, required and not float/double (the
spec's rule, enforced by pyiceberg's ``Schema._validate_identifier_field``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    DateType, DecimalType, DoubleType, FloatType, IcebergType, IntegerType, ListType, LongType,
    MapType, NestedField, StringType, StructType, TimestampType, TimestamptzType, TimeType,
)

from router.changes.exceptions import EnvelopeError, KeyColumnsError

__all__ = ["OP_FIELD", "BEFORE_FIELD", "AFTER_FIELD", "FLAT_OP_FIELD", "FLAT_DELETED_FIELD", "FLAT_FIELDS",
           "is_flattened", "KeyProblem", "debezium_table_schema",
           "envelope_row_type", "key_columns_from_key_schema", "key_columns_from_kafka_keys", "missing_key_reason",
           "check_key_columns", "check_sequence_by"]

OP_FIELD, BEFORE_FIELD, AFTER_FIELD = "op", "before", "after"
#: fields ExtractNewRecordState adds for the change itself (add.fields=op; delete.handling.mode=rewrite)
FLAT_OP_FIELD, FLAT_DELETED_FIELD = "__op", "__deleted"
FLAT_FIELDS = frozenset({FLAT_OP_FIELD, FLAT_DELETED_FIELD})

#: Types a ``sequence_by`` column may have: they order the same way in Iceberg and Arrow.
SEQUENCE_TYPES: tuple[type, ...] = (IntegerType, LongType, FloatType, DoubleType, DecimalType, DateType,
                                    TimeType, TimestampType, TimestamptzType, StringType)


def _shape(t: IcebergType) -> object:
    """A type's structure without field ids or docs: ``before`` and ``after`` carry different ids."""
    if isinstance(t, StructType):
        return ("struct", tuple((f.name, f.required, _shape(f.field_type)) for f in t.fields))
    if isinstance(t, ListType):
        return ("list", t.element_required, _shape(t.element_type))
    if isinstance(t, MapType):
        return ("map", _shape(t.key_type), t.value_required, _shape(t.value_type))
    return str(t)


def envelope_row_type(envelope: Schema) -> StructType:
    """The row struct of a Debezium envelope (the type of ``after``); EnvelopeError when it is none."""
    fields = {f.name: f for f in envelope.fields}
    op = fields.get(OP_FIELD)
    if op is None:
        raise EnvelopeError("not a Debezium envelope: no 'op' field", fields=sorted(fields))
    if not isinstance(op.field_type, StringType):
        raise EnvelopeError(f"not a Debezium envelope: 'op' is {op.field_type}, not string")
    after = fields.get(AFTER_FIELD)
    if after is None:
        raise EnvelopeError("not a Debezium envelope: no 'after' field", fields=sorted(fields))
    if not isinstance(after.field_type, StructType) or not after.field_type.fields:
        raise EnvelopeError(f"not a Debezium envelope: 'after' is {after.field_type}, not a struct of columns")
    before = fields.get(BEFORE_FIELD)
    if before is not None and _shape(before.field_type) != _shape(after.field_type):
        raise EnvelopeError("not a Debezium envelope: 'before' and 'after' have different types",
                            before=str(before.field_type), after=str(after.field_type))
    return after.field_type


def is_flattened(names: Sequence[str]) -> bool:
    """Debezium's ExtractNewRecordState output: the row itself plus ``__op`` / ``__deleted`` (no envelope)."""
    return OP_FIELD not in names and AFTER_FIELD not in names and bool(FLAT_FIELDS & set(names))


def debezium_table_schema(envelope: Schema) -> Schema:
    """The table's schema for an envelope: ``after``'s fields as top-level columns, fresh field ids.
    A flattened record's table is the record without ``__op`` and ``__deleted`` (its ``__source_*``
    and other added fields stay: ``sequence_by: __source_lsn`` orders by one)."""
    if is_flattened([f.name for f in envelope.fields]):
        return assign_fresh_schema_ids(Schema(*[f for f in envelope.fields if f.name not in FLAT_FIELDS]))
    return assign_fresh_schema_ids(Schema(*envelope_row_type(envelope).fields))


def key_columns_from_key_schema(key_schema: Schema) -> tuple[str, ...]:
    """The default key columns: the top-level fields of the Kafka key's schema, in order.

    A key of a primitive type maps to one column named ``value`` (evolution/avro.py);
    ``extract_changes`` lets such a key supply a single key column of any name.
    """
    names = tuple(f.name for f in key_schema.fields)
    if not names:
        raise KeyColumnsError("the Kafka key schema has no fields to use as key columns")
    return names


def key_columns_from_kafka_keys(column_names: Sequence[str]) -> tuple[str, ...] | None:
    """The key columns of an upsert route without ``key``: the columns of its records' decoded Kafka
    keys (router.changes.extract.KafkaKeys), one rule for the job and ``plan --sample``. None when
    no key decoded, or the key is a primitive (one column ``value``: no field names a key column)."""
    names = tuple(column_names)
    return names if names and names != ("value",) else None


def missing_key_reason(table: str) -> str:
    """Why the records of an upsert table without key columns are dead-lettered (``missing_key``)."""
    return (f"table {table}: no key columns: the Kafka record key is not a record with fields "
            "(set key on the route)")


@dataclass(frozen=True)
class KeyProblem:
    """Why one key column cannot be used; ``kind`` lets callers choose what blocks.

    kinds: empty, duplicate, missing, nested, not_primitive, floating, optional.
    Only ``optional`` still allows position deletes; it forbids declaring the key
    as the table's identifier fields.
    """

    column: str
    kind: str
    reason: str

    def __str__(self) -> str:
        return f"key column {self.column!r}: {self.reason}" if self.column else self.reason


def _find(schema: Schema, name: str, case_sensitive: bool) -> NestedField | None:
    for f in schema.fields:
        if f.name == name or (not case_sensitive and f.name.lower() == name.lower()):
            return f
    return None


def _nested(schema: Schema, path: str, case_sensitive: bool) -> bool:
    if "." not in path:
        return False
    try:
        schema.find_field(path, case_sensitive=case_sensitive)
        return True
    except ValueError:
        return False


def check_key_columns(table_schema: Schema, key: Sequence[str], *,
                      case_sensitive: bool = True) -> list[KeyProblem]:
    """Problems of using ``key`` as the key columns of a table with ``table_schema`` (empty: fine)."""
    if not key:
        return [KeyProblem("", "empty", "no key columns: set `key` or give the topic a record key schema")]
    problems: list[KeyProblem] = []
    seen: set[str] = set()
    for name in key:
        folded = name if case_sensitive else name.lower()
        if folded in seen:
            problems.append(KeyProblem(name, "duplicate", "named twice"))
            continue
        seen.add(folded)
        field = _find(table_schema, name, case_sensitive)
        if field is None:
            if _nested(table_schema, name, case_sensitive):
                problems.append(KeyProblem(name, "nested", "is nested in a struct; key columns must be top-level"))
            else:
                problems.append(KeyProblem(name, "missing", "is not a column of the table"))
            continue
        typ = field.field_type
        if not typ.is_primitive:
            problems.append(KeyProblem(name, "not_primitive", f"has type {typ}; key columns must be primitive"))
        elif isinstance(typ, (FloatType, DoubleType)):
            problems.append(KeyProblem(name, "floating", f"has type {typ}; Iceberg identifier fields "
                                                         "must not be float or double"))
        elif not field.required:
            problems.append(KeyProblem(name, "optional", "is optional; Iceberg identifier fields must be "
                                                         "required (rows with a null key are dead-lettered)"))
    return problems


def check_sequence_by(value_schema: Schema, path: str) -> list[str]:
    """Problems of ordering changes by the column at dotted ``path`` of the value (the envelope in CDC)."""
    struct: StructType = value_schema.as_struct()
    parts = path.split(".")
    for depth, part in enumerate(parts):
        field = next((f for f in struct.fields if f.name == part), None)
        where = ".".join(parts[: depth + 1])
        if field is None:
            return [f"sequence_by {path!r}: the value schema has no field {where!r}"]
        if depth < len(parts) - 1:
            if not isinstance(field.field_type, StructType):
                return [f"sequence_by {path!r}: {where!r} is {field.field_type}, not a struct"]
            struct = field.field_type
            continue
        if not isinstance(field.field_type, SEQUENCE_TYPES):
            return [f"sequence_by {path!r}: type {field.field_type} does not order changes; "
                    "use a number, decimal, string, date, time or timestamp"]
    return []
