"""JSON Schema -> Iceberg mapping."""
from __future__ import annotations

import json

import pytest
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DoubleType, ListType, LongType, MapType, StringType,
    StructType, TimestamptzType, TimeType,
)

from evolution.exceptions import UnsupportedSchemaError
from evolution.jsonschema import jsonschema_to_iceberg


def obj(properties: dict, required=(), **extra) -> dict:
    return {"type": "object", "properties": properties, "required": list(required), **extra}


TYPE_CASES = [
    ({"type": "integer"}, LongType()),
    ({"type": "number"}, DoubleType()),
    ({"type": "boolean"}, BooleanType()),
    ({"type": "string"}, StringType()),
    ({"type": "string", "format": "date"}, DateType()),
    ({"type": "string", "format": "date-time"}, TimestamptzType()),
    ({"type": "string", "format": "time"}, TimeType()),
    ({"type": "string", "format": "uuid"}, StringType()),
    ({"type": "string", "format": "email"}, StringType()),
    ({"type": "string", "contentEncoding": "base64"}, BinaryType()),
    ({"enum": ["a", "b"]}, StringType()),
    ({"const": "x"}, StringType()),
    ({"type": "object"}, StringType()),
]


@pytest.mark.parametrize("node,expected", TYPE_CASES, ids=[json.dumps(n) for n, _ in TYPE_CASES])
def test_types(node, expected) -> None:
    f = jsonschema_to_iceberg(obj({"x": node}, ["x"])).find_field("x")
    assert f.field_type == expected and f.required


def test_required_list_controls_nullability() -> None:
    s = jsonschema_to_iceberg(obj({"a": {"type": "integer"}, "b": {"type": "integer"}}, ["a"]))
    assert s.find_field("a").required and not s.find_field("b").required


@pytest.mark.parametrize("node", [
    {"type": ["integer", "null"]},
    {"type": ["null", "integer"]},
    {"anyOf": [{"type": "integer"}, {"type": "null"}]},
    {"oneOf": [{"type": "null"}, {"type": "integer"}]},
])
def test_nullable_forms(node) -> None:
    f = jsonschema_to_iceberg(obj({"x": node}, ["x"])).find_field("x")
    assert f.field_type == LongType() and not f.required


def test_nested_objects_arrays_maps() -> None:
    s = jsonschema_to_iceberg(obj({
        "addr": obj({"city": {"type": "string"}, "zip": {"type": "string"}}, ["city"]),
        "tags": {"type": "array", "items": {"type": "string"}},
        "opt_items": {"type": "array", "items": {"type": ["number", "null"]}},
        "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
    }, ["addr", "tags"]))
    assert s.find_field("addr").required and isinstance(s.find_field("addr").field_type, StructType)
    assert s.find_field("addr.city").required and not s.find_field("addr.zip").required
    tags = s.find_field("tags").field_type
    assert isinstance(tags, ListType) and tags.element_required
    assert not s.find_field("opt_items").field_type.element_required
    counts = s.find_field("counts").field_type
    assert isinstance(counts, MapType) and counts.value_type == LongType()


def test_refs_to_defs_and_definitions() -> None:
    s = jsonschema_to_iceberg({
        "type": "object", "required": ["a"],
        "properties": {"a": {"$ref": "#/$defs/Addr"}, "b": {"$ref": "#/definitions/Point"}},
        "$defs": {"Addr": obj({"city": {"type": "string"}}, ["city"])},
        "definitions": {"Point": obj({"x": {"type": "number"}})},
    })
    assert s.find_field("a.city").field_type == StringType()
    assert s.find_field("b.x").field_type == DoubleType()


def test_recursive_ref_rejected() -> None:
    schema = {"type": "object", "properties": {"n": {"$ref": "#/$defs/Node"}},
              "$defs": {"Node": obj({"next": {"$ref": "#/$defs/Node"}})}}
    with pytest.raises(UnsupportedSchemaError) as err:
        jsonschema_to_iceberg(schema)
    assert err.value.schema_name == "Node" and err.value.path == ("n", "next")


def test_multi_alternatives_become_struct() -> None:
    f = jsonschema_to_iceberg(obj({"v": {"oneOf": [{"type": "string"}, {"type": "integer"}]}})).find_field("v")
    assert [(b.name, b.field_type) for b in f.field_type.fields] == [("string", StringType()), ("integer", LongType())]


def test_unsupported_forms() -> None:
    with pytest.raises(UnsupportedSchemaError, match="external|local"):
        jsonschema_to_iceberg(obj({"x": {"$ref": "http://example.com/s.json"}}))
    with pytest.raises(UnsupportedSchemaError, match="allOf"):
        jsonschema_to_iceberg(obj({"x": {"allOf": [{"type": "string"}, {"type": "integer"}]}}))
    with pytest.raises(UnsupportedSchemaError, match="only null"):
        jsonschema_to_iceberg(obj({"x": {"type": "null"}}))
    with pytest.raises(UnsupportedSchemaError, match="invalid JSON"):
        jsonschema_to_iceberg("{nope")


def test_docs_and_string_input() -> None:
    schema = obj({"id": {"type": "integer", "description": "key"}}, ["id"])
    s = jsonschema_to_iceberg(json.dumps(schema))
    assert s.find_field("id").doc == "key"
    assert s == jsonschema_to_iceberg(schema)


def test_non_object_root_is_value_column() -> None:
    s = jsonschema_to_iceberg({"type": ["string", "null"]})
    assert [(f.name, f.field_type, f.required) for f in s.fields] == [("value", StringType(), False)]
