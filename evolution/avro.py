"""Avro schema -> Iceberg schema, our own mapping onto pyiceberg types.

pyiceberg's ``AvroSchemaConversion`` expects Iceberg field ids embedded in the
Avro schema and rejects ordinary registry schemas, so we walk the Avro JSON
ourselves. Choices worth knowing:

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
from typing import Any, Iterator

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType,
    IcebergType, IntegerType, ListType, LongType, MapType, NestedField, StringType,
    StructType, TimestampType, TimestamptzType, TimeType,
)

from evolution.exceptions import UnsupportedSchemaError

__all__ = ["avro_to_iceberg", "avro_field_aliases", "parse_avro", "ROOT_VALUE_FIELD"]

ROOT_VALUE_FIELD = "value"
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

NAMED_KINDS = ("record", "error", "enum", "fixed")


def parse_avro(schema: str | dict | list) -> Any:
    """Accept a JSON string, a parsed dict/list or a bare primitive name."""
    if isinstance(schema, str):
        stripped = schema.strip()
        if stripped[:1] in ("{", "[", '"'):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise UnsupportedSchemaError(f"invalid JSON: {exc}") from None
        return stripped
    return schema


def _fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


class _Converter:
    """Walks one Avro schema; tracks named types and the expansion stack."""

    def __init__(self) -> None:
        self.named: dict[str, Any] = {}
        self.expanding: list[str] = []
        self._ids = iter(range(1, 1 << 31))

    def next_id(self) -> int:
        return next(self._ids)

    # -- entry points -----------------------------------------------------
    def root(self, node: Any) -> Schema:
        if isinstance(node, dict) and node.get("type") in ("record", "error"):
            struct = self.convert(node, None, ())
            assert isinstance(struct, StructType)
            return Schema(*struct.fields)
        typ, required = self.convert_nullable(node, None, (ROOT_VALUE_FIELD,))
        return Schema(NestedField(self.next_id(), ROOT_VALUE_FIELD, typ, required=required))

    def convert_nullable(self, node: Any, ns: str | None,
                         path: tuple[str, ...]) -> tuple[IcebergType, bool]:
        """Return (type, required); only unions can make a value optional."""
        if isinstance(node, list):
            branches = [b for b in node if b != "null"]
            nullable = len(branches) != len(node)
            if not branches:
                raise UnsupportedSchemaError("union of only null", path=path)
            if len(branches) == 1:
                return self.convert(branches[0], ns, path), not nullable
            return self.union_struct(branches, ns, path), not nullable
        return self.convert(node, ns, path), True

    # -- types ------------------------------------------------------------
    def convert(self, node: Any, ns: str | None, path: tuple[str, ...]) -> IcebergType:
        if isinstance(node, str):
            if node in PRIMITIVES:
                return PRIMITIVES[node]
            if node == "null":
                raise UnsupportedSchemaError("bare null type has no Iceberg column type", path=path)
            return self.reference(node, ns, path)
        if isinstance(node, list):
            typ, _ = self.convert_nullable(node, ns, path)
            return typ
        if not isinstance(node, dict) or "type" not in node:
            raise UnsupportedSchemaError(f"not an Avro schema: {node!r}", path=path)
        kind = node["type"]
        logical = node.get("logicalType")
        if logical is not None:
            mapped = self.logical(node, logical, kind, ns, path)
            if mapped is not None:
                return mapped
        if isinstance(kind, (dict, list)):
            return self.convert(kind, ns, path)
        if kind in PRIMITIVES:
            return PRIMITIVES[kind]
        if kind in ("record", "error"):
            return self.record(node, ns, path)
        if kind == "enum":
            self.define(node, ns, path)
            return StringType()
        if kind == "fixed":
            self.define(node, ns, path)
            return FixedType(int(node["size"]))
        if kind == "array":
            elem, elem_req = self.convert_nullable(node["items"], ns, path + ("element",))
            return ListType(self.next_id(), elem, element_required=elem_req)
        if kind == "map":
            val, val_req = self.convert_nullable(node["values"], ns, path + ("value",))
            return MapType(self.next_id(), StringType(), self.next_id(), val,
                           value_required=val_req)
        if isinstance(kind, str) and kind not in ("null",):
            return self.reference(kind, ns, path)
        raise UnsupportedSchemaError(f"unknown Avro type {kind!r}", path=path)

    def logical(self, node: dict, logical: str, kind: Any, ns: str | None,
                path: tuple[str, ...]) -> IcebergType | None:
        if logical == "decimal" and kind in ("bytes", "fixed"):
            if kind == "fixed":
                self.define(node, ns, path)
            try:
                precision = int(node["precision"])
                scale = int(node.get("scale", 0))
            except (KeyError, TypeError, ValueError):
                return None
            if 0 < precision <= MAX_DECIMAL_PRECISION and 0 <= scale <= precision:
                return DecimalType(precision, scale)
            return None
        if isinstance(kind, str):
            return LOGICAL_TYPES.get((logical, kind))
        return None

    def define(self, node: dict, ns: str | None, path: tuple[str, ...]) -> tuple[str, str | None]:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise UnsupportedSchemaError(f"named type {node.get('type')!r} without a name", path=path)
        full = _fullname(name, node.get("namespace", ns))
        self.named.setdefault(full, node)
        return full, full.rsplit(".", 1)[0] if "." in full else None

    def reference(self, name: str, ns: str | None, path: tuple[str, ...]) -> IcebergType:
        full = _fullname(name, ns)
        if full not in self.named and name in self.named:
            full = name
        if full not in self.named:
            raise UnsupportedSchemaError(f"unknown Avro type {name!r}", schema_name=name, path=path)
        if full in self.expanding:
            raise UnsupportedSchemaError(
                f"recursive type {full!r} cannot be flattened into an Iceberg schema",
                schema_name=full, path=path)
        node = self.named[full]
        inner_ns = full.rsplit(".", 1)[0] if "." in full else None
        return self.convert(node, inner_ns, path)

    def record(self, node: dict, ns: str | None, path: tuple[str, ...]) -> StructType:
        full, inner_ns = self.define(node, ns, path)
        if full in self.expanding:
            raise UnsupportedSchemaError(
                f"recursive type {full!r} cannot be flattened into an Iceberg schema",
                schema_name=full, path=path)
        self.expanding.append(full)
        try:
            fields = []
            for f in node.get("fields", []):
                fname = f["name"]
                typ, required = self.convert_nullable(f["type"], inner_ns, path + (fname,))
                fields.append(NestedField(self.next_id(), fname, typ, required=required,
                                          doc=f.get("doc")))
            return StructType(*fields)
        finally:
            self.expanding.pop()

    def union_struct(self, branches: list, ns: str | None, path: tuple[str, ...]) -> StructType:
        fields = []
        seen: set[str] = set()
        for branch in branches:
            bname = _branch_name(branch, ns)
            if bname in seen:
                raise UnsupportedSchemaError(f"union has two branches named {bname!r}", path=path)
            seen.add(bname)
            typ = self.convert(branch, ns, path + (bname,))
            fields.append(NestedField(self.next_id(), bname, typ, required=False))
        return StructType(*fields)


def _branch_name(branch: Any, ns: str | None) -> str:
    """Name of a union branch: the Avro type name, or a named type's short name."""
    if isinstance(branch, str):
        return _short(branch)
    if isinstance(branch, dict):
        kind = branch.get("type")
        if kind in NAMED_KINDS and "name" in branch:
            return _short(branch["name"])
        if isinstance(kind, str):
            return kind
    raise UnsupportedSchemaError(f"cannot name union branch {branch!r}")


