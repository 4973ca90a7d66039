"""Protobuf payloads -> Arrow columns straight from the wire bytes, vectorised over a batch.

Reading parsed messages back through Python objects costs ~0.1 us a field and a record
(registry/protobuf_arrow.py); this path makes no message object. All records of a batch are
walked in lock-step with numpy (one step reads the next field of every record not yet at its
end; a record's fields follow each other in any order), the fields found are kept per field
number, and each column is built from their positions and values: numbers by reinterpreting the
wire values, strings and bytes by one gather in Arrow (a string_view array over the batch's
bytes, cast), sub-messages by walking their byte ranges the same way, packed numbers by cutting
their bytes at the varint ends.

It follows evolution/protobuf.py's mapping and gives what the upb path gives, for the shapes
and bytes it takes. Maps (upb orders their entries by hash), Struct/Value JSON, groups and
required fields are left to upb column by column (``MessagePlan.upb``). Per batch, anything
else raises ``Unsupported`` and the caller decodes the batch with upb: a malformed payload, a
field with a wire type its declaration does not have, a singular message written twice
(protobuf merges those), two members of one oneof, an unknown number of a closed enum, invalid
UTF-8, a Timestamp or Duration beyond int64 microseconds, or a record of more than MAX_STEPS
fields.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from evolution.protobuf import field_kind, value_kind
from registry.protobuf_scan import PAD, Bytes, Events, Unsupported, by_record, packed, scan, strings

__all__ = ["MessagePlan", "Unsupported", "PAD"]

_SECONDS_LIMIT = (2**63 - 1) // 1_000_000 - 3  # with any int32 nanos still inside int64 microseconds
# FieldDescriptor.TYPE_* and the wire type each is written with (the rest: varint, 0)
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL, _STRING, _GROUP, _MESSAGE, \
    _BYTES, _UINT32, _ENUM, _SFIXED32, _SFIXED64, _SINT32, _SINT64 = range(1, 19)
_WIRE = {_DOUBLE: 1, _FIXED64: 1, _SFIXED64: 1, _FLOAT: 5, _FIXED32: 5, _SFIXED32: 5,
         _STRING: 2, _BYTES: 2, _MESSAGE: 2}


def _numbers(ftype: int, raw: np.ndarray) -> np.ndarray:
    """Wire values (uint64) -> numpy values of the mapped Arrow type."""
    if ftype in (_INT64, _SFIXED64):
        return raw.view(np.int64)
    if ftype in (_INT32, _SFIXED32, _ENUM):
        return raw.astype(np.uint32).view(np.int32)
    if ftype in (_UINT32, _FIXED32):
        return raw.astype(np.uint32).astype(np.int64)
    if ftype in (_UINT64, _FIXED64):
        return raw
    if ftype == _SINT32:
        u = raw.astype(np.uint32)
        return ((u >> np.uint32(1)) ^ (np.uint32(0) - (u & np.uint32(1)))).view(np.int32)
    if ftype == _SINT64:
        return ((raw >> np.uint64(1)) ^ (np.uint64(0) - (raw & np.uint64(1)))).view(np.int64)
    if ftype == _BOOL:
        return raw != 0
    if ftype == _DOUBLE:
        return raw.view(np.float64)
    if ftype == _FLOAT:
        return raw.astype(np.uint32).view(np.float32)
    raise Unsupported(f"field type {ftype}")  # pragma: no cover


def _with_validity(arr: pa.Array, valid: np.ndarray) -> pa.Array:
    """``arr`` (no nulls, offset 0) with the rows where ``valid`` is False null."""
    bitmap = pa.py_buffer(np.packbits(valid, bitorder="little"))
    return pa.Array.from_buffers(arr.type, len(arr), [bitmap] + arr.buffers()[1:])


# -- values and fields ------------------------------------------------------------
class _Values:
    """Builds the Arrow array of the values of one field (a scalar kind or a sub-message)."""

    def __init__(self, fd: Any, kind: str, typ: pa.DataType) -> None:
        self.kind, self.typ, self.ftype = kind, typ, fd.type
        self.wire = _WIRE.get(fd.type, 0)
        self.sub: MessagePlan | None = None
        if kind == "message":
            self.sub = MessagePlan(fd.message_type, typ)
        elif kind in ("timestamp", "duration"):
            self.sub = MessagePlan(fd.message_type, pa.struct([("seconds", pa.int64()), ("nanos", pa.int32())]),
                                   raw=True)
        elif kind.startswith("wrapper:"):
            self.sub = MessagePlan(fd.message_type, pa.struct([("value", typ)]))
        if kind == "enum":
            self.names = {v.number: v.name for v in fd.enum_type.values}
            self.closed = bool(getattr(fd.enum_type, "is_closed", False))

    def build(self, data: Bytes, raw: np.ndarray, starts: np.ndarray, lengths: np.ndarray,
              valid: np.ndarray | None) -> pa.Array:
        """One value a row: ``raw``/``starts``/``lengths`` hold the wire values (0 / empty for
        rows without one), ``valid`` the non-null rows (None: all)."""
        kind, typ = self.kind, self.typ
        mask = None if valid is None else ~valid
        if self.sub is not None:
            children = self.sub.columns(data, starts, starts + lengths)
            if kind == "message":
                return pa.StructArray.from_arrays(children, fields=list(typ),
                                                  mask=None if mask is None else pa.array(mask, pa.bool_()))
            if kind.startswith("wrapper:"):
                return children[0] if valid is None else _with_validity(children[0], valid)
            seconds, nanos = children[0], children[1].astype(np.int64)
            if len(seconds) and np.abs(seconds).max() > _SECONDS_LIMIT:
                raise Unsupported(f"{kind} beyond int64 microseconds")
            if kind == "timestamp":
                return pa.array(seconds * 1_000_000 + nanos // 1000, pa.int64(), mask=mask).view(typ)
            return pa.array(seconds * 1_000_000 + np.where(nanos >= 0, nanos // 1000, -((-nanos) // 1000)),
                            typ, mask=mask)
        if self.wire == 2:
            return strings(data, starts, lengths, typ, valid)
        values = _numbers(self.ftype, raw)
        if kind == "enum":
            return self._enum_names(values, mask)
        if kind == "uint64":
            return pa.array(values, pa.uint64(), mask=mask).cast(typ)
        return pa.array(values, typ, mask=mask)

    def _enum_names(self, values: np.ndarray, mask: np.ndarray | None) -> pa.Array:
        uniq, inverse = np.unique(values, return_inverse=True)
        names = [self.names.get(v) for v in uniq.tolist()]
        if self.closed:  # protobuf keeps a closed enum's unknown number out of the field
            unknown = np.array([name is None for name in names], bool)
            if unknown[inverse if mask is None else inverse[~mask]].any():
                raise Unsupported("unknown number of a closed enum")
        labels = [name or str(v) for name, v in zip(names, uniq.tolist())]
        idx = pa.array(inverse.astype(np.int32), pa.int32(), mask=mask)
        return pa.DictionaryArray.from_arrays(idx, pa.array(labels, pa.large_string())).cast(self.typ)


class _Field:
    """One field of a message: its wire fields in a batch -> its Arrow column."""

    def __init__(self, fd: Any, typ: pa.DataType) -> None:
        if fd.type == _GROUP or fd.is_required:
            raise Unsupported("group or required field")
        self.number = fd.number
        self.kind = field_kind(fd)
        if self.kind == "map" or value_kind(fd) == "json":
            raise Unsupported(f"{self.kind} field")
        self.presence = fd.has_presence and self.kind != "list"
        self.oneof = fd.containing_oneof.full_name if fd.containing_oneof is not None else None
        self.typ = typ
        self.values = _Values(fd, value_kind(fd), typ.value_type if self.kind == "list" else typ)

    def wire_fields(self, n: int, ev: Events | None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """(value, start, length) a row and the rows that have the field (None: all / no presence)."""
        full_raw = np.zeros(n, np.uint64)
        full_start = np.zeros(n, np.int64)
        full_len = np.zeros(n, np.int64)
        if ev is None:
            return full_raw, full_start, full_len, np.zeros(n, bool) if self.presence else None
        rec, wt, raw, start, length = ev
        if (wt != self.values.wire).any():
            raise Unsupported("wire type of a field")
        if len(rec) > 1 and np.bincount(rec, minlength=n).max() > 1:  # written twice: the last wins
            if self.values.sub is not None:
                raise Unsupported("singular message field written twice")  # protobuf merges those
            rec, wt, raw, start, length = by_record(ev)
            last = np.append(rec[1:] != rec[:-1], True)
            rec, raw, start, length = rec[last], raw[last], start[last], length[last]
        full_raw[rec], full_start[rec], full_len[rec] = raw, start, length
        valid = None
        if self.presence and len(rec) < n:
            valid = np.zeros(n, bool)
            valid[rec] = True
        return full_raw, full_start, full_len, valid

    def build(self, data: Bytes, n: int, ev: Events | None) -> pa.Array:
        values = self.values
        if self.kind != "list":
            return values.build(data, *self.wire_fields(n, ev))
        if ev is None:
            rec = raw = start = length = np.zeros(0, np.int64)
            raw = raw.astype(np.uint64)
        else:
            rec, wt, raw, start, length = by_record(ev)
            if values.wire != 2 and (wt == 2).any():  # packed numbers
                if (wt != 2).any():
                    raise Unsupported("packed and unpacked elements of one field")
                raw, counts = packed(data, start, length, values.wire)
                rec = np.repeat(rec, counts)
                start = length = np.zeros(len(raw), np.int64)
            elif (wt != values.wire).any():
                raise Unsupported("wire type of a list element")
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(np.bincount(rec, minlength=n), out=offsets[1:])
        return pa.LargeListArray.from_arrays(pa.array(offsets), values.build(data, raw, start, length, None),
                                             type=self.typ)


class MessagePlan:
    """Payload byte ranges of one message type -> the arrays of its mapped struct's fields
    (``raw``: numpy arrays of a message of plain numbers, e.g. Timestamp's seconds and nanos).

    ``partial``: a field this path does not take (a map, JSON, or a message holding one; with it
    the other members of its oneof) gets None for the caller to build from parsed messages;
    ``upb`` lists their positions."""

    def __init__(self, desc: Any, typ: pa.StructType, raw: bool = False, partial: bool = False) -> None:
        fields: list[_Field | None] = []
        for fd in desc.fields:
            try:
                fields.append(_Field(fd, typ.field(fd.name).type))
            except Unsupported:
                if not partial:
                    raise
                fields.append(None)
        left = {fd.containing_oneof.full_name for fd, f in zip(desc.fields, fields)
                if f is None and fd.containing_oneof is not None}
        self.fields = [None if f is None or f.oneof in left else f for f in fields]
        self.upb = [i for i, f in enumerate(self.fields) if f is None]
        if len(self.upb) == len(self.fields):
            raise Unsupported("no field this path takes")
        self.raw = raw
        self.wanted = frozenset(f.number for f in self.fields if f is not None)
        members = [f.oneof for f in self.fields if f is not None and f.oneof]
        self.oneofs = len(set(members)) < len(members)

    def arrays(self, data: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> list:
        """The columns of the records at ``data[starts[i]:ends[i]]`` (PAD bytes follow the last)."""
        return self.columns(Bytes(data), starts, ends)

    def columns(self, data: Bytes, starts: np.ndarray, ends: np.ndarray) -> list:
        n = len(starts)
        found = scan(data, starts, ends, self.wanted)
        if self.oneofs:
            self._check_oneofs(found, n)
        if self.raw:
            return [_numbers(f.values.ftype, f.wire_fields(n, found.get(f.number))[0]) for f in self.fields]
        return [None if f is None else f.build(data, n, found.get(f.number)) for f in self.fields]

    def _check_oneofs(self, found: dict[int, Events], n: int) -> None:
        seen: dict[str, np.ndarray] = {}
        for f in self.fields:
            if f is not None and f.oneof and f.number in found:
                hit = np.zeros(n, np.int64)
                hit[found[f.number][0]] = 1
                seen[f.oneof] = seen.get(f.oneof, 0) + hit
        if any((s > 1).any() for s in seen.values()):
            raise Unsupported("two members of one oneof in a record")
