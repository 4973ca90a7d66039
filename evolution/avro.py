"""Avro schema -> Iceberg schema, our own mapping onto pyiceberg types.

pyiceberg's ``AvroSchemaConversion`` expects Iceberg field ids embedded in the
Avro schema and rejects ordinary registry schemas, so we walk the Avro JSON
ourselves (evolution/avro_visitor.py). Choices worth knowing:

* ``uuid`` (on string) maps to ``string``: fastavro, polars and DuckDB all hand
  it back as text, and Iceberg's uuid type would force a 16-byte binary cast on
  every batch. ``uuid`` on ``fixed(16)`` stays ``fixed(16)``.
* ``timestamp-*`` (UTC instants) -> ``timestamptz``, ``local-timestamp-*`` ->
  ``timestamp``; nanos are narrowed to microseconds by the decoder.
* ``[null, X]`` in either order makes X optional; any other multi-branch union
  becomes a struct with one optional field per branch, named after the branch
  type (``int``, ``string``, a record's short name...), exactly one of which is
  set per row.
* Invalid logical types (e.g. decimal precision > 38) fall back to the
  underlying type, as the Avro specification requires.
* A non-record top-level schema (``"string"``, an array...) becomes a single
  column named ``value``.
* Field ids are assigned fresh with pyiceberg's ``assign_fresh_schema_ids`` so
  they equal the ids a catalog gives the same schema on ``create_table``.
"""
from __future__ import annotations

import json
import re
from typing import Any

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType,
    IcebergType, IntegerType, ListType, LongType, MapType, NestedField, StringType,
    StructType, TimestampType, TimestamptzType, TimeType,
)

from evolution.avro_visitor import PathVisitor, visit_avro
from evolution.exceptions import UnsupportedSchemaError

__all__ = ["avro_to_iceberg", "avro_field_aliases", "parse_avro", "ROOT_VALUE_FIELD", "BARE_NAME"]

ROOT_VALUE_FIELD = "value"
#: a schema given as a bare type name (`string`, `shop.Order`) rather than JSON
BARE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
MAX_DECIMAL_PRECISION = 38

PRIMITIVES: dict[str, IcebergType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "string": StringType(),
    "bytes": BinaryType(),
}

# (logicalType, underlying avro type) -> iceberg type; decimal handled apart.
LOGICAL_TYPES: dict[tuple[str, str], IcebergType] = {
    ("date", "int"): DateType(),
    ("time-millis", "int"): TimeType(),
    ("time-micros", "long"): TimeType(),
    ("timestamp-millis", "long"): TimestamptzType(),
    ("timestamp-micros", "long"): TimestamptzType(),
    ("timestamp-nanos", "long"): TimestamptzType(),
    ("local-timestamp-millis", "long"): TimestampType(),
    ("local-timestamp-micros", "long"): TimestampType(),
    ("local-timestamp-nanos", "long"): TimestampType(),
    ("uuid", "string"): StringType(),
}


