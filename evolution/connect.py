"""Kafka Connect schema (the JsonConverter's embedded ``schema``) -> Iceberg schema.

Connect's types: int8 / int16 / int32 -> int, int64 -> long, float32 -> float,
float64 -> double, boolean, string, bytes -> binary, array -> list, map -> map,
struct -> struct; ``optional: false`` -> required. Connect's logical types, by
schema name: ``Decimal`` (bytes; ``scale`` parameter, precision from
``connect.decimal.precision`` or 38) -> decimal, ``Date`` (int32 days) -> date,
``Time`` (int32 ms) -> time, ``Timestamp`` (int64 ms since the epoch, an
instant) -> timestamptz. Other names (Debezium's ``io.debezium.time.*`` among
them) keep their base type, as the Avro mapping does for the same events.

A value schema that is not a struct becomes a struct with one ``value`` column.
"""
from __future__ import annotations

import json
from typing import Any

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FloatType, IcebergType, IntegerType,
    ListType, LongType, MapType, NestedField, StringType, StructType, TimestamptzType, TimeType,
)

from evolution.exceptions import UnsupportedSchemaError

__all__ = ["connect_to_iceberg", "CONNECT_DECIMAL", "CONNECT_DATE", "CONNECT_TIME", "CONNECT_TIMESTAMP",
           "ROOT_VALUE_FIELD"]

CONNECT_DECIMAL = "org.apache.kafka.connect.data.Decimal"
CONNECT_DATE = "org.apache.kafka.connect.data.Date"
CONNECT_TIME = "org.apache.kafka.connect.data.Time"
CONNECT_TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
ROOT_VALUE_FIELD = "value"
DEFAULT_DECIMAL_PRECISION = 38

PRIMITIVES: dict[str, IcebergType] = {
    "int8": IntegerType(), "int16": IntegerType(), "int32": IntegerType(), "int64": LongType(),
    "float32": FloatType(), "float64": DoubleType(), "boolean": BooleanType(), "string": StringType(),
    "bytes": BinaryType(),
}

LOGICAL: dict[str, IcebergType] = {
    CONNECT_DATE: DateType(),
    CONNECT_TIME: TimeType(),
    CONNECT_TIMESTAMP: TimestamptzType(),
}


class _Ids:
    def __init__(self) -> None:
        self.next = 0

    def __call__(self) -> int:
        self.next += 1
        return self.next


def _decimal(node: dict, path: str) -> DecimalType:
    params = node.get("parameters") or {}
    try:
        scale = int(params.get("scale", 0))
        precision = int(params.get("connect.decimal.precision", DEFAULT_DECIMAL_PRECISION))
    except (TypeError, ValueError):
        raise UnsupportedSchemaError(f"{path}: Decimal parameters {params!r} are not numbers") from None
    return DecimalType(max(precision, scale, 1), scale)


def _type(node: Any, path: str, ids: _Ids) -> IcebergType:
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        raise UnsupportedSchemaError(f"{path}: a Connect schema must be an object with a 'type', got {node!r}")
    kind, name = node["type"], node.get("name")
    if name == CONNECT_DECIMAL:
        return _decimal(node, path)
    if name in LOGICAL:
        return LOGICAL[name]
    if kind in PRIMITIVES:
        return PRIMITIVES[kind]
    if kind == "struct":
        fields = []
        for i, f in enumerate(node.get("fields") or []):
            field = f.get("field") if isinstance(f, dict) else None
            if not isinstance(field, str) or not field:
                raise UnsupportedSchemaError(f"{path}.fields[{i}]: a struct field needs a 'field' name")
            fields.append(NestedField(ids(), field, _type(f, f"{path}.{field}", ids),
                                      required=not f.get("optional", False)))
        return StructType(*fields)
    if kind == "array":
        item = node.get("items")
        return ListType(ids(), _type(item, f"{path}[]", ids),
                        element_required=not (item or {}).get("optional", False))
    if kind == "map":
        keys, values = node.get("keys"), node.get("values")
        return MapType(ids(), _type(keys, f"{path}.keys", ids), ids(), _type(values, f"{path}.values", ids),
                       value_required=not (values or {}).get("optional", False))
    raise UnsupportedSchemaError(f"{path}: unknown Connect type {kind!r}")


def connect_to_iceberg(schema: str | dict) -> Schema:
    """The Iceberg schema of a record with this Connect value schema (fresh field ids)."""
    node = json.loads(schema) if isinstance(schema, str) else schema
    ids = _Ids()
    if isinstance(node, dict) and node.get("type") == "struct" and not node.get("name") in LOGICAL:
        struct = _type(node, "schema", ids)
        assert isinstance(struct, StructType)
        return assign_fresh_schema_ids(Schema(*struct.fields))
    root = NestedField(ids(), ROOT_VALUE_FIELD, _type(node, "schema", ids),
                       required=not (node or {}).get("optional", False))
    return assign_fresh_schema_ids(Schema(root))
