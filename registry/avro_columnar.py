"""Columnar Avro decoding: framed values -> in-memory Avro container -> polars -> Arrow.

The payloads of a chunk become ONE block of an object container file (one
block per record was measured 26x slower in polars). A corrupt or truncated
payload inside a block shifts every later record and polars does not always
notice (measured: it can return garbage silently). So every record carries a
check value: the container's schema is the writer schema with a leading
``long`` field, and record i is varint(SALT + i) + payload (Avro encodes a
record as the plain concatenation of its fields). SALT is chosen so the
varint is exactly 5 bytes: for magic-0 framing the 5-byte wire prefix is
overwritten in place, so building the block is one memory copy.

After reading, the check column must equal SALT + i. The first row r that does
not match starts at a wrong offset, so record r-1 consumed the wrong number of
bytes: rows before it are accepted, record r-1 is decoded alone with fastavro
(decoded or reported as a failure) and the columnar read resumes at r. When
polars raises instead (errors, or ``pyo3_runtime.PanicException``, a
BaseException) the chunk is bisected down to small ranges decoded per record.
A last record that stops short of its payload's end decodes exactly as
fastavro (and confluent-kafka's deserializer) would: trailing bytes ignored.

polars does not implement maps or multi-branch unions: those schemas never
take this path (see ``columnar_supported``). Nor does it resolve a reference to
a named type defined earlier (Debezium's envelope: ``after`` names the ``Value``
record ``before`` defines): the container's schema spells such a type out again
under a name of its own (``reader_schema``; the bytes are the same).
"""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from evolution.avro_visitor import NAMED_KINDS, PRIMITIVE_NAMES, AvroVisitor, fullname, visit_avro
from registry.avro_records import RecordDecoder, to_batch
from registry.wire import buffers

__all__ = ["SYNC", "SALT", "CHECK_FIELD", "columnar_supported", "container_header",
           "container_block", "with_check_field", "ColumnarDecoder"]

SYNC = bytes(range(0xA0, 0xB0))
SMALL_RANGE = 16
# Inputs under PER_RECORD_BUDGET // leaves rows (within [SMALL_RANGE, PER_RECORD_MAX]) are decoded per
# record: polars' fixed ~0.6 ms buys nothing there (crossovers measured: ~14 rows at 60 flat fields,
# ~55 at 12, ~60 for the 15-leaf benchmark record, over 96 at 3).
PER_RECORD_BUDGET = 720
PER_RECORD_MAX = 48
# ranges where polars failed but fastavro decoded every record: after this many
# the schema is assumed unreadable by polars and decoded per record from then on
MAX_READER_DISAGREEMENTS = 3
CHECK_FIELD = "__icerouter_check"
SALT = (1 << 32) + 0x5A3C_96E1          # zigzag(SALT + i) takes exactly 5 varint bytes
CHECK_BYTES = 5
MAX_CHUNK = (1 << 34) - SALT - 1
_NOT_DATA_ERRORS = (KeyboardInterrupt, SystemExit, GeneratorExit, MemoryError)


