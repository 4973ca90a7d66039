"""Protobuf message descriptor -> Iceberg schema, our own mapping onto pyiceberg types.

Input is a ``google.protobuf`` message ``Descriptor`` (loaded by registry/protobuf_schema.py
from the registry's ``.proto`` text or serialized ``FileDescriptorProto``); no generated
classes. The table (docs/concepts.md, "Protobuf") in short:

=============================================  ===============================================
protobuf                                       Iceberg
=============================================  ===============================================
int32, sint32, sfixed32                        int
int64, sint64, sfixed64                        long
uint32, fixed32                                long (every uint32 fits)
uint64, fixed64                                decimal(20, 0) (every uint64 fits, no overflow)
float / double / bool / string / bytes         float / double / boolean / string / binary
enum                                           string: the value's name; a number the schema
                                               does not name is kept as its decimal text ("7")
message                                        struct (null when the field is not set)
repeated T                                     list<T> (elements required; empty list if none)
map<K, V>                                      map<K, V> (values required)
oneof                                          each member its own optional column
google.protobuf.Timestamp                      timestamptz (microseconds, nanos truncated)
google.protobuf.Duration                       long (microseconds)
google.protobuf.*Value wrappers                the wrapped scalar, null when not set
google.protobuf.Struct / Value / ListValue     string (the value's JSON text)
proto3 ``optional``, proto2 optional           the scalar, null when not set
=============================================  ===============================================

Every column is optional (proto3 has no required fields; a field missing from a later
version must not block the table); a scalar without presence (plain proto3) reads as its
default value (0, "", false) when the writer left it out, as protobuf itself does.
Each column's ``doc`` is ``protobuf field <number>``: Protobuf's identity is the field
number, so the planner renames a column whose number comes back under another name
(evolution/plan.py). A recursive message (a message that contains itself) has no finite
Iceberg shape: ``UnsupportedSchemaError`` (the job dead-letters its records with that reason).
"""
from __future__ import annotations

import re
from typing import Any

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    BinaryType, BooleanType, DecimalType, DoubleType, FloatType, IcebergType, IntegerType,
    ListType, LongType, MapType, NestedField, StringType, StructType, TimestamptzType,
)

from evolution.exceptions import UnsupportedSchemaError

__all__ = ["protobuf_to_iceberg", "field_kind", "field_number_doc", "doc_field_number",
           "UINT64_TYPE", "WRAPPERS", "JSON_MESSAGES", "TIMESTAMP", "DURATION"]

TIMESTAMP = "google.protobuf.Timestamp"
DURATION = "google.protobuf.Duration"
JSON_MESSAGES = frozenset({"google.protobuf.Struct", "google.protobuf.Value", "google.protobuf.ListValue"})
UINT64_TYPE = DecimalType(20, 0)

# FieldDescriptor.TYPE_* numbers (stable in descriptor.proto), so this module needs no protobuf import
_T_DOUBLE, _T_FLOAT, _T_INT64, _T_UINT64, _T_INT32, _T_FIXED64, _T_FIXED32, _T_BOOL, _T_STRING, \
    _T_GROUP, _T_MESSAGE, _T_BYTES, _T_UINT32, _T_ENUM, _T_SFIXED32, _T_SFIXED64, _T_SINT32, \
    _T_SINT64 = range(1, 19)

#: scalar kind (see ``field_kind``) -> Iceberg type
SCALARS: dict[str, IcebergType] = {
    "int": IntegerType(), "long": LongType(), "uint32": LongType(), "uint64": UINT64_TYPE,
    "float": FloatType(), "double": DoubleType(), "bool": BooleanType(), "string": StringType(),
    "bytes": BinaryType(), "enum": StringType(), "timestamp": TimestamptzType(),
    "duration": LongType(), "json": StringType(),
}
_BY_TYPE = {_T_INT32: "int", _T_SINT32: "int", _T_SFIXED32: "int", _T_INT64: "long", _T_SINT64: "long",
            _T_SFIXED64: "long", _T_UINT32: "uint32", _T_FIXED32: "uint32", _T_UINT64: "uint64",
            _T_FIXED64: "uint64", _T_FLOAT: "float", _T_DOUBLE: "double", _T_BOOL: "bool",
            _T_STRING: "string", _T_BYTES: "bytes", _T_ENUM: "enum"}
