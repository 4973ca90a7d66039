"""Deletion vector blobs and their Puffin file, checked against the spec's layout and another reader.

pyiceberg 0.12's own deletion vector reader (pyiceberg.table.deletion_vector, written apart from
ours) must read the positions back from our Puffin files; the byte layout is checked field by field
against the Puffin spec's ``deletion-vector-v1`` description.
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
import pytest
from pyiceberg.table.deletion_vector import deletion_vectors_from_puffin_file
from pyiceberg.table.puffin import PuffinFile

from router.catalog.puffin import DV_MAGIC, POS_ID, PUFFIN_MAGIC, parse_vector, puffin_file, serialize_vector
from router.exceptions import RowLevelError

CASES = {
    "empty": np.empty(0, np.int64),
    "sparse": np.array([0, 3, 17, 4095, 65_535, 65_536, 1_000_000], np.int64),
    "dense": np.arange(0, 200_000, 2, dtype=np.int64),  # bitmap containers (> 4096 values per 65536)
    "runs": np.concatenate([np.arange(10, 50_000), np.arange(70_000, 140_000)]).astype(np.int64),  # run containers
    "64-bit": np.array([5, (1 << 32) + 7, (3 << 32) + 1, (3 << 32) + 65_540], np.int64),  # keys 0, 1 and 3
    # run containers in 40 containers: a run cookie followed by the offsets header
    "many run containers": np.concatenate([np.arange(k * 65_536, k * 65_536 + 100) for k in range(40)]).astype(np.int64),
}


@pytest.mark.parametrize("positions", CASES.values(), ids=CASES.keys())
def test_a_vector_reads_back_as_written(positions):
    assert np.array_equal(parse_vector(serialize_vector(positions)), positions)


@pytest.mark.parametrize("positions", [CASES["sparse"], CASES["64-bit"]], ids=["sparse", "64-bit"])
def test_the_blob_is_framed_as_the_puffin_spec_says(positions):
    blob = serialize_vector(positions)
    (length,) = struct.unpack(">I", blob[:4])
    assert length == len(blob) - 8  # magic + vector; the CRC follows them
    assert blob[4:8] == DV_MAGIC == bytes.fromhex("D1D33964")
    assert struct.unpack(">I", blob[-4:])[0] == zlib.crc32(blob[4:-4])
    keys = sorted({int(p) >> 32 for p in positions})
    assert struct.unpack("<Q", blob[8:16])[0] == len(keys)  # bitmaps, 8 bytes little-endian
    assert struct.unpack("<I", blob[16:20])[0] == keys[0]  # the first key, 4 bytes little-endian


def test_pyiceberg_reads_our_puffin_files():
    """Another implementation of the format (pyiceberg's reader, on pyroaring) reads every vector
    of a file with several blobs, each by its referenced data file."""
    vectors = {"s3://b/t/data/a.parquet": CASES["sparse"], "s3://b/t/data/b.parquet": CASES["64-bit"],
               "s3://b/t/data/c.parquet": CASES["dense"]}
    content, places = puffin_file([(p, serialize_vector(v), len(v)) for p, v in vectors.items()])
    read = {dv.referenced_data_file: dv.to_vector().to_numpy() for dv in
            deletion_vectors_from_puffin_file(PuffinFile(content))}
    assert set(read) == set(vectors)
    for path, positions in vectors.items():
        assert np.array_equal(np.sort(read[path]), positions), path
    # each blob is where the footer (and so the manifest entry) says
    for (offset, length), positions in zip(places, vectors.values()):
        assert np.array_equal(parse_vector(content[offset:offset + length]), positions)


def test_the_footer_has_what_the_spec_requires():
    content, places = puffin_file([("file:/t/a.parquet", serialize_vector(CASES["sparse"]), 7)])
    assert content[:4] == content[-4:] == PUFFIN_MAGIC
    assert content[-8:-4] == b"\0\0\0\0"  # flags: footer not compressed
    (size,) = struct.unpack("<I", content[-12:-8])
    assert content[-16 - size:-12 - size] == PUFFIN_MAGIC
    footer = json.loads(content[-12 - size:-12])
    (blob,) = footer["blobs"]
    assert blob["type"] == "deletion-vector-v1" and blob["fields"] == [POS_ID]
    assert blob["snapshot-id"] == -1 and blob["sequence-number"] == -1  # inherited
    assert (blob["offset"], blob["length"]) == places[0]
    assert blob["properties"] == {"referenced-data-file": "file:/t/a.parquet", "cardinality": "7"}
    assert "compression-codec" not in blob
    assert footer["properties"]["created-by"].startswith("icerouter ")


@pytest.mark.parametrize("damage", ["crc", "magic", "length", "trailing"])
def test_a_damaged_blob_is_refused(damage):
    blob = bytearray(serialize_vector(CASES["sparse"]))
    if damage == "crc":
        blob[20] ^= 0xFF
    elif damage == "magic":
        blob[5] ^= 0xFF
    elif damage == "length":
        blob[3] += 1
    else:
        vector = bytes(blob[4:-4]) + b"\0\0"
        blob = bytearray(struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector)))
    with pytest.raises(RowLevelError):
        parse_vector(bytes(blob))


def test_negative_positions_are_refused():
    with pytest.raises(RowLevelError):
        serialize_vector(np.array([-1, 3], np.int64))
