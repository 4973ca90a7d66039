"""JSON Schema -> Iceberg schema.

Mapping: ``integer`` -> long (JSON has no int32), ``number`` -> double,
``boolean``, ``string`` (formats ``date`` -> date, ``date-time`` ->
timestamptz, ``time`` -> time, ``uuid`` -> string as for Avro;
``contentEncoding: base64`` -> binary), ``array`` -> list, ``object`` with
``properties`` -> struct, ``object`` with only ``additionalProperties: <schema>``
-> map<string, V>, ``enum``/``const`` of strings -> string.

Nullability: a property is required only when listed in ``required`` *and*
not nullable (``type: [X, "null"]``, ``anyOf/oneOf`` with ``{"type": "null"}``).
Several non-null alternatives become a struct with one optional field per
branch (named by JSON type, or ``title``), like Avro unions.

A free-form object (no properties, no typed additionalProperties) becomes a
``string`` holding the JSON text: there is no column shape to evolve.
``$ref`` to ``#/$defs/..`` or ``#/definitions/..`` is expanded; recursive
references are rejected naming the definition.
"""
from __future__ import annotations

import json
from typing import Any

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DoubleType, IcebergType, ListType, LongType, MapType,
    NestedField, StringType, StructType, TimestamptzType, TimeType,
)

from evolution.exceptions import UnsupportedSchemaError

__all__ = ["jsonschema_to_iceberg", "ROOT_VALUE_FIELD"]

ROOT_VALUE_FIELD = "value"

SIMPLE_TYPES: dict[str, IcebergType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
    "string": StringType(),
}

STRING_FORMATS: dict[str, IcebergType] = {
    "date": DateType(),
    "date-time": TimestamptzType(),
    "time": TimeType(),
    "uuid": StringType(),
}



def _is_null(node: Any) -> bool:
    return isinstance(node, dict) and node.get("type") == "null" and len(
        [k for k in node if k not in ("title", "description")]) == 1


class _Converter:
    def __init__(self, root: dict) -> None:
        self.root = root
        self.stack: list[str] = []
        self.ids = iter(range(1, 1 << 31))

    def resolve(self, ref: str, path: tuple[str, ...]) -> tuple[str, Any]:
        if not ref.startswith("#/"):
            raise UnsupportedSchemaError(f"only local $ref is supported, got {ref!r}",
                                         schema_name=ref, path=path)
        node: Any = self.root
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise UnsupportedSchemaError(f"unresolvable $ref {ref!r}", schema_name=ref,
                                             path=path)
            node = node[part]
        return ref.rsplit("/", 1)[-1], node

    def convert(self, node: Any, path: tuple[str, ...]) -> tuple[IcebergType, bool]:
        """Return (iceberg type, nullable)."""
        if node is True or node == {}:
            return StringType(), True
        if not isinstance(node, dict):
            raise UnsupportedSchemaError(f"not a JSON schema: {node!r}", path=path)
        if "$ref" in node:
            name, target = self.resolve(node["$ref"], path)
            if node["$ref"] in self.stack:
                raise UnsupportedSchemaError(
                    f"recursive definition {name!r} cannot be flattened into an Iceberg schema",
                    schema_name=name, path=path)
            self.stack.append(node["$ref"])
            try:
                return self.convert(target, path)
            finally:
                self.stack.pop()
        for key in ("anyOf", "oneOf"):
            if key in node:
                return self.alternatives(node[key], path)
        if "allOf" in node:
            parts = node["allOf"]
            if len(parts) == 1:
                return self.convert(parts[0], path)
            raise UnsupportedSchemaError("allOf with several schemas is not supported", path=path)
        typ = node.get("type")
        if typ is None:
            if "enum" in node or "const" in node:
                values = node.get("enum", [node.get("const")])
                return StringType(), any(v is None for v in values)
            if "properties" in node:
                typ = "object"
            else:
                raise UnsupportedSchemaError(f"schema without a type: {node!r}", path=path)
        if typ == "null":
            raise UnsupportedSchemaError("type of only null has no column type", path=path)
        if isinstance(typ, list):
            branches = [t for t in typ if t != "null"]
            nullable = len(branches) != len(typ)
            if not branches:
                raise UnsupportedSchemaError("type of only null", path=path)
            if len(branches) == 1:
                t, n = self.convert({**node, "type": branches[0]}, path)
                return t, nullable or n
            t, _ = self.alternatives([{**node, "type": b} for b in branches], path)
            return t, nullable
        return self.single(node, typ, path), False

    def single(self, node: dict, typ: str, path: tuple[str, ...]) -> IcebergType:
        if typ == "string":
            if node.get("contentEncoding") == "base64":
                return BinaryType()
            return STRING_FORMATS.get(node.get("format", ""), StringType())
        if typ in SIMPLE_TYPES:
            return SIMPLE_TYPES[typ]
        if typ == "array":
            items = node.get("items", {})
            elem, nullable = self.convert(items, path + ("element",))
            return ListType(next(self.ids), elem, element_required=not nullable)
        if typ == "object":
            return self.obj(node, path)
        raise UnsupportedSchemaError(f"unknown JSON Schema type {typ!r}", path=path)

    def obj(self, node: dict, path: tuple[str, ...]) -> IcebergType:
        props = node.get("properties")
        if props:
            required = set(node.get("required", ()))
            fields = []
            for name, sub in props.items():
                t, nullable = self.convert(sub, path + (name,))
                doc = sub.get("description") if isinstance(sub, dict) else None
                fields.append(NestedField(next(self.ids), name, t,
                                          required=name in required and not nullable, doc=doc))
            return StructType(*fields)
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and extra:
            v, nullable = self.convert(extra, path + ("value",))
            return MapType(next(self.ids), StringType(), next(self.ids), v,
                           value_required=not nullable)
        return StringType()

    def alternatives(self, options: list, path: tuple[str, ...]) -> tuple[IcebergType, bool]:
        branches = [o for o in options if not _is_null(o)]
        nullable = len(branches) != len(options)
        if not branches:
            raise UnsupportedSchemaError("alternatives of only null", path=path)
        if len(branches) == 1:
            t, n = self.convert(branches[0], path)
            return t, nullable or n
        fields, seen = [], set()
        for i, b in enumerate(branches):
            name = _branch_name(b, i)
            if name in seen:
                raise UnsupportedSchemaError(f"two alternatives named {name!r}", path=path)
            seen.add(name)
            t, _ = self.convert(b, path + (name,))
            fields.append(NestedField(next(self.ids), name, t, required=False))
        return StructType(*fields), nullable


def _branch_name(branch: Any, index: int) -> str:
    if isinstance(branch, dict):
        if isinstance(branch.get("title"), str):
            return branch["title"]
        if "$ref" in branch:
            return branch["$ref"].rsplit("/", 1)[-1]
        if isinstance(branch.get("type"), str):
            return branch["type"]
    return f"branch{index}"


def jsonschema_to_iceberg(schema: str | dict) -> Schema:
    """Map a JSON Schema document onto a fresh-id pyiceberg Schema."""
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise UnsupportedSchemaError(f"invalid JSON: {exc}") from None
    if not isinstance(schema, dict):
        raise UnsupportedSchemaError("a JSON Schema document must be an object")
    conv = _Converter(schema)
    typ, nullable = conv.convert(schema, ())
    if isinstance(typ, StructType):
        raw = Schema(*typ.fields)
    else:
        raw = Schema(NestedField(next(conv.ids), ROOT_VALUE_FIELD, typ, required=not nullable))
    return assign_fresh_schema_ids(raw)