#: wrapper message -> scalar kind of its ``value``
WRAPPERS = {"google.protobuf.DoubleValue": "double", "google.protobuf.FloatValue": "float",
            "google.protobuf.Int64Value": "long", "google.protobuf.UInt64Value": "uint64",
            "google.protobuf.Int32Value": "int", "google.protobuf.UInt32Value": "uint32",
            "google.protobuf.BoolValue": "bool", "google.protobuf.StringValue": "string",
            "google.protobuf.BytesValue": "bytes"}
_DOC = re.compile(r"protobuf field (\d+)")


def field_number_doc(number: int) -> str:
    return f"protobuf field {number}"


def doc_field_number(doc: str | None) -> int | None:
    """The field number a column's doc records (None: not a Protobuf column)."""
    m = _DOC.fullmatch(doc or "")
    return int(m.group(1)) if m else None


def is_map(fd: Any) -> bool:
    return (fd.type == _T_MESSAGE and fd.is_repeated and fd.message_type.GetOptions().map_entry)


def value_kind(fd: Any) -> str:
    """The kind of one value of ``fd`` (repetition aside): a SCALARS key, ``wrapper:<kind>``
    or ``message``."""
    if fd.type in (_T_MESSAGE, _T_GROUP):
        name = fd.message_type.full_name
        if name == TIMESTAMP:
            return "timestamp"
        if name == DURATION:
            return "duration"
        if name in WRAPPERS:
            return "wrapper:" + WRAPPERS[name]
        if name in JSON_MESSAGES:
            return "json"
        return "message"
    return _BY_TYPE[fd.type]


def field_kind(fd: Any) -> str:
    """``map``, ``list`` or the value kind of a singular field."""
    if is_map(fd):
        return "map"
    if fd.is_repeated:
        return "list"
    return value_kind(fd)


class _Mapper:
    def __init__(self) -> None:
        self._ids = iter(range(1, 1 << 31))
        self.path: list[str] = []

    def next_id(self) -> int:
        return next(self._ids)

    def error(self, reason: str, name: str | None = None) -> UnsupportedSchemaError:
        return UnsupportedSchemaError(reason, schema_name=name, path=tuple(self.path))

    def struct(self, desc: Any, trace: tuple[str, ...]) -> StructType:
        if desc.full_name in trace:
            chain = " -> ".join(trace[trace.index(desc.full_name):] + (desc.full_name,))
            raise self.error(f"recursive message {desc.full_name} ({chain}) has no finite Iceberg "
                             "shape", desc.full_name)
        fields = []
        for fd in desc.fields:
            self.path.append(fd.name)
            fields.append(NestedField(self.next_id(), fd.name, self.field_type(fd, trace + (desc.full_name,)),
                                      required=False, doc=field_number_doc(fd.number)))
            self.path.pop()
        return StructType(*fields)

    def field_type(self, fd: Any, trace: tuple[str, ...]) -> IcebergType:
        if is_map(fd):
            key, value = fd.message_type.fields_by_name["key"], fd.message_type.fields_by_name["value"]
            return MapType(self.next_id(), self.value_type(key, trace), self.next_id(),
                           self.value_type(value, trace), value_required=True)
        if fd.is_repeated:
            return ListType(self.next_id(), self.value_type(fd, trace), element_required=True)
        return self.value_type(fd, trace)

    def value_type(self, fd: Any, trace: tuple[str, ...]) -> IcebergType:
        kind = value_kind(fd)
        if kind == "message":
            return self.struct(fd.message_type, trace)
        return SCALARS[kind.removeprefix("wrapper:")]


def protobuf_to_iceberg(descriptor: Any) -> Schema:
    """Map a message descriptor onto a fresh-id pyiceberg Schema (see the module table)."""
    struct = _Mapper().struct(descriptor, ())
    if not struct.fields:
        raise UnsupportedSchemaError("message has no fields", schema_name=descriptor.full_name)
    return assign_fresh_schema_ids(Schema(*struct.fields))
