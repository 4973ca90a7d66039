"""Protobuf wire format read for a whole batch at once with numpy (registry/protobuf_wire.py).

``Bytes`` holds a batch's payload bytes and a view of the 8-byte little-endian word at every
offset, so one gather reads a varint (decoded branch-free from its word when it has at most
8 bytes), a fixed value, or a string's first 12 bytes. ``scan`` walks all records in
lock-step: one step reads the next field (tag, then value or length) of every record not yet
at its end and keeps it by field number. Anything malformed raises ``Unsupported``; the
caller then leaves the batch to upb, which finds the bad row and says why.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["Bytes", "Unsupported", "PAD", "MAX_STEPS", "scan", "packed", "strings"]

MAX_STEPS = 256        # fields a record may have (each repeated element counts) before upb takes the batch
PAD = 16               # bytes after the data (any value): words are read up to 15 bytes past a string's start
_LEN_LIMIT = (1 << 31) - 1
_MAX_FIELD = (1 << 29) - 1
_U = np.uint64
_HIGH_BITS = _U(0x8080808080808080)
_LOW_BITS = _U(0x7F7F7F7F7F7F7F7F)
_GROUPS = [_U(0x7F << (7 * k)) for k in range(8)]
_LOW32 = _U(0xFFFFFFFF)

Events = tuple  # (record, wire type, value, start, length) of one field number, in (step, record) order


class Unsupported(Exception):
    """A shape or bytes this path does not take; the upb path decodes the batch instead."""


class Bytes:
    """A batch's bytes (PAD more after the last record) and the 8-byte word at every offset."""

    def __init__(self, data: np.ndarray) -> None:
        self.data = data
        self.words = np.ndarray((len(data) - 7,), dtype="<u8", buffer=data, strides=(1,))


