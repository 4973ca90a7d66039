"""Parsed Protobuf messages -> Arrow, column-wise, and the per-record path beside it.

Both follow evolution/protobuf.py's mapping table and build exactly the Arrow type that
``iceberg_to_arrow`` gives the mapped schema (walked together with the descriptor), so
a batch needs no cast afterwards.

* Column-wise (``StructBuilder``): one list per field over all messages of the batch
  (``attrgetter`` over the messages, ``HasField`` for the null mask of fields with
  presence), one ``pa.array`` per column; sub-messages, list elements and map entries are
  flattened and built the same way one level down. A message field that is not set reads
  as its default instance (protobuf's own behaviour) and is masked by its parent's null.
* Per record (``record_converter``): message -> Python dict -> ``pa.array`` of structs;
  slower, used to isolate a record the column-wise path cannot take and to test that
  both paths agree value for value.
"""
from __future__ import annotations

import decimal
import json
import operator
from itertools import chain
from typing import Any, Callable

import numpy as np
import pyarrow as pa
from google.protobuf import json_format

from evolution.protobuf import field_kind, value_kind

__all__ = ["StructBuilder", "record_converter", "duration_micros", "timestamp_micros"]

Conv = Callable[[Any], Any]


def timestamp_micros(ts: Any) -> int:
    return ts.seconds * 1_000_000 + ts.nanos // 1000


