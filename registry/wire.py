"""Registry wire format: find each value's schema reference, vectorised.

Framings understood (same as confluent-kafka 2.x serializers):

* magic 0 + 4-byte big-endian schema id, then the payload;
* magic 1 + 16-byte schema GUID, then the payload;
* schema id in a record header (``__value_schema_id`` / ``__key_schema_id``,
  whose value is itself one of the two frames above); the value is then the
  bare payload.

Parsing a whole batch works on the Arrow offsets/data buffers with numpy, so
the per-row Python cost is paid only for header-framed rows and failures.
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pyarrow as pa

from registry.exceptions import WireFormatError

__all__ = [
    "MAGIC_ID", "MAGIC_GUID", "VALUE_SCHEMA_ID_HEADER", "KEY_SCHEMA_ID_HEADER",
    "SchemaRef", "FrameGroup", "FrameFailure", "FramedBatch",
    "as_binary_array", "buffers", "parse_frame", "split_frames", "payloads", "take_rows",
]

MAGIC_ID = 0
MAGIC_GUID = 1
ID_PREFIX = 5
GUID_PREFIX = 17
VALUE_SCHEMA_ID_HEADER = "__value_schema_id"
KEY_SCHEMA_ID_HEADER = "__key_schema_id"

# failure classes shared with decode.py
TOMBSTONE = "tombstone"
WIRE_FORMAT = "wire_format"

SchemaRef = int | str
"""A schema id (int) or a schema GUID (canonical UUID string)."""


@dataclass(frozen=True)
class FrameGroup:
    """Rows sharing one schema reference and one prefix length."""

    ref: SchemaRef
    skip: int
    indices: np.ndarray


@dataclass(frozen=True)
class FrameFailure:
    index: int
    error_class: str
    reason: str


@dataclass
class FramedBatch:
    groups: list[FrameGroup] = field(default_factory=list)
    failures: list[FrameFailure] = field(default_factory=list)


def as_binary_array(values: Any) -> pa.Array:
    """Accept a (Large)BinaryArray, ChunkedArray or list of bytes/None."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    if isinstance(values, pa.Array):
        if pa.types.is_binary(values.type) or pa.types.is_large_binary(values.type):
            return values
        if pa.types.is_binary_view(values.type) or pa.types.is_string(values.type) \
                or pa.types.is_large_string(values.type):
            return values.cast(pa.large_binary())
        raise TypeError(f"expected a binary array, got {values.type}")
    return pa.array(list(values), type=pa.binary())


def parse_frame(buf: bytes) -> tuple[SchemaRef, int]:
    """(schema reference, payload offset) of one framed value; WireFormatError if not framed."""
    if not buf:
        raise WireFormatError("empty value")
    magic = buf[0]
    if magic == MAGIC_ID:
        if len(buf) < ID_PREFIX:
            raise WireFormatError(f"magic 0 needs 5 header bytes, value has {len(buf)}")
        return int.from_bytes(buf[1:5], "big"), ID_PREFIX
    if magic == MAGIC_GUID:
        if len(buf) < GUID_PREFIX:
            raise WireFormatError(f"magic 1 needs 17 header bytes, value has {len(buf)}")
        return str(uuid.UUID(bytes=bytes(buf[1:17]))), GUID_PREFIX
    raise WireFormatError(f"unknown magic byte {magic:#04x}")


