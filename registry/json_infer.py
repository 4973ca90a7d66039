"""Unframed JSON objects whose columns are inferred from the records themselves.

Why pyarrow's JSON reader: the batch's values, joined as newline-delimited JSON,
are parsed and typed in C++ in one call (objects -> structs, arrays -> lists,
integral numbers -> long, others -> double, true/false -> boolean). Only what it
cannot settle takes the per-record path: a value that is not UTF-8, not JSON or
not an object becomes a failure with its reason, and records whose types
disagree within the batch (a field seen as a number and as a string) are split
into groups of one shape each, so the table's ``type_change`` policy decides
about the odd ones instead of the whole batch failing.

What the reader would guess beyond JSON's own types is undone: strings that look
like timestamps stay strings (declare the column to get a timestamp), and a
field seen only as null, an empty object or an empty list adds no column until a
record gives it a type. The inferred shape is written as a JSON Schema and goes
through the same mapping, artifacts and evolution as a registered JSON Schema;
its reference is the shape itself, so equal shapes share one cached entry.
"""
from __future__ import annotations

import hashlib
import json
import threading
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from cachetools import LRUCache
from pyiceberg.schema import Schema

from registry.arrow_lists import not_json, with_values
from registry.artifacts import JSON as JSON_TYPE
from registry.artifacts import SchemaArtifacts, build_artifacts
from registry.exceptions import UnsupportedSchemaType
from registry.ndjson import read_lines

try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is optional
    _loads = json.loads

__all__ = ["infer_json", "inferred_artifacts", "arrow_to_jsonschema"]

_artifacts: LRUCache = LRUCache(maxsize=1024)
_lock = threading.Lock()

Failure = tuple[int, str, str]  # (position, error class, reason)


def _read(values: list[bytes] | pa.Array, schema: pa.Schema | None = None) -> pa.Table:
    """The values (an Arrow array without nulls, or bytes objects on the per-record path) as one table."""
    rows = values if isinstance(values, pa.Array) else pa.array(values, pa.large_binary())
    return read_lines(rows, pj.ParseOptions(explicit_schema=schema) if schema is not None else None)


def _settle(t: pa.DataType, numbers: str) -> pa.DataType | None:
    """The column type JSON itself gives (None: no type yet)."""
    if pa.types.is_null(t):
        return None
    if pa.types.is_struct(t):
        fields = [pa.field(f.name, s) for f in t for s in [_settle(f.type, numbers)] if s is not None]
        return pa.struct(fields) if fields else None
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = _settle(t.value_type, numbers)
        return pa.list_(item) if item is not None else None
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()
    if pa.types.is_integer(t) and numbers == "double":
        return pa.float64()
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    return t


def _settled_schema(schema: pa.Schema, numbers: str) -> pa.Schema:
    return pa.schema([pa.field(f.name, s) for f in schema for s in [_settle(f.type, numbers)] if s is not None])


def _needs_reread(a: pa.DataType, b: pa.DataType) -> bool:
    """True where the reader typed a string as a timestamp: it must read it again as text."""
    if pa.types.is_struct(a):
        return any(_needs_reread(f.type, b.field(f.name).type) for f in a if b.get_field_index(f.name) >= 0)
    if pa.types.is_list(a) or pa.types.is_large_list(a):
        return pa.types.is_list(b) and _needs_reread(a.value_type, b.value_type)
    return (pa.types.is_timestamp(a) or pa.types.is_date(a) or pa.types.is_time(a)) and pa.types.is_string(b)


def _shape(values: list[bytes] | pa.Array, numbers: str) -> tuple[pa.Table, pa.Schema]:
    """The values read as one table and the schema of its settled columns (ArrowInvalid: they disagree)."""
    table = _read(values)
    settled = _settled_schema(table.schema, numbers)
    if any(_needs_reread(f.type, settled.field(f.name).type) for f in table.schema
           if settled.get_field_index(f.name) >= 0):
        keep = pa.schema([table.schema.field(f.name).with_type(_textual(table.schema.field(f.name).type))
                          for f in table.schema])
        table = _read(values, keep)
    return table, settled


def _textual(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_textual(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(_textual(t.value_type))
    if pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t):
        return pa.string()
    return t


def arrow_to_jsonschema(schema: pa.Schema | pa.DataType) -> dict:
    """A JSON Schema with every property optional (a record may leave any key out)."""
    t = pa.struct(list(schema)) if isinstance(schema, pa.Schema) else schema
    if pa.types.is_struct(t):
        return {"type": "object", "properties": {f.name: _nullable(arrow_to_jsonschema(f.type)) for f in t}}
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return {"type": "array", "items": _nullable(arrow_to_jsonschema(t.value_type))}
    if pa.types.is_integer(t):
        return {"type": "integer"}
    if pa.types.is_floating(t):
        return {"type": "number"}
    if pa.types.is_boolean(t):
        return {"type": "boolean"}
    return {"type": "string"}


def _nullable(node: dict) -> dict:
    return {**node, "type": [node["type"], "null"]}


class _NoColumns:
    """The decoder of a shape without columns: each object is a row of none."""

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list]:
        return (pa.RecordBatch.from_struct_array(pa.array([{}] * len(framed), pa.struct([]))),
                np.arange(len(framed), dtype=np.int64), [])


