"""A Parquet footer read and written field by field (Thrift compact protocol), to annotate variant groups.

Why: the Parquet spec says a variant group *must* carry the ``VARIANT`` logical
type, and readers that go by the file (DuckDB) decode the group only then; pyarrow
26 cannot write the annotation (it has no variant type). So a data file of a
table with variant columns is written by pyarrow, then its footer, the
``FileMetaData`` struct at the end of the file, is decoded here into a tree that
keeps every field (known or not) as it was, the ``logicalType`` of each variant
group's ``SchemaElement`` is set, and the tree is encoded back. Row groups and
pages come before the footer, so their offsets stay valid.

Thrift compact protocol, as Parquet uses it: a struct is a list of fields, each
a header byte (field id delta << 4 | type) or a zero delta and a zigzag varint
id, ended by a stop byte; integers are zigzag varints, binaries are a varint
length and bytes, lists a header byte (size << 4 | element type, size 15: a
varint follows).
"""
from __future__ import annotations

import struct
from typing import Any

__all__ = ["Struct", "decode_struct", "encode_struct", "annotate_variant_groups", "AnnotatingStream",
           "VARIANT_LOGICAL_TYPE_FIELD"]

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(13)

# parquet.thrift: FileMetaData.schema (2), SchemaElement.name (4), .num_children (5), .field_id (9),
# .logicalType (10); LogicalType.VARIANT (16), a VariantType struct whose field 1 is specification_version (i8)
_SCHEMA, _NAME, _NUM_CHILDREN, _FIELD_ID, _LOGICAL_TYPE = 2, 4, 5, 9, 10
VARIANT_LOGICAL_TYPE_FIELD = 16
_SPECIFICATION_VERSION = 1


class Struct(list):
    """A Thrift struct: [field id, type, value] triples in the order they were read."""

    def get(self, fid: int) -> Any:
        for f, _, v in self:
            if f == fid:
                return v
        return None

    def set(self, fid: int, ftype: int, value: Any) -> None:
        for entry in self:
            if entry[0] == fid:
                entry[1], entry[2] = ftype, value
                return
        self.append([fid, ftype, value])
        self.sort(key=lambda e: e[0])


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t: int) -> Any:
        if t in (_TRUE, _FALSE):
            return t == _TRUE
        if t == _BYTE:
            return struct.unpack("<b", bytes([self.byte()]))[0]
        if t in (_I16, _I32, _I64):
            return self.zigzag()
        if t == _DOUBLE:
            self.pos += 8
            return struct.unpack("<d", self.data[self.pos - 8:self.pos])[0]
        if t == _BINARY:
            n = self.varint()
            self.pos += n
            return self.data[self.pos - n:self.pos]
        if t in (_LIST, _SET):
            head = self.byte()
            size, etype = head >> 4, head & 0x0F
            if size == 15:
                size = self.varint()
            return (etype, [self.element(etype) for _ in range(size)])
        if t == _MAP:
            size = self.varint()
            if not size:
                return (0, 0, [])
            types = self.byte()
            kt, vt = types >> 4, types & 0x0F
            return (kt, vt, [(self.element(kt), self.element(vt)) for _ in range(size)])
        if t == _STRUCT:
            return self.struct()
        raise ValueError(f"unknown Thrift compact type {t} at byte {self.pos}")

    def element(self, t: int) -> Any:
        if t in (_TRUE, _FALSE):  # a boolean inside a container is a whole byte
            return self.byte() == _TRUE
        return self.value(t)

    def struct(self) -> Struct:
        out, last = Struct(), 0
        while True:
            head = self.byte()
            if head == _STOP:
                return out
            delta, t = head >> 4, head & 0x0F
            fid = last + delta if delta else self.zigzag()
            out.append([fid, t, self.value(t)])
            last = fid


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        if n < 0x80:
            out.append(n)
            return bytes(out)
        out.append((n & 0x7F) | 0x80)
        n >>= 7