def parse_avro(schema: str | dict | list) -> Any:
    """Accept a JSON string, a parsed dict/list or a bare primitive name."""
    if isinstance(schema, str):
        stripped = schema.strip()
        if stripped[:1] in ("{", "[", '"'):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise UnsupportedSchemaError(f"invalid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
        if not BARE_NAME.fullmatch(stripped):  # e.g. YAML: say so, never echo the text back
            first = stripped.splitlines()[0][:40] if stripped else ""
            raise UnsupportedSchemaError(f"not JSON and not an Avro type name (line 1 starts {first!r})")
        return stripped
    return schema


class _Converter(PathVisitor[tuple[IcebergType, bool]]):
    """Avro -> Iceberg types; each result is (type, required): only unions make a value optional."""

    def __init__(self, root: tuple[str, ...] = ()) -> None:
        super().__init__(root)
        self._ids = iter(range(1, 1 << 31))

    def next_id(self) -> int:
        return next(self._ids)

    def error(self, reason: str, **where: Any) -> UnsupportedSchemaError:
        return UnsupportedSchemaError(reason, path=tuple(self.path), **where)

    # -- types ----------------------------------------------------------------
    def record(self, node: dict, fields: list) -> tuple[IcebergType, bool]:
        return StructType(*(NestedField(self.next_id(), f["name"], typ, required=required, doc=f.get("doc"))
                            for f, (typ, required) in fields)), True

    def union(self, node: list, branches: list, nullable: bool) -> tuple[IcebergType, bool]:
        if not branches:
            raise self.error("union of only null")
        if len(branches) == 1:
            return branches[0][1][0], not nullable
        names = [name for name, _ in branches]
        twice = next((n for n in names if names.count(n) > 1), None)
        if twice is not None:
            raise self.error(f"union has two branches named {twice!r}")
        return StructType(*(NestedField(self.next_id(), name, typ, required=False)
                            for name, (typ, _) in branches)), not nullable

    def array(self, node: dict, element: tuple) -> tuple[IcebergType, bool]:
        return ListType(self.next_id(), element[0], element_required=element[1]), True

    def map(self, node: dict, value: tuple) -> tuple[IcebergType, bool]:
        return MapType(self.next_id(), StringType(), self.next_id(), value[0], value_required=value[1]), True

    def enum(self, node: dict) -> tuple[IcebergType, bool]:
        return StringType(), True

    def fixed(self, node: dict) -> tuple[IcebergType, bool]:
        return FixedType(int(node["size"])), True

    def primitive(self, node: str | dict, name: str) -> tuple[IcebergType, bool]:
        if name == "null":
            raise self.error("bare null type has no Iceberg column type" if isinstance(node, str)
                             else "unknown Avro type 'null'")
        return PRIMITIVES[name], True

    def logical(self, node: dict, logical: str, kind: Any) -> tuple[IcebergType, bool] | None:
        if logical == "decimal" and kind in ("bytes", "fixed"):
            try:
                precision = int(node["precision"])
                scale = int(node.get("scale", 0))
            except (KeyError, TypeError, ValueError):
                return None
            if 0 < precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
                return DecimalType(precision, scale), True
            return None
        if isinstance(kind, str) and (logical, kind) in LOGICAL_TYPES:
            return LOGICAL_TYPES[(logical, kind)], True
        return None

    def wrapped(self, node: dict, inner: tuple) -> tuple[IcebergType, bool]:
        return inner[0], True

    def recursive(self, name: str) -> tuple[IcebergType, bool]:
        raise self.error(f"recursive type {name!r} cannot be flattened into an Iceberg schema", schema_name=name)

    def unknown(self, kind: Any) -> tuple[IcebergType, bool]:
        if isinstance(kind, str):
            raise self.error(f"unknown Avro type {kind!r}", schema_name=kind)
        raise self.error(f"unknown Avro type {kind!r}")

    def invalid(self, node: Any) -> tuple[IcebergType, bool]:
        raise self.error(f"not an Avro schema: {node!r}")


def avro_to_iceberg(schema: str | dict | list) -> Schema:
    """Map an Avro schema (registry JSON) onto a fresh-id pyiceberg Schema."""
    node = parse_avro(schema)
    if isinstance(node, dict) and node.get("type") in ("record", "error"):
        struct, _ = visit_avro(node, _Converter())
        raw = Schema(*struct.fields)
    else:  # a bare type becomes the single column `value`
        converter = _Converter((ROOT_VALUE_FIELD,))
        typ, required = visit_avro(node, converter)
        raw = Schema(NestedField(converter.next_id(), ROOT_VALUE_FIELD, typ, required=required))
    return assign_fresh_schema_ids(raw)


class _Aliases(PathVisitor[list]):
    """(field path, aliases) of every field that declares former names."""

    def record(self, node: dict, fields: list) -> list:
        out = []
        for f, inner in fields:
            if f.get("aliases"):
                out.append((tuple(self.path) + (f["name"],), tuple(f["aliases"])))
            out += inner
        return out

    def union(self, node: list, branches: list, nullable: bool) -> list:
        return [pair for _, inner in branches for pair in inner]

    def array(self, node: dict, element: list) -> list:
        return element

    def map(self, node: dict, value: list) -> list:
        return value

    def enum(self, node: dict) -> list:
        return []

    def fixed(self, node: dict) -> list:
        return []

    def primitive(self, node: str | dict, name: str) -> list:
        return []

    def recursive(self, name: str) -> list:
        return []

    def unknown(self, kind: Any) -> list:
        return []

    def invalid(self, node: Any) -> list:
        return []


def avro_field_aliases(schema: str | dict | list) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Field path -> Avro ``aliases`` (former names), used to plan renames.

    Paths use the same names as the Iceberg schema: ``element`` for list
    items, ``value`` for map values, the branch name inside multi-branch unions.
    """
    node = parse_avro(schema)
    is_record = isinstance(node, dict) and node.get("type") in ("record", "error")
    return dict(visit_avro(node, _Aliases(() if is_record else (ROOT_VALUE_FIELD,))))
