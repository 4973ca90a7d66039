"""Kafka Connect JSON payloads read column-wise: the JSON shape pyarrow's reader reads a Connect
schema's values as, and the conversions from that shape to the table's Arrow types (Connect's
logical types: Decimal and bytes from base64 text, Date from days, Time from milliseconds,
Timestamp from milliseconds since the epoch). Used by registry/connect_json.py; a schema or a
batch this cannot take goes record by record there.
"""
from __future__ import annotations

import base64
import decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from evolution.connect import CONNECT_DATE, CONNECT_DECIMAL, CONNECT_TIME, CONNECT_TIMESTAMP
from registry.arrow_lists import with_values

__all__ = ["raw_type", "finish", "unscaled"]


def unscaled(v: Any, scale: int) -> decimal.Decimal:
    if isinstance(v, str):  # base64 of the big-endian two's complement unscaled value
        raw = base64.b64decode(v, validate=True)
        return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
    if isinstance(v, (int, float)) and not isinstance(v, bool):  # decimal.format=NUMERIC
        return decimal.Decimal(str(v))
    raise TypeError(f"expected a decimal, got {v!r}")


def raw_type(node: dict) -> pa.DataType | None:
    """The Arrow type pyarrow's JSON reader reads a payload value of this Connect schema as (None: a
    shape it cannot read, such as a map, whose JSON object has data keys)."""
    kind, name = node.get("type"), node.get("name")
    if name in (CONNECT_DECIMAL,) or kind == "bytes":
        return pa.string()  # base64 text (or a number: decimal.format=NUMERIC, read per record)
    if kind in ("int8", "int16", "int32", "int64"):
        return pa.int64()
    if kind in ("float32", "float64"):
        return pa.float64()
    if kind == "boolean":
        return pa.bool_()
    if kind == "string":
        return pa.string()
    if kind == "array":
        item = raw_type(node.get("items") or {})
        return pa.list_(item) if item is not None else None
    if kind == "struct":
        fields = []
        for f in node.get("fields") or []:
            t = raw_type(f)
            if t is None:
                return None
            fields.append(pa.field(f["field"], t))
        return pa.struct(fields)
    return None


_MS_TIME = pa.time32("ms")


def _filled(array: pa.Array) -> pa.Array:
    """`array` without nulls: each null a placeholder (0, "", an empty list...), as pyarrow builds a
    required field of a null struct; Parquet refuses nulls in a required column even under a null parent."""
    t = array.type
    if pa.types.is_struct(t):
        children = [array.field(i) for i in range(t.num_fields)]
        return pa.StructArray.from_arrays([c if t.field(i).nullable or not c.null_count else _filled(c)
                                           for i, c in enumerate(children)], fields=list(t))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return type(array).from_arrays(array.offsets, array.values, type=t)
    return pc.fill_null(array, pa.scalar(_PLACEHOLDERS.get(_kind(t), 0), type=t))


def _kind(t: pa.DataType) -> str:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "string"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return "binary"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_floating(t):
        return "float"
    if pa.types.is_decimal(t):
        return "decimal"
    return "int"


_PLACEHOLDERS = {"string": "", "binary": b"", "bool": False, "float": 0.0, "decimal": decimal.Decimal(0), "int": 0}


def finish(array: pa.Array, node: dict, target: pa.DataType) -> pa.Array | None:
    """A column as read from JSON -> Connect's values in the table's Arrow type `target` (None: a
    required value is missing where its struct is there: the records go one by one, with reasons)."""
    kind, name = node.get("type"), node.get("name")
    if name == CONNECT_DECIMAL:
        scale = int((node.get("parameters") or {}).get("scale", 0))
        return pa.array([None if v is None else unscaled(v, scale) for v in array.to_pylist()], target)
    if name == CONNECT_DATE:
        return array.cast(pa.int32()).cast(pa.date32()).cast(target)
    if name == CONNECT_TIME:
        return array.cast(pa.int32()).cast(_MS_TIME).cast(target)
    if name == CONNECT_TIMESTAMP:
        return array.cast(pa.timestamp("ms", tz="UTC")).cast(target)
    if kind == "bytes":
        return pa.array([None if v is None else base64.b64decode(v, validate=True) for v in array.to_pylist()],
                        target)
    if kind == "struct":
        children = []
        for f, tf in zip(node.get("fields") or [], target):
            child = pc.struct_field(array, f["field"])
            if not f.get("optional", False) and child.null_count > array.null_count:
                return None
            done = finish(child, f, tf.type)
            if done is None:
                return None
            if not tf.nullable and done.null_count:  # only where the struct is null: a placeholder value
                done = _filled(done)
            children.append(done)
        # a required child may hold nulls only where its struct is null: the struct's mask says so
        return pa.StructArray.from_arrays(children, fields=list(target),
                                          mask=array.is_null() if array.null_count else None)
    if kind == "array":
        item = node.get("items") or {}
        values = array.flatten()
        if not item.get("optional", False) and values.null_count:
            return None
        done = finish(values, item, target.value_type)
        if done is None:
            return None
        return with_values(array, done, target)
    return array.cast(target)