def _long_varints(data: np.ndarray, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints of more than 8 bytes (negative ints), byte by byte."""
    val = np.zeros(len(pos), _U)
    nxt = pos.copy()
    more = np.arange(len(pos))
    for j in range(10):
        p = pos[more] + j
        if (p >= end[more]).any():
            raise Unsupported("truncated varint")
        bj = data[p]
        if j == 9 and (bj > 1).any():
            raise Unsupported("varint beyond 64 bits")
        val[more] |= (bj & 0x7F).astype(_U) << _U(7 * j)
        nxt[more] = p + 1
        more = more[bj >= 0x80]
        if not more.size:
            return val, nxt
    raise Unsupported("varint longer than 10 bytes")


def _word_varints(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, byte counts) of the varints that begin the words ``w``; a count of 8: the varint
    does not end inside the word's first 7 bytes (it is longer, or the word holds fewer)."""
    if not (w & _U(0x80)).any():  # all one byte
        return w & _U(0x7F), np.ones(len(w), np.uint8)
    stop = ~w & _HIGH_BITS  # high bits of the bytes that end a varint
    low = stop & (_U(0) - stop)  # the first of them
    mask = low | (low - _U(1))
    count = np.bitwise_count(mask) >> np.uint8(3)
    v = w & mask & _LOW_BITS
    val = v & _GROUPS[0]
    longest = int(count.max())
    for k in range(1, min(longest, 7)):  # groups past the longest varint are zero
        val |= (v >> _U(k)) & _GROUPS[k]
    return val, count


def varints(b: Bytes, pos: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 values, positions after them) of the varints starting at ``pos``; the caller checks
    that they end by ``end`` (one of 8 bytes or more is checked here, byte by byte)."""
    val, count = _word_varints(b.words[pos])
    nxt = pos + count
    long = np.flatnonzero(count == 8)
    if long.size:
        val[long], nxt[long] = _long_varints(b.data, pos[long], end[long])
    return val, nxt


def scan(b: Bytes, starts: np.ndarray, ends: np.ndarray, wanted: frozenset) -> dict[int, Events]:
    """The fields numbered in ``wanted`` of every record (``data[starts[i]:ends[i]]``)."""
    rec = np.flatnonzero(starts < ends)
    pos, end = starts[rec], ends[rec]
    parts: dict[int, list] = {}
    for _ in range(MAX_STEPS):
        if not rec.size:
            break
        w = b.words[pos]
        if not (w & _U(0x80)).any():  # one-byte tags (fields 1-15): the value's first 7 bytes follow
            tag = w & _U(0x7F)
            pos = pos + 1
        else:
            tag, pos = varints(b, pos, end)
            w = None
        wt = tag & _U(7)
        if not (tag & _U(5)).any():  # varints and length-delimited only: one varint read each
            if w is None:
                val, start = varints(b, pos, end)
            else:
                val, count = _word_varints(w >> _U(8))
                start = pos + count
                long = np.flatnonzero(count == 8)
                if long.size:
                    val[long], start[long] = varints(b, pos[long], end[long])
            length = val * (wt >> _U(1))
        else:
            is2 = wt == 2
            common = is2 | (wt == 0)
            if ((wt != 1) & (wt != 5) & ~common).any():
                raise Unsupported("group or invalid wire type")
            val = b.words[pos]
            start = pos.copy()
            length = np.where(wt == 1, _U(8), _U(4))
            val[wt == 5] &= _LOW32
            k = np.flatnonzero(common)
            if k.size:
                val[k], start[k] = varints(b, pos[k], end[k])
                length[k] = val[k] * (wt[k] >> _U(1))
        if length.max() > _LEN_LIMIT:
            raise Unsupported("length out of range")
        length = length.astype(np.int64)
        pos = start + length
        if (pos > end).any():
            raise Unsupported("field runs past its record")
        num = tag >> _U(3)
        low, high = num.min(), num.max()
        if low < 1 or high > _MAX_FIELD:
            raise Unsupported("field number out of range")
        if low == high:  # one field for every record (the usual step)
            if int(low) in wanted:
                parts.setdefault(int(low), []).append((rec, wt, val, start, length))
        else:
            order = np.argsort(num, kind="stable")
            snum = num[order]
            cuts = np.flatnonzero(snum[1:] != snum[:-1]) + 1
            for a, z in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(order)].tolist()):
                f = int(snum[a])
                if f in wanted:
                    o = order[a:z]
                    parts.setdefault(f, []).append((rec[o], wt[o], val[o], start[o], length[o]))
        live = pos < end
        if not live.all():
            rec, pos, end = rec[live], pos[live], end[live]
    else:
        if rec.size:
            raise Unsupported(f"a record of more than {MAX_STEPS} fields")
    return {f: p[0] if len(p) == 1 else tuple(np.concatenate(c) for c in zip(*p)) for f, p in parts.items()}


def by_record(ev: Events) -> Events:
    """Events in (record, wire order) order."""
    order = np.argsort(ev[0], kind="stable")
    return tuple(c[order] for c in ev)


def packed(b: Bytes, starts: np.ndarray, lengths: np.ndarray, wire: int) -> tuple[np.ndarray, np.ndarray]:
    """(values, count per range) of packed ranges: fixed widths reinterpreted, varints cut at
    every byte below 0x80."""
    total = int(lengths.sum())
    first = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=first[1:])
    raw = b.data[np.repeat(starts - first[:-1], lengths) + np.arange(total)]
    if wire in (1, 5):
        width = 8 if wire == 1 else 4
        if (lengths % width).any():
            raise Unsupported("packed fixed values of a partial width")
        return np.ascontiguousarray(raw).view("<u8" if width == 8 else "<u4").astype(_U), lengths // width
    stop = raw < 0x80
    if not stop[first[1:][lengths > 0] - 1].all():
        raise Unsupported("truncated packed varint")
    ends = np.flatnonzero(stop)
    begins = np.concatenate(([0], ends[:-1] + 1)).astype(np.int64)
    if ((ends - begins) >= 10).any():
        raise Unsupported("packed varint longer than 10 bytes")
    shift = ((np.arange(total) - np.repeat(begins, ends - begins + 1)) * 7).astype(_U)
    vals = np.bitwise_or.reduceat((raw & 0x7F).astype(_U) << shift, begins) if total else np.zeros(0, _U)
    stops = np.zeros(total + 1, np.int64)
    np.cumsum(stop, out=stops[1:])
    return vals, stops[first[1:]] - stops[first[:-1]]


def strings(b: Bytes, starts: np.ndarray, lengths: np.ndarray, typ: pa.DataType,
            valid: np.ndarray | None) -> pa.Array:
    """string/binary values at (start, length): a string_view array over the batch's bytes, cast
    (Arrow gathers); strings are checked to be UTF-8. A view is the length and the first 4 bytes,
    then the next 8 bytes (up to 12 bytes, the rest zero) or buffer 0 and the offset."""
    n = len(starts)
    size = lengths.astype(_U)
    w0, w1 = b.words[starts], b.words[starts + 8]
    views = np.empty((n, 2), _U)
    keep0 = np.minimum(size, _U(4)) * _U(8)
    views[:, 0] = size | ((w0 & ((_U(1) << keep0) - _U(1))) << _U(32))
    keep1 = np.minimum(size - np.minimum(size, _U(4)), _U(8)) * _U(8)
    tail = (w0 >> _U(32)) | (w1 << _U(32))
    views[:, 1] = np.where(keep1 == 64, tail, tail & ((_U(1) << (keep1 & _U(63))) - _U(1)))
    long = lengths > 12
    views[long, 1] = starts[long].astype(_U) << _U(32)
    validity = None if valid is None else pa.py_buffer(np.packbits(valid, bitorder="little"))
    text = pa.types.is_large_string(typ)
    arr = pa.Array.from_buffers(pa.string_view() if text else pa.binary_view(), n,
                                [validity, pa.py_buffer(views), pa.py_buffer(b.data)])
    out = arr.cast(typ)
    if text:
        try:
            out.validate(full=True)
        except pa.ArrowInvalid as exc:
            raise Unsupported(f"invalid UTF-8: {exc}") from None
    return out
