"""Columnar Avro decoding: payloads -> in-memory Avro container -> polars -> Arrow.

Each payload becomes its own one-record block of an object container file
(count 1, byte size, bytes, sync marker), built with numpy. Giving every
record its own block bounds the reader to exactly that record's bytes, so a
corrupt or truncated payload can never shift the records after it (a single
many-record block does: measured, polars then returns garbage silently). A bad
record fails the read of its chunk; the chunk is bisected down to small
ranges that are decoded per record with fastavro, which isolates exactly the
bad records and decodes the rest. Trailing bytes after a complete record are
ignored, exactly as confluent-kafka's deserializer does.

polars panics (``pyo3_runtime.PanicException``, a BaseException) on some
truncations and does not implement maps or multi-branch unions: those schemas
never take this path (see ``columnar_supported``).
"""
from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import polars as pl
import pyarrow as pa

from registry.avro_records import RecordDecoder, to_batch
from registry.wire import buffers

__all__ = ["SYNC", "columnar_supported", "container_header", "container_blocks",
           "ColumnarDecoder"]

SYNC = bytes(range(0xA0, 0xB0))
SMALL_RANGE = 16
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


def container_blocks(payloads: pa.Array) -> np.ndarray:
    """One block per payload: 0x02, zigzag varint(size), payload, sync; vectorised."""
    offsets, data, _ = buffers(payloads)
    lengths = offsets[1:] - offsets[:-1]
    zz = lengths << 1
    vlen = np.ones(len(lengths), dtype=np.int64)
    for k in range(1, 10):
        vlen += zz >= (1 << (7 * k))
    rec = 1 + vlen + lengths + len(SYNC)
    dst = np.zeros(len(rec) + 1, dtype=np.int64)
    np.cumsum(rec, out=dst[1:])
    out = np.empty(int(dst[-1]), dtype=np.uint8)
    starts = dst[:-1]
    out[starts] = 2
    for k in range(int(vlen.max(initial=1))):
        m = vlen > k
        byte = (zz[m] >> (7 * k)) & 0x7F
        byte |= np.where(vlen[m] > k + 1, 0x80, 0)
        out[starts[m] + 1 + k] = byte
    body_dst = starts + 1 + vlen
    total = int(lengths.sum())
    if total:
        cstart = np.cumsum(lengths) - lengths
        k = np.arange(total, dtype=np.int64)
        out[k + np.repeat(body_dst - cstart, lengths)] = data[k + np.repeat(offsets[:-1] - cstart, lengths)]
    sync = np.frombuffer(SYNC, dtype=np.uint8)
    out[(dst[1:] - len(SYNC))[:, None] + np.arange(len(SYNC))] = sync
    return out


def columnar_supported(schema: Any) -> bool:
    """True when polars reads this writer schema correctly (record root, no maps,
    no multi-branch unions)."""
    if not (isinstance(schema, dict) and schema.get("type") in ("record", "error")):
        return False
    return _walk_ok(schema, set())


def _walk_ok(node: Any, seen: set) -> bool:
    if isinstance(node, list):
        real = [b for b in node if b != "null"]
        return len(real) == 1 and _walk_ok(real[0], seen)
    if isinstance(node, str):
        return True
    kind = node.get("type")
    if isinstance(kind, (dict, list)):
        return _walk_ok(kind, seen)
    if kind == "map":
        return False
    if node.get("logicalType") in ("timestamp-nanos", "local-timestamp-nanos"):
        return False
    if kind == "array":
        return _walk_ok(node["items"], seen)
    if kind in ("record", "error"):
        name = node.get("name")
        if name in seen:
            return False
        seen.add(name)
        return all(_walk_ok(f["type"], seen) for f in node.get("fields", []))
    return True


def cast_table(table: pa.Table, arrow_schema: pa.Schema) -> pa.RecordBatch:
    """polars' Arrow output (categoricals, large/view strings, ms/ns units) -> target."""
    arrays = []
    for f in arrow_schema:
        col = table.column(f.name)
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
        arrays.append(col.cast(f.type) if col.type != f.type else col)
    return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


class ColumnarDecoder:
    """Decodes many payloads of one writer schema through polars, exactly."""

    def __init__(self, schema_json: str, arrow_schema: pa.Schema, fallback: RecordDecoder,
                 chunk_rows: int = 8192) -> None:
        self.header = container_header(schema_json)
        self.arrow_schema = arrow_schema
        self.fallback = fallback
        self.chunk_rows = chunk_rows

    def _read(self, payloads: pa.Array) -> pa.RecordBatch:
        body = container_blocks(payloads)
        buf = io.BytesIO(self.header + body.tobytes())
        table = pl.read_avro(buf).to_arrow()
        if table.num_rows != len(payloads):
            raise ValueError(f"reader returned {table.num_rows} rows for {len(payloads)} records")
        return cast_table(table, self.arrow_schema)

    def _decode_range(self, payloads: pa.Array, lo: int, hi: int,
                      batches: list, ok: list, bad: list) -> None:
        part = payloads.slice(lo, hi - lo)
        if hi - lo > SMALL_RANGE:
            try:
                batches.append(self._read(part))
                ok.append(np.arange(lo, hi, dtype=np.int64))
                return
            except BaseException as exc:  # polars panics derive from BaseException
                if isinstance(exc, _NOT_DATA_ERRORS):
                    raise
            mid = (lo + hi) // 2
            self._decode_range(payloads, lo, mid, batches, ok, bad)
            self._decode_range(payloads, mid, hi, batches, ok, bad)
            return
        batch, good, failed = self.fallback.decode(part.to_pylist())
        batches.append(batch)
        ok.append(np.asarray(good, dtype=np.int64) + lo)
        bad.extend((pos + lo, reason) for pos, reason in failed)

    def decode(self, payloads: pa.Array) -> tuple[pa.RecordBatch, np.ndarray,
                                                   list[tuple[int, str]]]:
        """(batch of good rows, their positions in ``payloads``, [(position, reason)])."""
        batches: list[pa.RecordBatch] = []
        ok: list[np.ndarray] = []
        bad: list[tuple[int, str]] = []
        n = len(payloads)
        for lo in range(0, n, self.chunk_rows):
            self._decode_range(payloads, lo, min(n, lo + self.chunk_rows), batches, ok, bad)
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


def schema_json(raw: Any) -> str:
    return raw if isinstance(raw, str) else json.dumps(raw)
