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

__all__ = ["compile_converter", "RecordDecoder", "to_batch"]

Conv = Callable[[Any], Any] | None
PRIMITIVE_NAMES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})
NAMED = ("record", "error", "enum", "fixed")


def _fullname(name: str, ns: str | None) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


class _Compiler:
    """Walks the writer schema and the target Arrow type side by side."""

    def __init__(self) -> None:
        self.named: dict[str, tuple[dict, str | None]] = {}

    def define(self, node: dict, ns: str | None) -> tuple[str, str | None]:
        full = _fullname(node["name"], node.get("namespace", ns))
        inner = full.rsplit(".", 1)[0] if "." in full else None
        self.named.setdefault(full, (node, inner))
        return full, inner

    def resolve(self, name: str, ns: str | None) -> tuple[dict, str | None]:
        full = _fullname(name, ns)
        if full in self.named:
            return self.named[full]
        return self.named[name]

    def conv(self, node: Any, ns: str | None, target: pa.DataType) -> Conv:
        if isinstance(node, list):
            return self.union(node, ns, target)
        if isinstance(node, str):
            if node in PRIMITIVE_NAMES:
                return None
            inner, inner_ns = self.resolve(node, ns)
            return self.conv(inner, inner_ns, target)
        kind = node["type"]
        logical = node.get("logicalType")
        if isinstance(kind, (dict, list)):
            return self.conv(kind, ns, target)
        if kind in NAMED:
            full, inner_ns = self.define(node, ns)
            if kind in ("record", "error"):
                return self.record(node, inner_ns, target)
            if logical == "decimal" and not pa.types.is_decimal(target):
                return _decimal_to_bytes(int(node.get("scale", 0)), int(node["size"]))
            return None
        if logical == "decimal" and not pa.types.is_decimal(target):
            return _decimal_to_bytes(int(node.get("scale", 0)), node.get("size"))
        if logical == "uuid" and kind == "string":
            return lambda v: None if v is None else str(v)
        if logical in ("timestamp-nanos", "local-timestamp-nanos") and kind == "long":
            return _nanos_to_micros
        if kind == "array":
            item = self.conv(node["items"], ns, target.value_type)
            if item is None:
                return None
            return lambda v: None if v is None else [item(x) for x in v]
        if kind == "map":
            val = self.conv(node["values"], ns, target.item_type)
            if val is None:
                return lambda v: None if v is None else list(v.items())
            return lambda v: None if v is None else [(k, val(x)) for k, x in v.items()]
        return None

    def record(self, node: dict, ns: str | None, target: pa.DataType) -> Conv:
        convs = []
        for f in node.get("fields", []):
            c = self.conv(f["type"], ns, target.field(f["name"]).type)
            if c is not None:
                convs.append((f["name"], c))
        if not convs:
            return None

        def convert(v: Any) -> Any:
            if v is None:
                return None
            if isinstance(v, tuple):
                v = v[1]
            out = dict(v)
            for name, c in convs:
                out[name] = c(out.get(name))
            return out
        return convert

    def union(self, branches: list, ns: str | None, target: pa.DataType) -> Conv:
        real = [b for b in branches if b != "null"]
        if len(real) == 1:
            c = self.conv(real[0], ns, target)
            if c is None:
                return _unwrap_named if _branch_match(real[0], ns, self)[0] == "named" else None
            return lambda v: None if v is None else c(v)
        names = [target.field(i).name for i in range(target.num_fields)]
        specs = []
        for i, b in enumerate(real):
            specs.append((names[i], _branch_match(b, ns, self), self.conv(b, ns, target.field(i).type)))
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
        return convert


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


def _branch_match(branch: Any, ns: str | None, comp: _Compiler) -> tuple[str, Any]:
    """("named", fullname) for named types, else ("type", python predicate)."""
    if isinstance(branch, str) and branch not in PRIMITIVE_NAMES:
        node, _ = comp.resolve(branch, ns)
        return "named", _fullname(node["name"], node.get("namespace", ns))
    if isinstance(branch, str):
        return "type", _PY_TESTS[branch]
    kind = branch.get("type")
    if kind in NAMED:
        return "named", _fullname(branch["name"], branch.get("namespace", ns))
    logical = branch.get("logicalType")
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
    return "type", _PY_TESTS.get(kind, lambda v: False)


def compile_converter(schema: Any, arrow_schema: pa.Schema) -> Callable[[Any], dict]:
    """fastavro value -> dict matching ``arrow_schema`` (root wrapped as ``value``)."""
    comp = _Compiler()
    is_record = isinstance(schema, dict) and schema.get("type") in ("record", "error")
    if is_record:
        c = comp.conv(schema, None, pa.struct(list(arrow_schema)))
        return c or _unwrap_named
    root = arrow_schema.names[0]
    c = comp.conv(schema, None, arrow_schema.field(0).type)
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
