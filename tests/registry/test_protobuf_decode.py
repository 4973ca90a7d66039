"""Protobuf decoding without generated classes: mapping table, both decode paths, message
indexes, well-known types, unknown enum numbers, recursive messages and bad input."""
from __future__ import annotations

import base64
import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyiceberg.types import (
    BinaryType, BooleanType, DecimalType, DoubleType, FloatType, IntegerType, ListType, LongType,
    MapType, StringType, StructType, TimestamptzType,
)

from evolution.protobuf import doc_field_number
from registry.artifacts import build_artifacts, protobuf_message_artifacts
from registry.exceptions import DecodeError, UnsupportedSchemaType
from registry.protobuf_schema import encode_message_indexes, read_message_indexes
from tests import protobuf_data as pb

REFS = [("common/money.proto", pb.MONEY)]
UTC = dt.timezone.utc


@pytest.fixture(scope="module")
def order_art():
    return build_artifacts(7, "PROTOBUF", pb.ALL_TYPES, REFS)


def both_paths(art, values, skip=5):
    """Column-wise and per-record results of one batch; they must agree exactly."""
    framed = pa.array(values, pa.binary())
    col, ok, bad = art.decoder.decode(framed, skip)
    rec, ok2, bad2 = art.decoder.decode_records(framed, skip)
    assert col.schema == art.arrow_schema
    assert col.equals(rec), (col.to_pylist(), rec.to_pylist())
    assert list(ok) == list(ok2) and bad == bad2
    return col.to_pylist(), list(ok), bad


def test_every_type_of_the_mapping_table_maps_to_its_iceberg_type(order_art):
    types = {f.name: f.field_type for f in order_art.iceberg_schema.fields}
    expect = {"i32": IntegerType(), "s32": IntegerType(), "sf32": IntegerType(), "i64": LongType(),
              "s64": LongType(), "sf64": LongType(), "u32": LongType(), "f32": LongType(),
              "u64": DecimalType(20, 0), "f64": DecimalType(20, 0), "fl": FloatType(), "db": DoubleType(),
              "b": BooleanType(), "s": StringType(), "by": BinaryType(), "status": StringType(),
              "at": TimestamptzType(), "took": LongType(), "w_i64": LongType(), "w_str": StringType(),
              "w_u64": DecimalType(20, 0), "w_bool": BooleanType(), "w_dbl": DoubleType(),
              "w_bytes": BinaryType(), "opt": IntegerType(), "c_text": StringType(), "c_num": LongType(),
              "extra": StringType()}
    for name, typ in expect.items():
        assert types[name] == typ, name
    assert isinstance(types["total"], StructType) and [f.name for f in types["total"].fields] == ["units", "currency"]
    assert isinstance(types["lines"], ListType) and types["lines"].element_required
    line = types["lines"].element_type
    assert isinstance({f.name: f for f in line.fields}["attrs"].field_type, MapType)
    assert types["tags"] == MapType(0, StringType(), 0, IntegerType(), value_required=True) or \
        (types["tags"].key_type == StringType() and types["tags"].value_type == IntegerType())
    assert types["by_id"].key_type == LongType() and isinstance(types["by_id"].value_type, StructType)
    assert types["labels"].element_type == StringType() and types["counts"].element_type == LongType()
    # every column optional, its doc the field number (the identity evolution renames by)
    fields = order_art.iceberg_schema.fields
    assert not any(f.required for f in fields)
    assert [doc_field_number(f.doc) for f in fields] == list(range(1, 35))


def test_every_type_round_trips_through_both_paths(order_art):
    cls = pb.message_class(order_art.parsed.file)
    msg = pb.full_order(cls)
    rows, ok, bad = both_paths(order_art, [pb.encode(7, msg)])
    assert ok == [0] and bad == []
    row = rows[0]
    assert (row["i32"], row["s32"], row["sf32"]) == (-(2**31), -7, 2**31 - 1)
    assert (row["i64"], row["s64"], row["sf64"]) == (-(2**63), 2**63 - 1, -5)
    assert (row["u32"], row["f32"]) == (2**32 - 1, 7)
    assert row["u64"] == decimal.Decimal(2**64 - 1) and row["f64"] == decimal.Decimal(2**63)
    assert (row["fl"], row["db"], row["b"], row["s"], row["by"]) == (1.5, -2.25, True, "zürich", b"\x00\xff")
    assert row["status"] == "SHIPPED"
    assert row["at"] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=UTC)
    assert row["took"] == -3_000_500  # toward zero, microseconds
    assert (row["w_i64"], row["w_str"], row["w_u64"], row["w_bool"], row["w_dbl"], row["w_bytes"]) == \
        (0, "wrapped", decimal.Decimal(2**64 - 2), False, 0.5, b"b")
    assert row["opt"] == 0 and row["c_num"] == 9 and row["c_text"] is None
    assert row["total"] == {"units": 12, "currency": "EUR"}
    assert row["lines"] == [{"sku": "a", "qty": 2, "attrs": [("w", 1.25)]}, {"sku": "b", "qty": 0, "attrs": []}]
    assert row["tags"] == [("k", 1)] and row["labels"] == ["x", "y"] and row["counts"] == [1, -2]
    assert row["by_id"] == [(5, {"units": 3, "currency": ""})]
    assert row["extra"] == '{"a":1.0,"b":[true,null]}'