def _zigzag(n: int) -> bytes:
    return _varint((n << 1) ^ (n >> 63))


def _value(t: int, v: Any) -> bytes:
    if t in (_TRUE, _FALSE):
        return b""  # the value is in the field header
    if t == _BYTE:
        return struct.pack("<b", v)
    if t in (_I16, _I32, _I64):
        return _zigzag(v)
    if t == _DOUBLE:
        return struct.pack("<d", v)
    if t == _BINARY:
        return _varint(len(v)) + bytes(v)
    if t in (_LIST, _SET):
        etype, items = v
        head = bytes([(len(items) << 4) | etype]) if len(items) < 15 else bytes([0xF0 | etype]) + _varint(len(items))
        return head + b"".join(_element(etype, x) for x in items)
    if t == _MAP:
        kt, vt, items = v
        if not items:
            return b"\x00"
        return _varint(len(items)) + bytes([(kt << 4) | vt]) + b"".join(
            _element(kt, k) + _element(vt, x) for k, x in items)
    if t == _STRUCT:
        return encode_struct(v)
    raise ValueError(f"unknown Thrift compact type {t}")


def _element(t: int, v: Any) -> bytes:
    if t in (_TRUE, _FALSE):
        return bytes([_TRUE if v else _FALSE])
    return _value(t, v)


def encode_struct(s: Struct) -> bytes:
    out, last = bytearray(), 0
    for fid, t, v in s:
        if t in (_TRUE, _FALSE):
            t = _TRUE if v else _FALSE
        delta = fid - last
        out += bytes([(delta << 4) | t]) if 0 < delta <= 15 else bytes([t]) + _zigzag(fid)
        out += _value(t, v)
        last = fid
    out.append(_STOP)
    return bytes(out)


def decode_struct(data: bytes) -> Struct:
    return _Reader(data).struct()


def annotate_variant_groups(footer: bytes, field_ids: set[int]) -> bytes:
    """The FileMetaData ``footer`` with every group whose field id is in ``field_ids`` annotated VARIANT."""
    meta = decode_struct(footer)
    etype, elements = meta.get(_SCHEMA)
    changed = False
    for element in elements:
        if element.get(_FIELD_ID) in field_ids and element.get(_NUM_CHILDREN):
            variant = Struct([[_SPECIFICATION_VERSION, _BYTE, 1]])
            element.set(_LOGICAL_TYPE, _STRUCT, Struct([[VARIANT_LOGICAL_TYPE_FIELD, _STRUCT, variant]]))
            changed = True
    return encode_struct(meta) if changed else footer


class AnnotatingStream:
    """An output stream that passes a Parquet writer's bytes through, holds back what the writer writes on
    close (the footer, after any last pages) and writes it with the variant groups annotated.

    Use: ``hold()`` before the writer's ``close()``, ``finish()`` after it; ``tell()`` is then the file's size.
    """

    def __init__(self, inner: Any, field_ids: set[int]) -> None:
        self.inner, self.field_ids, self.pos, self.held = inner, field_ids, 0, None

    def write(self, data: Any) -> int:
        data = bytes(data)
        if self.held is not None:
            self.held += data
        else:
            self.inner.write(data)
        self.pos += len(data)
        return len(data)

    def hold(self) -> None:
        self.held = bytearray()

    def finish(self) -> None:
        held, self.held = bytes(self.held or b""), None
        if len(held) < 8 or held[-4:] != b"PAR1":
            raise ValueError("the Parquet writer wrote no footer on close")
        n = int.from_bytes(held[-8:-4], "little")
        footer = annotate_variant_groups(held[-8 - n:-8], self.field_ids)
        out = held[:-8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1"
        self.inner.write(out)
        self.pos += len(out) - len(held)

    def tell(self) -> int:
        return self.pos

    def flush(self) -> None:
        if self.held is None:
            self.inner.flush()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    @property
    def closed(self) -> bool:
        return self.inner.closed

    def close(self) -> None:
        self.inner.close()
