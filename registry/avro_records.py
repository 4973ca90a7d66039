"""Per-record Avro decoding (fastavro) and conversion of its values to Arrow.

This is the exact but slower path: schemas the columnar reader cannot handle
(maps, multi-branch unions, non-record roots) and the isolation of bad records
found by the columnar path. fastavro already returns Decimal, date, time and
datetime objects that ``pa.array`` accepts for the target types; a converter
compiled once per schema only touches what differs (uuid objects, union
branches turned into structs, root wrapping, nanosecond timestamps).
"""
from __future__ import annotations

import datetime as dt
import decimal
import io
import uuid
from typing import Any, Callable

import fastavro
import pyarrow as pa

from evolution.avro_visitor import NAMED_KINDS, AvroVisitor, visit_avro

__all__ = ["compile_converter", "RecordDecoder", "to_batch"]

Conv = Callable[[Any], Any] | None
Match = tuple[str, Any]  # ("named", full name) or ("type", predicate on a fastavro value): picks a union branch
NANOS = ("timestamp-nanos", "local-timestamp-nanos")


class _Compiler(AvroVisitor[tuple[Conv, Match]]):
    """Walks the writer schema with the target Arrow type as partner; builds (converter, branch match)."""

    def __init__(self, target: pa.DataType) -> None:
        self.targets = [target]

    @property
    def target(self) -> pa.DataType:
        return self.targets[-1]

    def before_field(self, field: dict) -> None:
        self.targets.append(self.target.field(field["name"]).type)

    def after_field(self, field: dict) -> None:
        self.targets.pop()

    def before_element(self) -> None:
        self.targets.append(self.target.value_type)

    def after_element(self) -> None:
        self.targets.pop()

    def before_value(self) -> None:
        self.targets.append(self.target.item_type)

    def after_value(self) -> None:
        self.targets.pop()

    def before_branch(self, name: str) -> None:
        self.targets.append(self.target.field(name).type)

    def after_branch(self, name: str) -> None:
        self.targets.pop()

    def named(self, name: str, node: dict, result: tuple) -> tuple[Conv, Match]:
        return result[0], ("named", name)

    def record(self, node: dict, fields: list) -> tuple[Conv, Match]:
        convs = [(f["name"], c) for f, (c, _) in fields if c is not None]
        if not convs:
            return None, _type_match(node)

        def convert(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, tuple):
                v = v[1]
            out = dict(v)
            for name, c in convs:
                out[name] = c(out.get(name))
            return out
        return convert, _type_match(node)

    def union(self, node: list, branches: list, nullable: bool) -> tuple[Conv, Match]:
        if len(branches) == 1:
            c, match = branches[0][1]
            if c is None:
                return (_unwrap_named if match[0] == "named" else None), _NO_MATCH
            return (lambda v: None if v is None else c(v)), _NO_MATCH
        specs = [(name, match, c) for name, (c, match) in branches]
        named_idx = {s[1][1]: s for s in specs if s[1][0] == "named"}

        def convert(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
                spec = named_idx.get(v[0]) or named_idx.get(v[0].rsplit(".", 1)[-1])
                if spec is not None:
                    return {spec[0]: spec[2](v) if spec[2] else v[1]}
            for name, (kind, test), c in specs:
                if kind == "type" and test(v):
                    return {name: c(v) if c else v}
            raise ValueError(f"value {v!r} matches no union branch")
        return convert, _NO_MATCH

    def array(self, node: dict, element: tuple) -> tuple[Conv, Match]:
        item = element[0]
        if item is None:
            return None, _type_match(node)
        return (lambda v: None if v is None else [item(x) for x in v]), _type_match(node)

    def map(self, node: dict, value: tuple) -> tuple[Conv, Match]:
        val = value[0]
        if val is None:
            return (lambda v: None if v is None else list(v.items())), _type_match(node)
        return (lambda v: None if v is None else [(k, val(x)) for k, x in v.items()]), _type_match(node)

    def enum(self, node: dict) -> tuple[Conv, Match]:
        return None, _NO_MATCH

    def fixed(self, node: dict) -> tuple[Conv, Match]:
        return None, _NO_MATCH

    def primitive(self, node: str | dict, name: str) -> tuple[Conv, Match]:
        return None, _type_match(node)

    def logical(self, node: dict, logical: str, kind: Any) -> tuple[Conv, Match] | None:
        if isinstance(kind, (dict, list)):
            return None
        if logical == "decimal" and not pa.types.is_decimal(self.target):
            size = int(node["size"]) if kind in NAMED_KINDS else node.get("size")
            return _decimal_to_bytes(int(node.get("scale", 0)), size), _type_match(node)
        if kind in NAMED_KINDS:
            return None
        if logical == "uuid" and kind == "string":
            return (lambda v: None if v is None else str(v)), _type_match(node)
        if logical in NANOS and kind == "long":
            return _nanos_to_micros, _type_match(node)
        return None

    def wrapped(self, node: dict, inner: tuple) -> tuple[Conv, Match]:
        return inner


def _decimal_to_bytes(scale: int, size: int | None) -> Callable[[Any], Any]:
    """A decimal whose logical type the table ignores (e.g. precision > 38) stays raw bytes."""
    def conv(v: Any) -> Any:
        if v is None or isinstance(v, bytes):
            return v
        unscaled = int(v.scaleb(scale))
        n = size or max(1, (unscaled.bit_length() + 8) // 8)
        return unscaled.to_bytes(n, "big", signed=True)
    return conv


def _unwrap_named(v: Any) -> Any:
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str):
        return v[1]
    return v


def _nanos_to_micros(v: Any) -> Any:
    if isinstance(v, int) and not isinstance(v, bool):
        return v // 1000
    return v


_PY_TESTS: dict[str, Callable[[Any], bool]] = {
    "boolean": lambda v: isinstance(v, bool),
    "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "long": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "float": lambda v: isinstance(v, float),
    "double": lambda v: isinstance(v, float),
    "string": lambda v: isinstance(v, str),
    "bytes": lambda v: isinstance(v, bytes),
}


def _type_match(node: Any) -> Match:
    """The Python type fastavro returns for an unnamed schema, as a union branch predicate."""
    if isinstance(node, str):
        return "type", _PY_TESTS.get(node, lambda v: False)
    kind = node.get("type")
    logical = node.get("logicalType")
    if logical == "decimal":
        return "type", lambda v: isinstance(v, decimal.Decimal)
    if logical == "uuid":
        return "type", lambda v: isinstance(v, (uuid.UUID, str))
    if logical == "date":
        return "type", lambda v: isinstance(v, dt.date) and not isinstance(v, dt.datetime)
    if logical in ("time-millis", "time-micros"):
        return "type", lambda v: isinstance(v, dt.time)
    if logical and "timestamp" in logical:
        return "type", lambda v: isinstance(v, (dt.datetime, int))
    if kind == "array":
        return "type", lambda v: isinstance(v, list)
    if kind == "map":
        return "type", lambda v: isinstance(v, dict)
    return "type", _PY_TESTS.get(kind, lambda v: False) if isinstance(kind, str) else (lambda v: False)


_NO_MATCH: Match = ("type", lambda v: False)


def compile_converter(schema: Any, arrow_schema: pa.Schema) -> Callable[[Any], dict]:
    """fastavro value -> dict matching ``arrow_schema`` (root wrapped as ``value``)."""
    is_record = isinstance(schema, dict) and schema.get("type") in ("record", "error")
    if is_record:
        c, _ = visit_avro(schema, _Compiler(pa.struct(list(arrow_schema))))
        return c or _unwrap_named
    root = arrow_schema.names[0]
    c, _ = visit_avro(schema, _Compiler(arrow_schema.field(0).type))
    if c is None:
        return lambda v: {root: _unwrap_named(v)}
    return lambda v: {root: c(v)}


def to_batch(rows: list[dict], arrow_schema: pa.Schema) -> pa.RecordBatch:
    """Rows (already converted) -> RecordBatch of exactly ``arrow_schema``."""
    struct = pa.array(rows, type=pa.struct(list(arrow_schema)))
    return pa.RecordBatch.from_struct_array(struct).cast(arrow_schema)


class RecordDecoder:
    """fastavro schemaless decoding of one payload at a time."""

    def __init__(self, parsed_schema: Any, raw_schema: Any, arrow_schema: pa.Schema) -> None:
        self.parsed = parsed_schema
        self.arrow_schema = arrow_schema
        self.convert = compile_converter(raw_schema, arrow_schema)

    def decode_one(self, payload: bytes) -> dict:
        value = fastavro.schemaless_reader(io.BytesIO(payload), self.parsed, None,
                                           return_named_type=True)
        return self.convert(value)

    def decode(self, framed: pa.Array | list[bytes], skip: int = 0
               ) -> tuple[pa.RecordBatch, list[int], list[tuple[int, str]]]:
        """(batch of good rows, their positions, [(position, reason)] of bad rows).

        ``framed`` values carry a ``skip``-byte wire prefix in front of the payload.
        """
        if isinstance(framed, pa.Array):
            framed = framed.to_pylist()
        payloads = [v[skip:] for v in framed] if skip else framed
        rows: list[dict] = []
        ok: list[int] = []
        bad: list[tuple[int, str]] = []
        for pos, payload in enumerate(payloads):
            try:
                rows.append(self.decode_one(payload))
                ok.append(pos)
            except Exception as exc:  # any malformed payload becomes a failure entry
                bad.append((pos, f"{type(exc).__name__}: {exc}"[:500]))
        try:
            return to_batch(rows, self.arrow_schema), ok, bad
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            pass
        keep_rows, keep_ok = [], []
        for pos, row in zip(ok, rows):
            try:
                to_batch([row], self.arrow_schema)
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                bad.append((pos, f"arrow conversion: {exc}"[:500]))
                continue
            keep_rows.append(row)
            keep_ok.append(pos)
        bad.sort()
        return to_batch(keep_rows, self.arrow_schema), keep_ok, bad
