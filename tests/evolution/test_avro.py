"""Avro -> Iceberg mapping: every primitive and logical type, unions, named types."""
from __future__ import annotations

import json

import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType,
    IntegerType, ListType, LongType, MapType, StringType, StructType, TimestampType,
    TimestamptzType, TimeType,
)

from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.exceptions import UnsupportedSchemaError
from tests.evolution.helpers import amap, arr, dec, field, logical, opt, rec

TYPE_CASES = [
    ("boolean", BooleanType()),
    ("int", IntegerType()),
    ("long", LongType()),
    ("float", FloatType()),
    ("double", DoubleType()),
    ("string", StringType()),
    ("bytes", BinaryType()),
    ({"type": "fixed", "name": "F", "size": 7}, FixedType(7)),
    ({"type": "enum", "name": "E", "symbols": ["A", "B"]}, StringType()),
    (dec(10, 2), DecimalType(10, 2)),
    ({"type": "fixed", "name": "D", "size": 8, "logicalType": "decimal", "precision": 18, "scale": 4},
     DecimalType(18, 4)),
    ({"type": "bytes", "logicalType": "decimal", "precision": 5}, DecimalType(5, 0)),
    (logical("int", "date"), DateType()),
    (logical("int", "time-millis"), TimeType()),
    (logical("long", "time-micros"), TimeType()),
    (logical("long", "timestamp-millis"), TimestamptzType()),
    (logical("long", "timestamp-micros"), TimestamptzType()),
    (logical("long", "timestamp-nanos"), TimestamptzType()),
    (logical("long", "local-timestamp-millis"), TimestampType()),
    (logical("long", "local-timestamp-micros"), TimestampType()),
    (logical("long", "local-timestamp-nanos"), TimestampType()),
    (logical("string", "uuid"), StringType()),
    ({"type": "fixed", "name": "U", "size": 16, "logicalType": "uuid"}, FixedType(16)),
    # invalid logical types fall back to the underlying type (Avro specification)
    ({"type": "bytes", "logicalType": "decimal", "precision": 60, "scale": 2}, BinaryType()),
    (logical("string", "date"), StringType()),
    (logical("long", "no-such-logical-type"), LongType()),
]


@pytest.mark.parametrize("avro_type,expected", TYPE_CASES, ids=[str(e) + "-" + json.dumps(a)[:40]
                                                                for a, e in TYPE_CASES])
def test_field_types(avro_type, expected) -> None:
    schema = avro_to_iceberg(rec(("x", avro_type)))
    f = schema.find_field("x")
    assert f.field_type == expected
    assert f.required


@pytest.mark.parametrize("union", [["null", "long"], ["long", "null"]])
def test_nullable_union_either_order(union) -> None:
    f = avro_to_iceberg(rec(("x", union))).find_field("x")
    assert f.field_type == LongType() and not f.required


def test_multi_branch_union_becomes_struct_of_branches() -> None:
    schema = avro_to_iceberg(rec(("u", ["null", "int", "string", rec(("a", "long"), name="Inner")])))
    f = schema.find_field("u")
    assert not f.required and isinstance(f.field_type, StructType)
    assert [(b.name, b.required) for b in f.field_type.fields] == [
        ("int", False), ("string", False), ("Inner", False)]
    assert schema.find_field("u.Inner.a").field_type == LongType()


def test_required_multi_branch_union() -> None:
    f = avro_to_iceberg(rec(("u", ["int", "string"]))).find_field("u")
    assert f.required and [b.name for b in f.field_type.fields] == ["int", "string"]


def test_nested_records_arrays_maps() -> None:
    schema = avro_to_iceberg(rec(
        ("addr", rec(("city", "string"), ("zip", opt("string")), name="Addr")),
        ("tags", arr("string")),
        ("opt_items", arr(opt("long"))),
        ("attrs", amap(opt("double"))),
    ))
    assert schema.find_field("addr.city").required
    assert not schema.find_field("addr.zip").required
    tags = schema.find_field("tags").field_type
    assert isinstance(tags, ListType) and tags.element_required and tags.element_type == StringType()
    assert not schema.find_field("opt_items").field_type.element_required
    attrs = schema.find_field("attrs").field_type
    assert isinstance(attrs, MapType) and attrs.key_type == StringType()
    assert attrs.value_type == DoubleType() and not attrs.value_required