def buffers(arr: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(offsets[n+1], data bytes, validity) as numpy views of the Arrow buffers."""
    n = len(arr)
    off_type = np.int64 if pa.types.is_large_binary(arr.type) else np.int32
    bufs = arr.buffers()
    offsets = np.frombuffer(bufs[1], dtype=off_type)[arr.offset: arr.offset + n + 1].astype(np.int64)
    data = np.frombuffer(bufs[2], dtype=np.uint8) if bufs[2] is not None else np.zeros(0, np.uint8)
    if arr.null_count:
        valid = np.asarray(arr.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    else:
        valid = np.ones(n, dtype=bool)
    return offsets, data, valid


def _header_value(headers: Any, key: str) -> bytes | None:
    if not headers:
        return None
    items: Iterable = headers.items() if isinstance(headers, Mapping) else headers
    found = None
    for item in items:
        if isinstance(item, Mapping):
            k, v = item.get("key"), item.get("value")
        else:
            k, v = item
        if k == key:
            found = v
    if isinstance(found, str):
        found = found.encode()
    return found


def split_frames(values: Any, headers: Sequence[Any] | None = None,
                 header_key: str = VALUE_SCHEMA_ID_HEADER) -> FramedBatch:
    """Group row positions by (schema reference, prefix length); report bad rows.

    ``headers`` (optional, one entry per row: list of (key, value) pairs, a
    dict, or None) wins over the payload prefix when it carries ``header_key``.
    """
    arr = as_binary_array(values)
    n = len(arr)
    out = FramedBatch()
    if n == 0:
        return out
    offsets, data, valid = buffers(arr)
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    pending = valid.copy()
    rows = np.arange(n, dtype=np.int64)

    for i in np.flatnonzero(~valid):
        out.failures.append(FrameFailure(int(i), TOMBSTONE, "null value (tombstone)"))

    header_refs: dict[SchemaRef, list[int]] = {}
    if headers is not None:
        if len(headers) != n:
            raise ValueError(f"headers has {len(headers)} rows, values has {n}")
        for i, h in enumerate(headers):
            if not h or not pending[i]:
                continue
            hv = _header_value(h, header_key)
            if hv is None:
                continue
            pending[i] = False
            try:
                ref, _ = parse_frame(hv)
            except WireFormatError as exc:
                out.failures.append(FrameFailure(i, WIRE_FORMAT, f"header {header_key}: {exc.reason}"))
                continue
            header_refs.setdefault(ref, []).append(i)

    magic = np.full(n, -1, dtype=np.int16)
    has = pending & (lengths >= 1)
    magic[has] = data[starts[has]]
    m0 = pending & (magic == MAGIC_ID) & (lengths >= ID_PREFIX)
    m1 = pending & (magic == MAGIC_GUID) & (lengths >= GUID_PREFIX)
    bad = pending & ~m0 & ~m1
    for i in np.flatnonzero(bad):
        try:
            parse_frame(arr[int(i)].as_py())
            reason = "unframed value"
        except WireFormatError as exc:
            reason = exc.reason
        out.failures.append(FrameFailure(int(i), WIRE_FORMAT, reason))

    if m0.any():
        s = starts[m0]
        ids = ((data[s + 1].astype(np.int64) << 24) | (data[s + 2].astype(np.int64) << 16)
               | (data[s + 3].astype(np.int64) << 8) | data[s + 4].astype(np.int64))
        r0 = rows[m0]
        uniq, inverse = np.unique(ids, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(uniq) + 1))
        for k, sid in enumerate(uniq):
            out.groups.append(FrameGroup(int(sid), ID_PREFIX, r0[order[bounds[k]:bounds[k + 1]]]))
    if m1.any():
        s = starts[m1]
        mat = data[s[:, None] + 1 + np.arange(16)]
        r1 = rows[m1]
        keys = [bytes(row) for row in mat]
        by_guid: dict[bytes, list[int]] = {}
        for pos, key in enumerate(keys):
            by_guid.setdefault(key, []).append(pos)
        for key, pos in by_guid.items():
            out.groups.append(FrameGroup(str(uuid.UUID(bytes=key)), GUID_PREFIX,
                                         r1[np.asarray(pos, dtype=np.int64)]))
    for ref, idx in header_refs.items():
        out.groups.append(FrameGroup(ref, 0, np.asarray(idx, dtype=np.int64)))
    out.failures.sort(key=lambda f: f.index)
    return out


def take_rows(values: Any, indices: np.ndarray) -> pa.Array:
    """The given rows (no copy when they are all rows in order)."""
    arr = as_binary_array(values)
    n = len(indices)
    if n == len(arr) and (n == 0 or (indices[0] == 0 and indices[-1] == n - 1
                                     and bool(np.all(np.diff(indices) == 1)))):
        return arr
    return arr.take(pa.array(indices, type=pa.int64()))


def payloads(values: Any, indices: np.ndarray, skip: int) -> pa.Array:
    """The payload bytes (first ``skip`` bytes of each value dropped) of the given rows."""
    taken = take_rows(values, indices)
    if not skip:
        return taken
    offsets, data, _ = buffers(taken)
    n = len(taken)
    base = int(offsets[0])
    data = data[base: int(offsets[-1])]
    keep = np.ones(len(data), dtype=bool)
    keep[(offsets[:-1] - base)[:, None] + np.arange(skip)] = False
    new_offsets = offsets - base - skip * np.arange(n + 1, dtype=np.int64)
    return pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), n, [None, pa.py_buffer(new_offsets), pa.py_buffer(data[keep])])
