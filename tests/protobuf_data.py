"""Protobuf schemas and messages shared by the Protobuf tests (no generated classes).

Messages are built with the dynamic classes of the schema's own descriptor pool
(registry/protobuf_schema.py), encoded by protobuf's upb runtime, and framed the way
Confluent's serializer frames them: magic 0, schema id, message indexes, payload.
"""
from __future__ import annotations

import struct
from typing import Any, Sequence

from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from registry.protobuf_schema import ProtobufFile, encode_message_indexes, load_protobuf

MONEY = """syntax = "proto3";
package common;
message Money { int64 units = 1; string currency = 2; }
"""

#: every row of the mapping table in docs/concepts.md, plus a reference and nested / repeated / map fields
ALL_TYPES = """syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "common/money.proto";

enum Status { UNKNOWN = 0; NEW = 1; SHIPPED = 2; }

message Order {
  int32 i32 = 1; sint32 s32 = 2; sfixed32 sf32 = 3;
  int64 i64 = 4; sint64 s64 = 5; sfixed64 sf64 = 6;
  uint32 u32 = 7; fixed32 f32 = 8; uint64 u64 = 9; fixed64 f64 = 10;
  float fl = 11; double db = 12; bool b = 13; string s = 14; bytes by = 15;
  Status status = 16;
  google.protobuf.Timestamp at = 17;
  google.protobuf.Duration took = 18;
  google.protobuf.Int64Value w_i64 = 19; google.protobuf.StringValue w_str = 20;
  google.protobuf.UInt64Value w_u64 = 21; google.protobuf.BoolValue w_bool = 22;
  google.protobuf.DoubleValue w_dbl = 23; google.protobuf.BytesValue w_bytes = 24;
  optional int32 opt = 25;
  oneof choice { string c_text = 26; int64 c_num = 27; }
  common.Money total = 28;
  message Line { string sku = 1; int32 qty = 2; map<string, double> attrs = 3; }
  repeated Line lines = 29;
  map<string, int32> tags = 30;
  repeated string labels = 31;
  repeated int64 counts = 32;
  map<int64, common.Money> by_id = 33;
  google.protobuf.Struct extra = 34;
}
"""

#: a file of two top-level messages with nested ones: message indexes [1, 0] and [1, 0, 0]
NESTED = """syntax = "proto3";
package idx;
message First { string a = 1; }
message Second {
  int32 b = 1;
  message Inner { string c = 1; message Deep { int64 d = 1; } Deep deep = 2; }
  Inner inner = 2;
}
"""

RECURSIVE = """syntax = "proto3";
package tree;
message Node { string name = 1; repeated Node children = 2; }
"""

FLAT = """syntax = "proto3";
package bench;
message Click {
  int64 id = 1; string user = 2; string url = 3; int32 status = 4; double latency = 5; bool ok = 6;
  int64 ts = 7; string country = 8; string agent = 9; int32 bytes_out = 10; float score = 11; string session = 12;
}
"""


def load(text: str, refs: Sequence[tuple[str, str]] = ()) -> ProtobufFile:
    return load_protobuf(text, refs)


def message_class(file: ProtobufFile, indexes: Sequence[int] = (0,)) -> type:
    return file.message_class(file.message(tuple(indexes)))


def frame(schema_id: int, payload: bytes, indexes: Sequence[int] = (0,)) -> bytes:
    return struct.pack(">bI", 0, schema_id) + encode_message_indexes(indexes) + payload


def encode(schema_id: int, message: Any, indexes: Sequence[int] = (0,)) -> bytes:
    return frame(schema_id, message.SerializeToString(), indexes)


def register(registry_url: str, subject: str, text: str,
             references: Sequence[tuple[str, str, int]] = ()) -> int:
    """Register ``text`` as PROTOBUF; references as (import name, subject, version)."""
    client = SchemaRegistryClient({"url": registry_url})
    refs = [SchemaReference(name, subject_, version) for name, subject_, version in references]
    return client.register_schema(subject, Schema(text, "PROTOBUF", refs))


def full_order(cls: type) -> Any:
    """An Order with every field set (extremes where a type has them)."""
    m = cls(i32=-(2**31), s32=-7, sf32=2**31 - 1, i64=-(2**63), s64=2**63 - 1, sf64=-5,
            u32=2**32 - 1, f32=7, u64=2**64 - 1, f64=2**63, fl=1.5, db=-2.25, b=True, s="zürich",
            by=b"\x00\xff", status=2, opt=0, c_num=9, labels=["x", "y"], counts=[1, -2])
    m.at.seconds, m.at.nanos = 1_700_000_000, 123_456_789
    m.took.seconds, m.took.nanos = -3, -500_000
    m.w_i64.value = 0
    m.w_str.value = "wrapped"
    m.w_u64.value = 2**64 - 2
    m.w_bool.value = False
    m.w_dbl.value = 0.5
    m.w_bytes.value = b"b"
    m.total.units, m.total.currency = 12, "EUR"
    line = m.lines.add(sku="a", qty=2)
    line.attrs["w"] = 1.25
    m.lines.add(sku="b")
    m.tags["k"] = 1
    m.by_id[5].units = 3
    m.extra.update({"b": [True, None], "a": 1})
    return m