def test_named_type_reuse_is_expanded_with_own_ids() -> None:
    addr = rec(("city", "string"), name="Addr", namespace="geo")
    schema = avro_to_iceberg(rec(("home", addr), ("work", opt("geo.Addr")), ("all", arr("geo.Addr"))))
    home = schema.find_field("home.city")
    work = schema.find_field("work.city")
    elem = schema.find_field("all.element.city")
    assert len({home.field_id, work.field_id, elem.field_id}) == 3
    assert not schema.find_field("work").required


def test_namespace_inheritance_for_short_references() -> None:
    inner = {"type": "fixed", "name": "Hash", "size": 4}
    schema = avro_to_iceberg(rec(("h", inner), ("h2", "Hash"), ("h3", "test.Hash")))
    assert [schema.find_field(n).field_type for n in ("h", "h2", "h3")] == [FixedType(4)] * 3


def test_recursive_schema_is_rejected_naming_the_type() -> None:
    node = rec(("value", "long"), ("next", opt("test.Node")), name="Node")
    with pytest.raises(UnsupportedSchemaError) as err:
        avro_to_iceberg(node)
    assert err.value.schema_name == "test.Node"
    assert err.value.path == ("next",)
    assert "recursive" in str(err.value) and "test.Node" in str(err.value)


def test_mutual_recursion_is_rejected() -> None:
    a = {"type": "record", "name": "A", "fields": [
        {"name": "b", "type": {"type": "record", "name": "B", "fields": [{"name": "a", "type": ["null", "A"]}]}}]}
    with pytest.raises(UnsupportedSchemaError, match="recursive type 'A'"):
        avro_to_iceberg(a)


def test_unknown_named_type_is_rejected() -> None:
    with pytest.raises(UnsupportedSchemaError, match="unknown Avro type 'Missing'"):
        avro_to_iceberg(rec(("x", "Missing")))


def test_invalid_json_is_rejected() -> None:
    with pytest.raises(UnsupportedSchemaError, match="invalid JSON"):
        avro_to_iceberg('{"type": "record", ')


def test_top_level_primitive_becomes_value_column() -> None:
    schema = avro_to_iceberg('"string"')
    assert [(f.name, f.field_type, f.required) for f in schema.fields] == [("value", StringType(), True)]
    schema = avro_to_iceberg(["null", "long"])
    assert [(f.name, f.field_type, f.required) for f in schema.fields] == [("value", LongType(), False)]


def test_docs_are_carried() -> None:
    schema = avro_to_iceberg(rec(field("id", "long", doc="primary key")))
    assert schema.find_field("id").doc == "primary key"


def test_accepts_str_and_dict_identically() -> None:
    s = rec(("id", "long"), ("addr", rec(("c", "string"), name="A")))
    assert avro_to_iceberg(s) == avro_to_iceberg(json.dumps(s))


def test_field_ids_fresh_and_match_catalog_assignment(tmp_path) -> None:
    s = avro_to_iceberg(rec(("id", "long"), ("addr", rec(("c", "string"), ("z", "int"), name="A")),
                            ("tags", arr("string")), ("m", amap("long"))))
    ids = sorted(s._lazy_id_to_field.keys())
    assert ids == list(range(1, len(ids) + 1))
    catalog = SqlCatalog("ids", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    catalog.create_namespace("n")
    table = catalog.create_table("n.t", schema=s)
    assert table.schema().as_struct() == s.as_struct()


def test_field_aliases_paths() -> None:
    s = rec(field("full_name", "string", aliases=["name"]),
            ("addr", rec(field("town", "string", aliases=["city", "place"]), name="Addr")),
            ("items", arr(rec(field("qty", "int", aliases=["n"]), name="Item"))),
            ("m", amap(rec(field("v", "int", aliases=["w"]), name="V"))),
            ("u", ["null", "int", "Addr"]))
    assert avro_field_aliases(s) == {
        ("full_name",): ("name",),
        ("addr", "town"): ("city", "place"),
        ("items", "element", "qty"): ("n",),
        ("m", "value", "v"): ("w",),
        ("u", "Addr", "town"): ("city", "place"),
    }


def test_field_aliases_empty_and_recursion_safe() -> None:
    assert avro_field_aliases(rec(("id", "long"))) == {}
    node = rec(field("v", "long", aliases=["val"]), ("next", opt("test.Node")), name="Node")
    assert avro_field_aliases(node) == {("v",): ("val",)}