def _varint(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def container_header(schema_json: str) -> bytes:
    """Object container header: magic, metadata map (schema, null codec), sync."""
    meta = {"avro.schema": schema_json.encode(), "avro.codec": b"null"}
    out = bytearray(b"Obj\x01")
    out += _varint(len(meta))
    for key, value in meta.items():
        out += _varint(len(key)) + key.encode() + _varint(len(value)) + value
    out += _varint(0) + SYNC
    return bytes(out)


def check_bytes(n: int) -> np.ndarray:
    """(n, CHECK_BYTES) uint8: the varint encodings of SALT + i."""
    zz = (SALT + np.arange(n, dtype=np.int64)) << 1
    out = np.empty((n, CHECK_BYTES), dtype=np.uint8)
    for b in range(CHECK_BYTES):
        byte = (zz >> (7 * b)) & 0x7F
        out[:, b] = byte | 0x80 if b + 1 < CHECK_BYTES else byte
    return out


def container_block(framed: pa.Array, skip: int, header: bytes = b"") -> bytes:
    """``header``, then one block: count, size, then varint(SALT + i) + payload_i, then sync; vectorised.

    ``framed`` values carry a ``skip``-byte wire prefix in front of the payload.
    The block is built in one buffer: the payloads are copied once, the check
    values written over their prefixes (measured 25% off the decode of 10,000
    records against building the block and the header apart and joining them).
    """
    offsets, data, _ = buffers(framed)
    n = len(framed)
    base, end = int(offsets[0]), int(offsets[-1])
    starts = offsets[:-1] - base
    size = end - base + n * (CHECK_BYTES - skip)
    lead = header + _varint(n) + _varint(size)
    out = np.empty(len(lead) + size + len(SYNC), dtype=np.uint8)
    out[:len(lead)] = np.frombuffer(lead, dtype=np.uint8)
    body = out[len(lead): len(lead) + size]
    checks = check_bytes(n)
    if skip == CHECK_BYTES:
        body[:] = data[base:end]
        body[starts[:, None] + np.arange(CHECK_BYTES)] = checks
    else:
        region = data[base:end]
        if skip:
            keep = np.ones(len(region), dtype=bool)
            keep[starts[:, None] + np.arange(skip)] = False
            region = region[keep]
            starts = starts - skip * np.arange(n, dtype=np.int64)
        body[:] = np.insert(region, np.repeat(starts, CHECK_BYTES), checks.reshape(-1))
    out[len(lead) + size:] = np.frombuffer(SYNC, dtype=np.uint8)
    return out.tobytes()


def with_check_field(schema: dict) -> dict:
    """The writer record schema with the leading check field."""
    out = dict(schema)
    out["fields"] = [{"name": CHECK_FIELD, "type": "long"}] + list(schema.get("fields", []))
    return out


def reader_schema(schema: Any) -> Any:
    """The schema with every reference to a named type replaced by a copy of its definition, renamed
    (polars 2.1 fails a block whose schema refers to a type by name: "avro-error: OutOfSpec").
    Records, arrays and unions encode the same either way. A recursive schema is returned as it is."""
    defined: dict[str, tuple[dict, str | None]] = {}  # full name -> (definition, enclosing namespace)
    emitted: set[str] = set()
    expanding: list[str] = []

    def define(node: dict, ns: str | None) -> dict:
        full = fullname(node["name"], node.get("namespace", ns))
        inner_ns = full.rsplit(".", 1)[0] if "." in full else None
        if full in expanding:
            raise RecursionError(full)  # a recursive schema: kept as it is
        defined.setdefault(full, (node, ns))
        out = dict(node)
        if full in emitted:  # spelled out again: a name of its own
            out["name"] = f"{full.rsplit('.', 1)[-1]}_{len(emitted)}"
            out.pop("namespace", None)
            if inner_ns:
                out["namespace"] = inner_ns
            out.pop("aliases", None)
        emitted.add(fullname(out["name"], out.get("namespace", ns)))
        if node["type"] in ("record", "error"):
            expanding.append(full)
            out["fields"] = [{**f, "type": walk(f["type"], inner_ns)} for f in node.get("fields", [])]
            expanding.pop()
        return out

    def walk(node: Any, ns: str | None) -> Any:
        if isinstance(node, list):
            return [walk(branch, ns) for branch in node]
        if isinstance(node, str):
            if node in PRIMITIVE_NAMES:
                return node
            full = fullname(node, ns)
            full = full if full in defined or node not in defined else node
            if full not in defined:
                return node  # unknown: left for the reader to refuse
            if full in expanding:
                raise RecursionError(full)  # a recursive schema: kept as it is
            return define(*defined[full])
        if not isinstance(node, dict):
            return node
        kind = node.get("type")
        if kind in NAMED_KINDS and isinstance(node.get("name"), str):
            return define(node, ns)
        if isinstance(kind, (dict, list)):
            return {**node, "type": walk(kind, ns)}
        if kind == "array" and "items" in node:
            return {**node, "items": walk(node["items"], ns)}
        if kind == "map" and "values" in node:
            return {**node, "values": walk(node["values"], ns)}
        return node

    try:
        return walk(schema, None)
    except RecursionError:
        return schema


def columnar_supported(schema: Any) -> bool:
    """True when polars reads this writer schema correctly (record root, no maps,
    no multi-branch unions)."""
    if not (isinstance(schema, dict) and schema.get("type") in ("record", "error")):
        return False
    if any(f.get("name") == CHECK_FIELD for f in schema.get("fields", [])):
        return False
    return visit_avro(schema, _PolarsReads())


class _PolarsReads(AvroVisitor[bool]):
    """True where polars 2.1 reads the schema right: no maps, no multi-branch unions, no nanos,
    durations or decimals wider than 38 digits, no record name defined twice."""

    def __init__(self) -> None:
        self.records: dict = {}  # name -> the definition (a reference walks the same one again)

    def record(self, node: dict, fields: list) -> bool:
        if self.records.setdefault(node.get("name"), id(node)) != id(node):
            return False
        return all(ok for _, ok in fields)

    def union(self, node: list, branches: list, nullable: bool) -> bool:
        return len(branches) == 1 and branches[0][1]

    def array(self, node: dict, element: bool) -> bool:
        return element

    def map(self, node: dict, value: bool) -> bool:
        return False

    def enum(self, node: dict) -> bool:
        return True

    def fixed(self, node: dict) -> bool:
        return True

    def primitive(self, node, name: str) -> bool:
        return True

    def logical(self, node: dict, logical: str, kind: Any) -> bool | None:
        if isinstance(kind, (dict, list)):
            return None  # a wrapped type: its own logical type (if any) counts
        if logical in ("timestamp-nanos", "local-timestamp-nanos", "duration"):
            return False
        if logical == "decimal" and not 0 < int(node.get("precision", 0)) <= 38:
            return False  # mapped to plain bytes; polars panics on it
        return None

    def recursive(self, name: str) -> bool:
        return True

    def unknown(self, kind: Any) -> bool:
        return True

    def invalid(self, node: Any) -> bool:
        return True


def cast_table(table: pa.Table, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """polars' Arrow output (categoricals, large/view strings, ms/ns units) -> target."""
    arrays = []
    for f in arrow_schema:
        col = table.column(f.name)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        arrays.append(_cast(col, f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _cast(col: pa.Array, target: pa.DataType) -> pa.Array:
    """`col` as `target`. Arrow refuses a struct whose null rows hold nulls in a required child (as polars
    writes an optional record that is absent): such a struct is rebuilt from its children cast alone."""
    if col.type == target:
        return col
    try:
        return col.cast(target)
    except pa.ArrowInvalid:
        if not (pa.types.is_struct(col.type) and pa.types.is_struct(target)) or not col.null_count:
            raise
    present = col.is_valid()
    children = dict(zip((f.name for f in col.type), col.flatten()))
    arrays = []
    for field in target:
        child = _cast(children[field.name], field.type)
        if not field.nullable and child.null_count:
            if pc.any(pc.and_(present, child.is_null())).as_py():
                raise pa.ArrowInvalid(f"field {field.name!r} of a present record is null")
            child = _zero_filled(child)
        arrays.append(child)
    return pa.StructArray.from_arrays(arrays, fields=list(target), mask=pc.invert(present))


def _zero_filled(child: pa.Array) -> pa.Array:
    """Nulls replaced by the type's zero value, as Arrow itself fills the required children of a null
    struct (Parquet writers refuse nulls in a required column, even under a null parent)."""
    zero = pa.array([None], pa.struct([pa.field("v", child.type, nullable=False)])).field(0)
    index = np.where(child.is_null().to_numpy(zero_copy_only=False), len(child), np.arange(len(child)))
    return pa.concat_arrays([child, zero]).take(pa.array(index))


def _leaves(schema: pa.Schema) -> int:
    """Leaf columns of an Arrow schema (struct fields, list and map values counted through)."""
    def count(t: pa.DataType) -> int:
        if pa.types.is_struct(t):
            return sum(count(t.field(i).type) for i in range(t.num_fields)) or 1
        if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
            return count(t.value_type)
        if pa.types.is_map(t):
            return count(t.key_type) + count(t.item_type)
        return 1
    return max(1, sum(count(f.type) for f in schema))


class ColumnarDecoder:
    """Decodes many payloads of one writer schema through polars, exactly."""

    def __init__(self, schema: dict, arrow_schema: pa.Schema, fallback: RecordDecoder,
                 chunk_rows: int = 65536) -> None:
        self.header = container_header(json.dumps(with_check_field(reader_schema(schema))))
        self.arrow_schema = arrow_schema
        self.fallback = fallback
        self.chunk_rows = min(chunk_rows, MAX_CHUNK)
        # observability: how often bad input forced the slow paths
        self.stats = {"reads": 0, "misaligned": 0, "reader_errors": 0, "per_record_rows": 0,
                      "reader_disagreements": 0}
        self.disabled = False
        self.per_record_below = max(SMALL_RANGE, min(PER_RECORD_MAX, PER_RECORD_BUDGET // _leaves(arrow_schema)))

    def _read(self, framed: pa.Array, skip: int) -> tuple[pa.Table, int | None]:
        """(table, first row whose record starts at a wrong offset, or None)."""
        self.stats["reads"] += 1
        df = pl.read_avro(io.BytesIO(container_block(framed, skip, self.header)))
        if df.height != len(framed):
            raise ValueError(f"reader returned {df.height} rows for {len(framed)} records")
        table = df.to_arrow()
        check = table.column(0).to_numpy()
        bad = np.flatnonzero(check != SALT + np.arange(len(framed), dtype=np.int64))
        return table.drop_columns([CHECK_FIELD]), (int(bad[0]) if len(bad) else None)

    def _per_record(self, framed: pa.Array, skip: int, lo: int, hi: int,
                    batches: list, ok: list, bad: list, after_error: bool = False) -> None:
        self.stats["per_record_rows"] += hi - lo
        batch, good, failed = self.fallback.decode(framed.slice(lo, hi - lo), skip)
        if after_error and not failed:
            self.stats["reader_disagreements"] += 1
            if self.stats["reader_disagreements"] >= MAX_READER_DISAGREEMENTS:
                self.disabled = True
        batches.append(batch)
        ok.append(np.asarray(good, dtype=np.int64) + lo)
        bad.extend((pos + lo, reason) for pos, reason in failed)

    def _decode_range(self, framed: pa.Array, skip: int, lo: int, hi: int,
                      batches: list, ok: list, bad: list) -> None:
        while lo < hi:
            if hi - lo <= SMALL_RANGE or self.disabled:
                self._per_record(framed, skip, lo, hi, batches, ok, bad)
                return
            try:
                table, misaligned = self._read(framed.slice(lo, hi - lo), skip)
                if misaligned == 0:
                    raise ValueError("first record misaligned")
                good = table.num_rows if misaligned is None else misaligned - 1
                # values outside the target type (e.g. decimal precision) fail here
                batch = cast_table(table.slice(0, good), self.arrow_schema) if good else None
            except BaseException as exc:  # polars panics derive from BaseException
                if isinstance(exc, _NOT_DATA_ERRORS):
                    raise
                self.stats["reader_errors"] += 1
                if hi - lo <= 2 * SMALL_RANGE:
                    self._per_record(framed, skip, lo, hi, batches, ok, bad, after_error=True)
                    return
                mid = (lo + hi) // 2
                self._decode_range(framed, skip, lo, mid, batches, ok, bad)
                self._decode_range(framed, skip, mid, hi, batches, ok, bad)
                return
            if batch is not None:
                batches.append(batch)
                ok.append(np.arange(lo, lo + good, dtype=np.int64))
            if misaligned is None:
                return
            self.stats["misaligned"] += 1
            self._per_record(framed, skip, lo + good, lo + good + 1, batches, ok, bad)
            lo += good + 1

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray,
                                                          list[tuple[int, str]]]:
        """(batch of good rows, their positions in ``framed``, [(position, reason)])."""
        batches: list[pa.RecordBatch] = []
        ok: list[np.ndarray] = []
        bad: list[tuple[int, str]] = []
        n = len(framed)
        if n < self.per_record_below:
            self._per_record(framed, skip, 0, n, batches, ok, bad)
        else:
            for lo in range(0, n, self.chunk_rows):
                self._decode_range(framed, skip, lo, min(n, lo + self.chunk_rows), batches, ok, bad)
        batches = [b for b in batches if b.num_rows]
        if not batches:
            batch = to_batch([], self.arrow_schema)
        elif len(batches) == 1:
            batch = batches[0]
        else:
            batch = pa.Table.from_batches(batches, schema=self.arrow_schema) \
                .combine_chunks().to_batches()[0]
        positions = np.concatenate(ok) if ok else np.zeros(0, dtype=np.int64)
        return batch, positions, sorted(bad)

