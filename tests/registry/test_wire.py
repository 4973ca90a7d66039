"""Wire-format framing and the vectorised grouping of a batch by schema reference."""
from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pytest

from registry.avro_columnar import CHECK_BYTES, SALT, container_block, container_header
from registry.exceptions import WireFormatError
from registry.wire import parse_frame, payloads, split_frames

GUID = uuid.UUID("0f3c2b1a-1111-4222-8333-944455556666")


def test_parse_frame():
    assert parse_frame(b"\x00\x00\x00\x01\x02rest") == (258, 5)
    assert parse_frame(b"\x01" + GUID.bytes + b"x") == (str(GUID), 17)
    for bad, msg in [(b"", "empty"), (b"\x00\x00", "5 header bytes"),
                     (b"\x01" + b"\x00" * 3, "17 header bytes"), (b"{\"a\":1}", "magic byte 0x7b")]:
        with pytest.raises(WireFormatError) as err:
            parse_frame(bad)
        assert msg in err.value.reason


@pytest.mark.parametrize("large", [False, True])
def test_split_frames_groups_rows_by_reference(large):
    values = [
        b"\x00\x00\x00\x00\x07a",          # id 7
        b"\x00\x00\x00\x01\x00b",          # id 256
        None,                             # tombstone
        b"\x01" + GUID.bytes + b"c",       # guid
        b"\x00\x00\x00\x00\x07",           # id 7, empty payload
        b"\x05junk",                       # bad magic
        b"\x00\x00",                       # too short
        b"bare-payload",                   # id from header
        b"\x00\x00\x00\x00\x07d",          # id 7
    ]
    headers = [None] * 7 + [[("__value_schema_id", b"\x00\x00\x00\x00\x09")], None]
    arr = pa.array(values, type=pa.large_binary() if large else pa.binary())
    framed = split_frames(arr, headers)
    got = {(g.ref, g.skip): g.indices.tolist() for g in framed.groups}
    assert got == {(7, 5): [0, 4, 8], (256, 5): [1], (str(GUID), 17): [3], (9, 0): [7]}
    assert [(f.index, f.error_class) for f in framed.failures] == [
        (2, "tombstone"), (5, "wire_format"), (6, "wire_format")]
    assert payloads(arr, np.array([0, 4, 8]), 5).to_pylist() == [b"a", b"", b"d"]
    assert payloads(arr, np.array([3]), 17).to_pylist() == [b"c"]


def test_split_frames_on_sliced_array_keeps_positions():
    base = pa.array([b"\x00\x00\x00\x00\x01x"] * 4 + [b"\x00\x00\x00\x00\x02y"] * 4)
    framed = split_frames(base.slice(3, 3))
    assert {g.ref: g.indices.tolist() for g in framed.groups} == {1: [0], 2: [1, 2]}


def test_container_block_layout():
    """Count, size, then varint(SALT+i) in place of each 5-byte prefix, then sync."""
    framed = pa.array([b"\x00\x00\x00\x00\x01" + b"ab", b"\x00\x00\x00\x00\x01"], type=pa.binary())
    block = container_block(framed, 5)
    assert block[0] == 4 and block[1] == 2 * (2 * CHECK_BYTES + 2)  # zigzag(2), zigzag(12)
    first = block[2: 2 + CHECK_BYTES]
    value, shift = 0, 0
    for b in first:
        value |= (b & 0x7F) << shift
        shift += 7
    assert value >> 1 == SALT
    assert block[2 + CHECK_BYTES: 4 + CHECK_BYTES] == b"ab"
    # other prefix lengths produce the same block
    assert container_block(pa.array([b"ab", b""]), 0) == block
    assert container_block(pa.array([b"xyzab", b"xyz"]), 3) == block
    header = container_header('"long"')
    assert header.startswith(b"Obj\x01") and container_block(framed, 5, header) == header + block
