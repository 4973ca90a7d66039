"""JSON values -> the Variant binary encoding (Parquet VariantEncoding.md), one (metadata, value) pair each.

Why our own encoder: pyarrow writes no Variant and pyiceberg 0.12 has none, and a
variant column (evolution/variant_type.py) stores each record's value in this
encoding, unshredded: ``metadata`` holds the record's object keys (a dictionary of
strings), ``value`` the value, whose objects name their keys by dictionary id.

What each JSON value becomes:

    null                  primitive null          true / false   primitive boolean
    integral number       int8 / int16 / int32 / int64, the smallest that holds it; beyond
                          int64, decimal16 (scale 0) up to 38 digits, else refused (ValueError)
    other number          double                   decimal.Decimal   decimal4 / 8 / 16 (the smallest)
    string                short string (< 64 bytes) or string
    object                object: field ids sorted by key name, values in that order
    array                 array

The dictionary lists keys in the order they were met (unsorted, as the spec
allows), and is cached per key sequence: records of one shape share one
``metadata`` value, which Parquet's dictionary encoding then stores once.
Offsets and ids take the fewest bytes that hold them. Pure Python, one pass per
value; docs/v3.md gives the measured rate.
"""
from __future__ import annotations

import decimal
import struct
import sys
from array import array
from itertools import accumulate
from typing import Any, Iterable

import pyarrow as pa

__all__ = ["encode_variant", "encode_metadata", "variant_array", "VariantEncodeError"]

# basic types (low two bits of a value header)
_PRIMITIVE, _SHORT_STRING, _OBJECT, _ARRAY = 0, 1, 2, 3
_NULL, _TRUE, _FALSE = b"\x00", bytes([1 << 2]), bytes([2 << 2])
_INT8, _INT16, _INT32, _INT64 = (bytes([t << 2]) for t in (3, 4, 5, 6))
_DOUBLE = bytes([7 << 2])
_DECIMAL4, _DECIMAL8, _DECIMAL16 = (bytes([t << 2]) for t in (8, 9, 10))
_STRING = bytes([16 << 2])
_SHORT_HEADERS = [bytes([(n << 2) | _SHORT_STRING]) for n in range(64)]

_pack_b, _pack_h, _pack_i, _pack_q = (struct.Struct(f).pack for f in ("<b", "<h", "<i", "<q"))
_pack_d = struct.Struct("<d").pack
_pack_u32 = struct.Struct("<I").pack

_MAX_DECIMAL16 = 10 ** 38


class VariantEncodeError(ValueError):
    """A value the Variant encoding cannot hold (an integer of more than 38 digits, a non-JSON type)."""


def _size(n: int) -> int:
    """Bytes of the smallest unsigned little-endian integer that holds ``n``."""
    return 1 if n < 0x100 else 2 if n < 0x10000 else 3 if n < 0x1000000 else 4


_ARRAY_CODES = {2: "H", 4: "I"}
_LITTLE = sys.byteorder == "little"


def _uints(values: list[int], width: int) -> bytes:
    if width == 1:
        return bytes(values)
    code = _ARRAY_CODES.get(width)
    if code is not None and _LITTLE:
        return array(code, values).tobytes()
    return b"".join(v.to_bytes(width, "little") for v in values)


def _int(v: int) -> bytes:
    if -0x80 <= v < 0x80:
        return _INT8 + _pack_b(v)
    if -0x8000 <= v < 0x8000:
        return _INT16 + _pack_h(v)
    if -0x80000000 <= v < 0x80000000:
        return _INT32 + _pack_i(v)
    if -0x8000000000000000 <= v < 0x8000000000000000:
        return _INT64 + _pack_q(v)
    if -_MAX_DECIMAL16 < v < _MAX_DECIMAL16:
        return _DECIMAL16 + b"\x00" + v.to_bytes(16, "little", signed=True)
    raise VariantEncodeError(f"integer {v} has more than 38 digits: a variant cannot hold it")


def _decimal(v: decimal.Decimal) -> bytes:
    sign, digits, exponent = v.as_tuple()
    if not isinstance(exponent, int):
        raise VariantEncodeError(f"{v} is not a finite decimal")
    scale = max(0, -exponent)
    unscaled = int(v.scaleb(scale))
    if len(digits) > 38 or scale > 38 or abs(unscaled) >= _MAX_DECIMAL16:
        raise VariantEncodeError(f"decimal {v} does not fit 38 digits")
    if -0x80000000 <= unscaled < 0x80000000 and abs(unscaled) < 10 ** 9 and scale <= 9:
        return _DECIMAL4 + bytes([scale]) + _pack_i(unscaled)
    if abs(unscaled) < 10 ** 18 and scale <= 18:
        return _DECIMAL8 + bytes([scale]) + _pack_q(unscaled)
    return _DECIMAL16 + bytes([scale]) + unscaled.to_bytes(16, "little", signed=True)


def _string(v: str) -> bytes:
    data = v.encode("utf-8")
    n = len(data)
    if n < 64:
        return _SHORT_HEADERS[n] + data
    return _STRING + _pack_u32(n) + data


