"""The Variant encoder against the spec: every JSON value round-trips through a decoder written from the
spec alone (tests/registry/variant_decoder.py), and the header bytes are the ones the spec lays out."""

from __future__ import annotations

import decimal

import pyarrow as pa
import pytest

from evolution.variant_type import VARIANT_ARROW
from registry.variant_encode import VariantEncodeError, encode_metadata, encode_variant, variant_array
from tests.registry.variant_decoder import decode_metadata, decode_variant

VALUES = [
    None, True, False, 0, 1, -1, 127, -128, 128, -129, 32767, 32768, -32769, 2**31 - 1, 2**31, -(2**31) - 1,
    2**63 - 1, -(2**63), 2**63, -(10**37), 1.5, -0.0, 1e300, "", "x", "é" * 10, "a" * 63, "a" * 64, "ü" * 40,
    [], {}, [1, "two", 3.0, None, [True, {"k": []}]], {"b": 1, "a": 2, "c": {"b": [1, {"a": None}]}},
    {"ключ": 1, "Zeta": 2, "alpha": 3, "é": 4}, {"big": list(range(300))}, {f"k{i}": i for i in range(300)},
    {"long": "v" * 70000}, [{"same": 1}, {"same": 2}, {"other": 3}],
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: repr(v)[:40])
def test_round_trip(value):
    metadata, data = encode_variant(value)
    assert decode_variant(metadata, data) == value


def test_integers_take_the_smallest_type():
    assert encode_variant(5)[1] == bytes([3 << 2, 5])                      # int8
    assert encode_variant(300)[1] == bytes([4 << 2]) + (300).to_bytes(2, "little")
    assert encode_variant(70000)[1][0] == 5 << 2                           # int32
    assert encode_variant(2**40)[1][0] == 6 << 2                           # int64
    assert encode_variant(2**64)[1][:2] == bytes([10 << 2, 0])             # decimal16, scale 0
    with pytest.raises(VariantEncodeError, match="38 digits"):
        encode_variant(10**40)


def test_decimals_take_the_smallest_width():
    for text, kind in [("1.25", 8), ("12345678901.5", 9), ("1234567890123456789012.5", 10)]:
        metadata, data = encode_variant(decimal.Decimal(text))
        assert data[0] == kind << 2 and decode_variant(metadata, data) == decimal.Decimal(text)


def test_strings_short_and_long():
    assert encode_variant("abc")[1] == bytes([(3 << 2) | 1]) + b"abc"
    long = encode_variant("a" * 64)[1]
    assert long[0] == 16 << 2 and int.from_bytes(long[1:5], "little") == 64


def test_object_layout_and_metadata():
    metadata, data = encode_variant({"b": 1, "a": True})
    assert decode_metadata(metadata) == ["a", "b"] and metadata[0] == 0x11  # version 1, sorted, 1-byte offsets
    # basic type 2 with 1-byte ids and offsets, 2 fields, ids 0 (a) and 1 (b), offsets 0, 1 (true), 3 (int8 1)
    assert data == bytes([2, 2, 0, 1, 0, 1, 3, 1 << 2, 3 << 2, 1])
    metadata, _ = encode_variant({"z": {"a": 1}})  # keys in the order met: unsorted, flagged so
    assert decode_metadata(metadata) == ["z", "a"] and metadata[0] == 0x01


def test_large_containers_use_four_byte_counts_and_wider_offsets():
    value = {f"k{i:03}": "x" * 10 for i in range(300)}
    metadata, data = encode_variant(value)
    assert (data[0] >> 2) & 0x10  # is_large
    assert ((data[0] >> 2) >> 2) & 0x03 == 1  # 2-byte field ids (300 keys)
    assert decode_variant(metadata, data) == value


def test_records_of_one_shape_share_metadata():
    a, _ = encode_variant({"x": 1, "y": {"z": 2}})
    b, _ = encode_variant({"x": "other", "y": {"z": [3]}})
    assert a is b


def test_variant_array_nulls_differ_from_json_null():
    arr = variant_array([{"a": 1}, None, None], present=[True, True, False])
    assert arr.type == VARIANT_ARROW
    assert arr.is_null().to_pylist() == [False, False, True]
    rows = arr.to_pylist()
    assert decode_variant(rows[0]["metadata"], rows[0]["value"]) == {"a": 1}
    assert decode_variant(rows[1]["metadata"], rows[1]["value"]) is None  # a variant holding JSON null
    assert pa.StructArray.from_arrays(arr.flatten(), fields=list(VARIANT_ARROW)).type == VARIANT_ARROW