def inferred_artifacts(schema: pa.Schema) -> SchemaArtifacts:
    """Artifacts of an inferred shape, cached by the shape (its reference names it)."""
    text = json.dumps(arrow_to_jsonschema(schema), separators=(",", ":"))
    with _lock:
        hit = _artifacts.get(text)
    if hit is not None:
        return hit
    ref = "json-inferred:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    if len(schema):
        art = build_artifacts(ref, JSON_TYPE, text)
    else:  # no key has a type yet (JSON Schema would read an object without properties as free-form text)
        art = SchemaArtifacts(ref, JSON_TYPE, text, json.loads(text), Schema(), pa.schema([]), _NoColumns(), False)
    with _lock:
        _artifacts[text] = art
    return art


def _conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """``array`` with exactly ``target``'s shape: struct children picked by name, the rest cast."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    if pa.types.is_struct(target):
        children = [_conform(array.field(f.name), f.type) for f in target]
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null() if array.null_count else None)
    if pa.types.is_list(target) or pa.types.is_large_list(target):
        return with_values(array, _conform(array.flatten(), target.value_type), target)
    return array.cast(target)


def _group(table: pa.Table, settled: pa.Schema) -> tuple[SchemaArtifacts, pa.RecordBatch]:
    art = inferred_artifacts(settled)
    columns = [_conform(table.column(f.name), f.type) for f in art.arrow_schema]
    if not columns:  # no key has a type yet: rows with no value column (the Kafka columns still land)
        return art, pa.RecordBatch.from_struct_array(pa.array([{}] * table.num_rows, pa.struct([])))
    return art, pa.RecordBatch.from_arrays(columns, schema=art.arrow_schema)


def _check(values: list[bytes | None], positions: np.ndarray) -> tuple[list[int], list[Failure]]:
    """Positions of JSON objects, and a failure for each value that is not one."""
    good, bad = [], []
    for pos in positions:
        value = values[pos]
        try:
            doc = _loads(value)
        except (ValueError, TypeError) as exc:
            bad.append((int(pos), *not_json(value, exc)))
            continue
        if not isinstance(doc, dict):
            bad.append((int(pos), "decode_error", f"a JSON {_json_kind(doc)} where an object was expected"))
            continue
        good.append(int(pos))
    return good, bad


def _json_kind(doc: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(doc), "null")


def _split(values: list[bytes], positions: list[int], numbers: str, out: list, bad: list[Failure]) -> None:
    """Groups of one shape each, halving where the records disagree."""
    try:
        table, settled = _shape([values[p] for p in positions], numbers)
        out.append((np.asarray(positions, dtype=np.int64), table, settled))
        return
    except pa.ArrowInvalid as exc:
        if len(positions) == 1:
            bad.append((positions[0], "decode_error", f"cannot type this JSON record: {str(exc).splitlines()[0][:200]}"))
            return
    half = len(positions) // 2
    _split(values, positions[:half], numbers, out, bad)
    _split(values, positions[half:], numbers, out, bad)


def infer_json(values: pa.Array, numbers: str = "long") -> tuple[list[tuple[SchemaArtifacts, pa.RecordBatch, np.ndarray]],
                                                                 list[Failure]]:
    """([(artifacts, batch, positions)], [(position, error class, reason)]) for unframed JSON values
    (nulls are left to the caller: tombstones)."""
    present = np.flatnonzero(~np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool))
    if not len(present):
        return [], []
    groups: list[tuple[np.ndarray, pa.Table, pa.Schema]] = []
    bad: list[Failure] = []
    try:  # the whole batch column-wise; Python objects per record only when it does not read as one table
        pc.cast(values, pa.large_string())  # ArrowInvalid unless all UTF-8 (nulls pass)
        rows = values if len(present) == len(values) else values.take(pa.array(present, pa.int64()))
        table, settled = _shape(rows, numbers)
        groups.append((present, table, settled))
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        pylist = values.to_pylist()
        good, bad = _check(pylist, present)
        if good:
            _split(pylist, good, numbers, groups, bad)
    out = []
    for positions, table, settled in groups:
        try:
            art, batch = _group(table, settled)
        except (UnsupportedSchemaType, pa.ArrowInvalid) as exc:
            bad.extend((int(p), "decode_error", f"cannot type this JSON record: {exc}") for p in positions)
            continue
        out.append((art, batch, positions))
    bad.sort()
    return out, bad