class _Encoder:
    """One record's encoding: the keys it met (in order) and the value bytes."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def value(self, v: Any) -> bytes:
        t = type(v)
        if t is str:
            return _string(v)
        if t is int:
            return _int(v)
        if t is float:
            return _DOUBLE + _pack_d(v)
        if t is bool:
            return _TRUE if v else _FALSE
        if v is None:
            return _NULL
        if t is dict:
            return self.object(v)
        if t is list:
            return self.array(v)
        if isinstance(v, decimal.Decimal):
            return _decimal(v)
        if isinstance(v, bool):
            return _TRUE if v else _FALSE
        if isinstance(v, int):
            return _int(int(v))
        if isinstance(v, float):
            return _DOUBLE + _pack_d(float(v))
        if isinstance(v, str):
            return _string(str(v))
        if isinstance(v, dict):
            return self.object(dict(v))
        if isinstance(v, (list, tuple)):
            return self.array(list(v))
        raise VariantEncodeError(f"a {type(v).__name__} is not a JSON value")

    def object(self, obj: dict) -> bytes:
        ids = self.ids
        names = sorted(obj)  # the spec orders field ids by key name (UTF-8 byte order == code point order)
        field_ids = []
        for name in names:
            fid = ids.get(name)
            if fid is None:
                fid = ids[name] = len(ids)
            field_ids.append(fid)
        parts = [self.value(obj[name]) for name in names]
        return self._container(_OBJECT, max(field_ids, default=0), field_ids, parts)

    def array(self, items: list) -> bytes:
        return self._container(_ARRAY, None, None, [self.value(x) for x in items])

    @staticmethod
    def _container(basic: int, max_id: int | None, field_ids: list[int] | None, parts: list[bytes]) -> bytes:
        n = len(parts)
        offsets = [0, *accumulate(map(len, parts))]
        total = offsets[-1]
        offset_size = 1 if total < 0x100 else 2 if total < 0x10000 else 3 if total < 0x1000000 else 4
        large = n > 0xFF
        count = n.to_bytes(4, "little") if large else bytes((n,))
        if basic == _OBJECT:
            id_size = 1 if max_id < 0x100 else 2 if max_id < 0x10000 else 3 if max_id < 0x1000000 else 4
            header = basic | (((large << 4) | ((id_size - 1) << 2) | (offset_size - 1)) << 2)
            head = bytes((header,)) + count + _uints(field_ids, id_size)
        else:
            head = bytes((basic | (((large << 2) | (offset_size - 1)) << 2),)) + count
        parts.insert(0, _uints(offsets, offset_size))
        parts.insert(0, head)
        return b"".join(parts)


def encode_metadata(keys: Iterable[str]) -> bytes:
    """The metadata of a dictionary holding ``keys`` in this order (unsorted unless they happen to be)."""
    names = [k.encode("utf-8") for k in keys]
    offsets = [0]
    for n in names:
        offsets.append(offsets[-1] + len(n))
    width = _size(max(offsets[-1], len(names)))
    is_sorted = len(names) > 0 and all(a < b for a, b in zip(names, names[1:]))
    header = 1 | (is_sorted << 4) | ((width - 1) << 6)
    return b"".join((bytes([header]), len(names).to_bytes(width, "little"), _uints(offsets, width), *names))


_metadata_cache: dict[tuple[str, ...], bytes] = {}
_EMPTY_METADATA = encode_metadata(())


def _metadata_for(keys: tuple[str, ...]) -> bytes:
    if not keys:
        return _EMPTY_METADATA
    hit = _metadata_cache.get(keys)
    if hit is None:
        hit = encode_metadata(keys)
        if len(_metadata_cache) >= 4096:  # drifting shapes: bound the cache, keep it simple
            _metadata_cache.clear()
        _metadata_cache[keys] = hit
    return hit


def encode_variant(v: Any) -> tuple[bytes, bytes]:
    """(metadata, value) of one JSON value; raises VariantEncodeError for what a variant cannot hold."""
    enc = _Encoder()
    value = enc.value(v)
    return _metadata_for(tuple(enc.ids)), value


def variant_array(values: Iterable[Any], present: Iterable[bool] | None = None) -> pa.StructArray:
    """The variant column of ``values`` (evolution.variant_type.VARIANT_ARROW); where ``present`` is false the
    row is null (a missing field), which differs from JSON null (a variant holding null)."""
    from evolution.variant_type import VARIANT_ARROW

    metadata, data, mask = [], [], []
    if present is None:
        for v in values:
            m, d = encode_variant(v)
            metadata.append(m)
            data.append(d)
        mask = None
    else:
        for v, here in zip(values, present):
            if here:
                m, d = encode_variant(v)
            else:
                m, d = _EMPTY_METADATA, _NULL
            metadata.append(m)
            data.append(d)
            mask.append(not here)
    children = [pa.array(metadata, pa.large_binary()), pa.array(data, pa.large_binary())]
    return pa.StructArray.from_arrays(children, fields=list(VARIANT_ARROW),
                                      mask=pa.array(mask, pa.bool_()) if mask and any(mask) else None)