def test_unset_fields_read_as_protobuf_defaults_or_null_where_presence_is_tracked(order_art):
    cls = pb.message_class(order_art.parsed.file)
    rows, _, _ = both_paths(order_art, [pb.encode(7, cls())])
    row = rows[0]
    assert (row["i32"], row["u64"], row["s"], row["by"], row["b"], row["status"]) == \
        (0, decimal.Decimal(0), "", b"", False, "UNKNOWN")
    for name in ("at", "took", "w_i64", "w_str", "w_u64", "w_bool", "opt", "c_text", "c_num", "total", "extra"):
        assert row[name] is None, name
    assert row["lines"] == [] and row["tags"] == [] and row["labels"] == []


def test_unknown_enum_numbers_are_kept_as_their_number(order_art):
    cls = pb.message_class(order_art.parsed.file)
    rows, _, _ = both_paths(order_art, [pb.encode(7, cls(status=1)), pb.encode(7, cls(status=42)),
                                        pb.encode(7, cls(status=-3))])
    assert [r["status"] for r in rows] == ["NEW", "42", "-3"]


def test_message_indexes_select_nested_messages():
    art = build_artifacts(3, "PROTOBUF", pb.NESTED)
    assert art.parsed.descriptor.full_name == "idx.First"  # plan and check read message [0]
    inner = protobuf_message_artifacts(art, (1, 0))
    deep = protobuf_message_artifacts(art, (1, 0, 0))
    assert inner.parsed.descriptor.full_name == "idx.Second.Inner"
    assert deep.parsed.descriptor.full_name == "idx.Second.Inner.Deep"
    assert protobuf_message_artifacts(art, (1, 0)) is inner  # cached
    msg = pb.message_class(art.parsed.file, (1, 0))(c="x")
    msg.deep.d = 4
    rows, ok, bad = both_paths(inner, [pb.encode(3, msg, (1, 0))])
    assert rows == [{"c": "x", "deep": {"d": 4}}]
    rows, _, _ = both_paths(deep, [pb.encode(3, msg.deep, (1, 0, 0))])
    assert rows == [{"d": 4}]
    with pytest.raises(DecodeError, match="names no message"):
        protobuf_message_artifacts(art, (2,))
    with pytest.raises(DecodeError, match="names no message"):
        protobuf_message_artifacts(art, (1, 3))


@pytest.mark.parametrize("indexes", [[0], [1], [1, 0], [2, 5, 1], [300, 0]])
def test_message_index_bytes_round_trip(indexes):
    raw = b"xxxxx" + encode_message_indexes(indexes) + b"payload"
    got, pos = read_message_indexes(raw, 5)
    assert list(got) == indexes and raw[pos:] == b"payload"
    assert encode_message_indexes([0]) == b"\x00"
    assert encode_message_indexes([1, 0]) == bytes([4, 2, 0])  # zigzag count 2, then 1, 0


def test_bad_input_fails_alone_with_protobuf_reason(order_art):
    cls = pb.message_class(order_art.parsed.file)
    good = pb.encode(7, pb.full_order(cls))
    values = [good, good[:-4], pb.frame(7, cls(i32=1).SerializeToString(), (4,)), b"\x00\x00\x00\x00\x07\x81",
              pb.encode(7, cls(i32=5))]
    rows, ok, bad = both_paths(order_art, values)
    assert ok == [0, 4] and [r["i32"] for r in rows] == [-(2**31), 5]
    reasons = dict(bad)
    assert "Error parsing message" in reasons[1]
    assert "message index [4] is not shop.Order [0]" in reasons[2]
    assert "message-index" in reasons[3]


def test_recursive_message_is_unsupported_with_the_reason():
    with pytest.raises(UnsupportedSchemaType, match=r"recursive message tree.Node"):
        build_artifacts(9, "PROTOBUF", pb.RECURSIVE)


def test_invalid_proto_text_names_the_compiler_error():
    with pytest.raises(UnsupportedSchemaType, match=r"strin.*is not defined"):
        build_artifacts(9, "PROTOBUF", 'syntax = "proto3"; message X { strin a = 1; }')
    with pytest.raises(UnsupportedSchemaType, match="money.proto"):
        build_artifacts(9, "PROTOBUF", pb.ALL_TYPES)  # its reference is missing


def test_serialized_descriptor_form_decodes_like_the_text(order_art):
    """What a registry serves with ?format=serialized: base64 FileDescriptorProtos."""
    money = base64.b64encode(pb.load(pb.MONEY).file.serialized_pb).decode()
    fd = order_art.parsed.file.file
    text_form = base64.b64encode(fd.serialized_pb).decode()
    art = build_artifacts(8, "PROTOBUF", text_form, [("common/money.proto", money)])
    assert art.iceberg_schema == order_art.iceberg_schema
    cls = pb.message_class(art.parsed.file)
    msg = pb.full_order(cls)
    assert both_paths(art, [pb.encode(8, msg)])[0] == both_paths(order_art, [pb.encode(7, msg)])[0]


def test_large_batch_columnar_equals_per_record(order_art):
    cls = pb.message_class(order_art.parsed.file)
    values = []
    for i in range(500):
        m = pb.full_order(cls) if i % 3 == 0 else cls(i32=i, s=str(i), status=i % 5)
        if i % 7 == 0:
            m.lines.add(sku=f"s{i}").attrs["k"] = float(i)
        values.append(pb.encode(7, m))
    rows, ok, bad = both_paths(order_art, values)
    assert len(rows) == 500 and not bad
