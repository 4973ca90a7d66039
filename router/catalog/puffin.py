"""Puffin files of deletion vectors: the ``deletion-vector-v1`` blob and the file around it.

The blob, as the Puffin spec's ``deletion-vector-v1`` says: a 4-byte big-endian
length of magic + vector, the magic ``D1 D3 39 64``, the vector in Roaring's
portable 64-bit form (an 8-byte little-endian count of 32-bit bitmaps, then per
bitmap, by ascending key, the key as 4 bytes little-endian and the 32-bit bitmap
in Roaring's portable format), and a big-endian CRC-32 of magic + vector. The
32-bit bitmaps are pyroaring's (a dependency of pyiceberg, which reads vectors
with it); their sizes are read from their headers here, so a vector is parsed
without re-serialising anything. The file: the magic ``PFA1``, the blobs, and a
footer (magic, the JSON payload listing each blob's type, fields, offset, length
and properties, its 4-byte little-endian length, 4 flag bytes, magic).
"""

from __future__ import annotations

import json
import struct
import zlib

import numpy as np
from pyiceberg.manifest import DataFile
from pyroaring import BitMap

from router.catalog.format_v3 import content_offset, content_size
from router.exceptions import RowLevelError
from router.version import version

#: Field id of a position-delete file's ``pos`` column: the field a vector's blob is computed for.
POS_ID = 2147483545
PUFFIN_MAGIC = b"PFA1"
DV_MAGIC = b"\xd1\xd3\x39\x64"
DV_BLOB_TYPE = "deletion-vector-v1"
_SERIAL_COOKIE_NO_RUN, _SERIAL_COOKIE = 12346, 12347
_NO_OFFSET_THRESHOLD = 4  # a run-cookie bitmap with fewer containers has no offset header



def serialize_vector(positions: np.ndarray) -> bytes:
    """The ``deletion-vector-v1`` blob of sorted, distinct, non-negative int64 positions."""
    positions = np.asarray(positions, dtype=np.int64)
    if len(positions) and positions[0] < 0:
        raise RowLevelError("a deletion vector holds non-negative positions", position=int(positions[0]))
    keys = (positions >> 32).astype(np.int64)
    parts = []
    starts = np.flatnonzero(np.diff(keys, prepend=-1)) if len(keys) else np.empty(0, np.int64)
    ends = np.append(starts[1:], len(keys))
    for s, e in zip(starts, ends):
        bitmap = BitMap((positions[s:e] & 0xFFFFFFFF).astype(np.uint32))
        bitmap.run_optimize()
        parts.append(struct.pack("<I", int(keys[s])) + bitmap.serialize())
    vector = DV_MAGIC + struct.pack("<Q", len(parts)) + b"".join(parts)
    return struct.pack(">I", len(vector)) + vector + struct.pack(">I", zlib.crc32(vector))


def _bitmap_size(buf: memoryview, start: int) -> int:
    """Bytes of the portable 32-bit Roaring bitmap at `start` (its header says; no data is decoded)."""
    cookie = struct.unpack_from("<I", buf, start)[0]
    pos = start + 4
    if cookie & 0xFFFF == _SERIAL_COOKIE:
        count = (cookie >> 16) + 1
        runs = np.unpackbits(np.frombuffer(buf, np.uint8, (count + 7) // 8, pos), bitorder="little")[:count]
        pos += (count + 7) // 8
        offsets = count >= _NO_OFFSET_THRESHOLD
    elif cookie == _SERIAL_COOKIE_NO_RUN:
        count = struct.unpack_from("<I", buf, pos)[0]
        pos += 4
        runs, offsets = np.zeros(count, np.uint8), True
    else:
        raise RowLevelError("not a portable Roaring bitmap in a deletion vector", cookie=cookie)
    cardinalities = np.frombuffer(buf, "<u2", 2 * count, pos)[1::2].astype(np.int64) + 1
    pos += 4 * count + (4 * count if offsets else 0)
    for run, cardinality in zip(runs, cardinalities):
        if run:
            pos += 2 + 4 * struct.unpack_from("<H", buf, pos)[0]
        else:
            pos += 2 * cardinality if cardinality <= 4096 else 8192
    return pos - start


def parse_vector(blob: bytes) -> np.ndarray:
    """Sorted int64 positions of a ``deletion-vector-v1`` blob, its length, magic and CRC checked."""
    buf = memoryview(blob)
    if len(buf) < 12:
        raise RowLevelError("a deletion vector blob is too short", length=len(buf))
    length = struct.unpack_from(">I", buf, 0)[0]
    if length + 8 != len(buf) or bytes(buf[4:8]) != DV_MAGIC:
        raise RowLevelError("a deletion vector blob has a wrong length or magic", length=len(buf))
    vector = buf[4:4 + length]
    if zlib.crc32(vector) != struct.unpack_from(">I", buf, 4 + length)[0]:
        raise RowLevelError("a deletion vector blob fails its CRC check")
    count = struct.unpack_from("<Q", vector, 4)[0]
    pos, out = 12, []
    for _ in range(count):
        key = struct.unpack_from("<I", vector, pos)[0]
        size = _bitmap_size(vector, pos + 4)
        low = np.frombuffer(BitMap.deserialize(bytes(vector[pos + 4:pos + 4 + size])).to_array(), dtype=np.uint32)
        out.append((np.int64(key) << 32) | low.astype(np.int64))
        pos += 4 + size
    if pos != length:
        raise RowLevelError("a deletion vector blob has bytes after its bitmaps", length=length, read=pos)
    return np.concatenate(out) if out else np.empty(0, np.int64)


# ----------------------------------------------------------------------------- the Puffin file

def puffin_file(blobs: list[tuple[str, bytes, int]]) -> tuple[bytes, list[tuple[int, int]]]:
    """A Puffin file of ``deletion-vector-v1`` blobs (referenced data file, blob, cardinality), and
    each blob's (offset, length). Snapshot id and sequence number are -1: inherited, as the spec asks."""
    body, places, metadata = [PUFFIN_MAGIC], [], []
    offset = len(PUFFIN_MAGIC)
    for path, blob, cardinality in blobs:
        places.append((offset, len(blob)))
        metadata.append({"type": DV_BLOB_TYPE, "fields": [POS_ID], "snapshot-id": -1, "sequence-number": -1,
                         "offset": offset, "length": len(blob),
                         "properties": {"referenced-data-file": path, "cardinality": str(cardinality)}})
        body.append(blob)
        offset += len(blob)
    footer = json.dumps({"blobs": metadata, "properties": {"created-by": f"icerouter {version()}"}},
                        separators=(",", ":")).encode()
    body += [PUFFIN_MAGIC, footer, struct.pack("<I", len(footer)), b"\0\0\0\0", PUFFIN_MAGIC]
    return b"".join(body), places


def read_vector(io, delete_file: DataFile) -> np.ndarray:
    """The positions of one deletion vector, read from its blob's place in the Puffin file."""
    offset, size = content_offset(delete_file), content_size(delete_file)
    if offset is None or size is None:
        raise RowLevelError("a deletion vector without content_offset / content_size_in_bytes",
                            file=delete_file.file_path)
    with io.new_input(delete_file.file_path).open() as stream:
        stream.seek(offset)
        return parse_vector(stream.read(size))