def avro_to_iceberg(schema: str | dict | list) -> Schema:
    """Map an Avro schema (registry JSON) onto a fresh-id pyiceberg Schema."""
    node = parse_avro(schema)
    raw = _Converter().root(node)
    return assign_fresh_schema_ids(raw)


def _walk_aliases(node: Any, conv: _Converter, ns: str | None, path: tuple[str, ...],
                  stack: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], tuple[str, ...]]]:
    if isinstance(node, list):
        branches = [b for b in node if b != "null"]
        if len(branches) == 1:
            yield from _walk_aliases(branches[0], conv, ns, path, stack)
        else:
            for b in branches:
                yield from _walk_aliases(b, conv, ns, path + (_branch_name(b, ns),), stack)
        return
    if isinstance(node, str):
        if node in PRIMITIVES or node == "null":
            return
        full = _fullname(node, ns)
        if full not in conv.named and node in conv.named:
            full = node
        if full in conv.named and full not in stack:
            inner_ns = full.rsplit(".", 1)[0] if "." in full else None
            yield from _walk_aliases(conv.named[full], conv, inner_ns, path, stack)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if isinstance(kind, (dict, list)):
        yield from _walk_aliases(kind, conv, ns, path, stack)
    elif kind in ("record", "error"):
        full, inner_ns = conv.define(node, ns, path)
        if full in stack:
            return
        for f in node.get("fields", []):
            fpath = path + (f["name"],)
            aliases = f.get("aliases") or ()
            if aliases:
                yield fpath, tuple(aliases)
            yield from _walk_aliases(f["type"], conv, inner_ns, fpath, stack + (full,))
    elif kind in ("enum", "fixed"):
        conv.define(node, ns, path)
    elif kind == "array":
        yield from _walk_aliases(node["items"], conv, ns, path + ("element",), stack)
    elif kind == "map":
        yield from _walk_aliases(node["values"], conv, ns, path + ("value",), stack)
    elif isinstance(kind, str) and kind not in PRIMITIVES:
        yield from _walk_aliases(kind, conv, ns, path, stack)


def avro_field_aliases(schema: str | dict | list) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Field path -> Avro ``aliases`` (former names), used to plan renames.

    Paths use the same names as the Iceberg schema: ``element`` for list
    items, ``value`` for map values, the branch name inside multi-branch unions.
    """
    node = parse_avro(schema)
    conv = _Converter()
    is_record = isinstance(node, dict) and node.get("type") in ("record", "error")
    root_path = () if is_record else (ROOT_VALUE_FIELD,)
    return dict(_walk_aliases(node, conv, None, root_path, ()))
