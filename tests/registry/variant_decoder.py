"""A Variant binary decoder for the tests, written from the Parquet VariantEncoding spec alone.

Kept apart from registry/variant_encode.py (it shares no code with it) so a round
trip checks the encoder against the spec's layout, not against itself. It also
checks what a reader relies on: the metadata version, object field ids ordered by
key name, offsets within their value.
"""
from __future__ import annotations

import decimal
import struct


def _uint(data: bytes, pos: int, width: int) -> int:
    return int.from_bytes(data[pos:pos + width], "little")


def decode_metadata(metadata: bytes) -> list[str]:
    header = metadata[0]
    assert header & 0x0F == 1, f"metadata version {header & 0x0F}"
    width = (header >> 6) + 1
    size = _uint(metadata, 1, width)
    offsets = [_uint(metadata, 1 + width * (i + 1), width) for i in range(size + 1)]
    start = 1 + width * (size + 2)
    keys = [metadata[start + offsets[i]:start + offsets[i + 1]].decode("utf-8") for i in range(size)]
    if header & 0x10:
        assert keys == sorted(keys) and len(set(keys)) == len(keys), "sorted_strings set on unsorted keys"
    return keys


def decode_value(value: bytes, keys: list[str], pos: int = 0):
    header = value[pos]
    basic, vh = header & 0x03, header >> 2
    if basic == 1:
        return value[pos + 1:pos + 1 + vh].decode("utf-8")
    if basic == 0:
        body = pos + 1
        if vh == 0:
            return None
        if vh in (1, 2):
            return vh == 1
        if vh in (3, 4, 5, 6):
            fmt = {3: "<b", 4: "<h", 5: "<i", 6: "<q"}[vh]
            return struct.unpack_from(fmt, value, body)[0]
        if vh == 7:
            return struct.unpack_from("<d", value, body)[0]
        if vh == 14:
            return struct.unpack_from("<f", value, body)[0]
        if vh in (8, 9, 10):
            scale = value[body]
            width = {8: 4, 9: 8, 10: 16}[vh]
            unscaled = int.from_bytes(value[body + 1:body + 1 + width], "little", signed=True)
            return decimal.Decimal(unscaled).scaleb(-scale)
        if vh == 16:
            n = _uint(value, body, 4)
            return value[body + 4:body + 4 + n].decode("utf-8")
        raise AssertionError(f"primitive type {vh} not expected")
    large = (vh >> (4 if basic == 2 else 2)) & 1
    offset_size = (vh & 0x03) + 1
    count_width = 4 if large else 1
    n = _uint(value, pos + 1, count_width)
    at = pos + 1 + count_width
    if basic == 2:
        id_size = ((vh >> 2) & 0x03) + 1
        ids = [_uint(value, at + i * id_size, id_size) for i in range(n)]
        at += n * id_size
        names = [keys[i] for i in ids]
        assert names == sorted(names), f"object field ids not in key order: {names}"
    offsets = [_uint(value, at + i * offset_size, offset_size) for i in range(n + 1)]
    start = at + (n + 1) * offset_size
    items = [decode_value(value, keys, start + offsets[i]) for i in range(n)]
    if basic == 2:
        return dict(zip(names, items))
    return items


def decode_variant(metadata: bytes, value: bytes):
    """The Python value of one variant (objects as dicts, arrays as lists)."""
    return decode_value(bytes(value), decode_metadata(bytes(metadata)))