def duration_micros(d: Any) -> int:
    nanos = d.nanos  # same sign as seconds: truncate toward zero
    return d.seconds * 1_000_000 + (nanos // 1000 if nanos >= 0 else -((-nanos) // 1000))


def _json_text(m: Any) -> str:
    """A Struct / Value / ListValue as compact JSON text, keys sorted (one text per value)."""
    return json.dumps(json_format.MessageToDict(m), sort_keys=True, separators=(",", ":"))


def _enum_names(fd: Any) -> dict[int, str]:
    return {v.number: v.name for v in fd.enum_type.values}


# -- per record ---------------------------------------------------------------
def _scalar_conv(kind: str, fd: Any) -> Conv | None:
    """Python value of one scalar (None: as protobuf returns it)."""
    if kind == "enum":
        names = _enum_names(fd)
        return lambda v: names.get(v) or str(v)
    if kind == "uint64":
        return decimal.Decimal
    if kind == "timestamp":
        return timestamp_micros
    if kind == "duration":
        return duration_micros
    if kind == "json":
        return _json_text
    return None


def _value_conv(fd: Any) -> Conv:
    kind = value_kind(fd)
    if kind == "message":
        return record_converter(fd.message_type)
    if kind.startswith("wrapper:"):
        inner = _scalar_conv(kind[8:], None)
        return (lambda w: w.value) if inner is None else (lambda w: inner(w.value))
    conv = _scalar_conv(kind, fd)
    return conv if conv is not None else (lambda v: v)


def record_converter(desc: Any) -> Conv:
    """message -> dict with the Python values ``pa.array`` takes for the mapped struct."""
    steps: list[tuple[str, Conv]] = []
    for fd in desc.fields:
        name, kind = fd.name, field_kind(fd)
        if kind == "map":
            key = _value_conv(fd.message_type.fields_by_name["key"])
            val = _value_conv(fd.message_type.fields_by_name["value"])
            steps.append((name, lambda m, n=name, k=key, v=val: [(k(a), v(b)) for a, b in getattr(m, n).items()]))
        elif kind == "list":
            item = _value_conv(fd)
            steps.append((name, lambda m, n=name, c=item: [c(x) for x in getattr(m, n)]))
        else:
            conv = _value_conv(fd)
            if fd.has_presence:
                steps.append((name, lambda m, n=name, c=conv: c(getattr(m, n)) if m.HasField(n) else None))
            else:
                steps.append((name, lambda m, n=name, c=conv: c(getattr(m, n))))
    return lambda m: {name: get(m) for name, get in steps}


# -- column-wise -----------------------------------------------------------------
_SECONDS_LIMIT = (2**63 - 1) // 1_000_000 - 3  # numpy's microseconds stay inside int64 up to here
_SECONDS = operator.attrgetter("seconds")
_NANOS = operator.attrgetter("nanos")
_VALUE = operator.attrgetter("value")
_FIRST, _SECOND = operator.itemgetter(0), operator.itemgetter(1)


def _mask(msgs: list, name: str) -> np.ndarray | None:
    arr = np.fromiter(map(operator.methodcaller("HasField", name), msgs), dtype=bool, count=len(msgs))
    return None if arr.all() else ~arr


def _micros(values: list, kind: str) -> np.ndarray | list:
    """Timestamp / Duration messages -> microseconds (numpy; Python ints beyond int64, which
    pa.array then refuses as the per-record path does)."""
    seconds = np.fromiter(map(_SECONDS, values), dtype=np.int64, count=len(values))
    if len(values) and np.abs(seconds).max() > _SECONDS_LIMIT:
        return [timestamp_micros(v) for v in values] if kind == "timestamp" else \
            [duration_micros(v) for v in values]
    nanos = np.fromiter(map(_NANOS, values), dtype=np.int64, count=len(values))
    if kind == "timestamp":
        return seconds * 1_000_000 + nanos // 1000
    return seconds * 1_000_000 + np.where(nanos >= 0, nanos // 1000, -((-nanos) // 1000))


class _Values:
    """Builds one Arrow array from a list of values of one kind (scalars or sub-messages)."""

    def __init__(self, fd: Any, kind: str, typ: pa.DataType) -> None:
        self.typ = typ
        self.kind = kind
        self.struct = StructBuilder(fd.message_type, typ) if kind == "message" else None
        self.enum = _enum_names(fd) if kind == "enum" else None

    def build(self, values: list, mask: np.ndarray | None = None) -> pa.Array:
        kind, typ = self.kind, self.typ
        if self.struct is not None:
            return self.struct.build(values, mask)
        if kind.startswith("wrapper:"):
            kind = kind[8:]
            values = list(map(_VALUE, values))
        if kind == "enum":
            get = self.enum.get
            values = [get(v) or str(v) for v in values]
        elif kind in ("timestamp", "duration"):
            values = _micros(values, kind)
            if kind == "timestamp" and isinstance(values, np.ndarray):
                return pa.array(values, pa.int64(), mask=mask).view(typ)
        elif kind == "json":
            values = [None if mask is not None and mask[i] else _json_text(v) for i, v in enumerate(values)]
        elif kind == "uint64":
            return pa.array(values, pa.uint64(), mask=mask).cast(typ)
        return pa.array(values, typ, mask=mask)


def _offsets(seqs: list) -> np.ndarray:
    lens = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
    out = np.zeros(len(seqs) + 1, dtype=np.int64)
    np.cumsum(lens, out=out[1:])
    return out


class _Column:
    """One field of a message: messages -> its Arrow column."""

    def __init__(self, fd: Any, typ: pa.DataType) -> None:
        self.name = fd.name
        self.get = operator.attrgetter(fd.name)
        self.kind = field_kind(fd)
        self.typ = typ
        self.presence = fd.has_presence and self.kind not in ("map", "list")
        if self.kind == "map":
            entry = fd.message_type
            self.keys = _Values(entry.fields_by_name["key"], value_kind(entry.fields_by_name["key"]), typ.key_type)
            self.items = _Values(entry.fields_by_name["value"], value_kind(entry.fields_by_name["value"]),
                                 typ.item_type)
        elif self.kind == "list":
            self.items = _Values(fd, value_kind(fd), typ.value_type)
        else:
            self.values = _Values(fd, self.kind, typ)

    def build(self, msgs: list) -> pa.Array:
        seqs = list(map(self.get, msgs))
        if self.kind == "list":
            flat = list(chain.from_iterable(seqs))
            return pa.LargeListArray.from_arrays(pa.array(_offsets(seqs)), self.items.build(flat), type=self.typ)
        if self.kind == "map":
            pairs = list(chain.from_iterable(mp.items() for mp in seqs))
            keys, vals = list(map(_FIRST, pairs)), list(map(_SECOND, pairs))
            return pa.MapArray.from_arrays(pa.array(_offsets(seqs).astype(np.int32)), self.keys.build(keys),
                                           self.items.build(vals), type=self.typ)
        return self.values.build(seqs, _mask(msgs, self.name) if self.presence else None)


class StructBuilder:
    """Messages of one type -> a StructArray of the mapped Arrow struct type."""

    def __init__(self, desc: Any, typ: pa.StructType) -> None:
        self.type = typ
        self.columns = [_Column(fd, typ.field(fd.name).type) for fd in desc.fields]

    def arrays(self, msgs: list) -> list[pa.Array]:
        return [c.build(msgs) for c in self.columns]

    def build(self, msgs: list, mask: np.ndarray | None = None) -> pa.Array:
        return pa.StructArray.from_arrays(self.arrays(msgs), fields=list(self.type),
                                          mask=None if mask is None else pa.array(mask, pa.bool_()))
