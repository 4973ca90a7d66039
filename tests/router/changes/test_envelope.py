"""Envelope -> table schema and key column checks, on schemas mapped by the project's own Avro / JSON Schema mapping."""

from __future__ import annotations

import copy
import pickle

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType, IntegerType, ListType,
    LongType, MapType, NestedField, StringType, StructType, TimestamptzType,
)

from evolution.avro import avro_to_iceberg
from evolution.jsonschema import jsonschema_to_iceberg
from router.changes.envelope import (
    check_key_columns, check_sequence_by, debezium_table_schema, key_columns_from_key_schema,
)
from router.changes.exceptions import EnvelopeError, KeyColumnsError
from router.exceptions import is_transient
from tests.router.changes.debezium_schemas import (
    ENVELOPE, JSON_ENVELOPE, JSON_KEY, KEY, MY_ENVELOPE, MY_KEY, MY_ROW, ROW, envelope,
)


def test_table_schema_is_the_after_record_with_fresh_ids():
    table = debezium_table_schema(avro_to_iceberg(ENVELOPE))
    assert table == avro_to_iceberg(ROW)  # same columns, types, required flags and field ids
    assert [(f.field_id, f.name, f.required) for f in table.fields] == [
        (1, "id", True), (2, "email", True), (3, "name", False), (4, "balance", False), (5, "updated_at", False)]
    assert table.find_field("balance").field_type == DecimalType(10, 2)
    assert debezium_table_schema(avro_to_iceberg(MY_ENVELOPE)) == avro_to_iceberg(MY_ROW)


def test_json_schema_envelope():
    table = debezium_table_schema(jsonschema_to_iceberg(JSON_ENVELOPE))
    assert [(f.field_id, f.name, str(f.field_type), f.required) for f in table.fields] == [
        (1, "id", "long", True), (2, "email", "string", True), (3, "name", "string", False)]


def _without(field: str) -> dict:
    env = copy.deepcopy(ENVELOPE)
    env["fields"] = [f for f in env["fields"] if f["name"] != field]
    return env


def _retyped(field: str, avro_type) -> dict:
    env = copy.deepcopy(ENVELOPE)
    for f in env["fields"]:
        if f["name"] == field:
            f["type"] = avro_type
    return env


OTHER_ROW = {"type": "record", "name": "Other", "fields": [{"name": "id", "type": "long"}]}


@pytest.mark.parametrize("schema,message", [
    (_without("op"), "not a Debezium envelope: no 'op' field"),
    (_retyped("op", "int"), "not a Debezium envelope: 'op' is int, not string"),
    (_without("after"), "not a Debezium envelope: no 'after' field"),
    (_retyped("after", ["null", "string"]), "not a Debezium envelope: 'after' is string, not a struct of columns"),
    (_retyped("after", ["null", OTHER_ROW]), "not a Debezium envelope: 'before' and 'after' have different types"),
    (ROW, "not a Debezium envelope: no 'op' field"),
])
def test_not_an_envelope_is_refused(schema, message):
    with pytest.raises(EnvelopeError) as err:
        debezium_table_schema(avro_to_iceberg(schema))
    assert err.value.message == message
    assert not is_transient(err.value)
    assert pickle.loads(pickle.dumps(err.value)).message == message


def test_envelope_with_after_only_is_accepted():
    env = _without("before")
    env["fields"][0]["type"] = ["null", ROW]  # `after` now defines the record
    assert debezium_table_schema(avro_to_iceberg(env)) == avro_to_iceberg(ROW)


def test_before_and_after_of_equal_shape_but_separate_definitions():
    row2 = dict(ROW, name="Value2")
    env = envelope()
    env["fields"][1]["type"] = ["null", row2]
    assert debezium_table_schema(avro_to_iceberg(env)) == avro_to_iceberg(ROW)


def test_key_columns_from_key_schemas():
    assert key_columns_from_key_schema(avro_to_iceberg(KEY)) == ("id",)
    assert key_columns_from_key_schema(avro_to_iceberg(MY_KEY)) == ("tenant", "id")
    assert key_columns_from_key_schema(jsonschema_to_iceberg(JSON_KEY)) == ("id",)
    assert key_columns_from_key_schema(avro_to_iceberg("long")) == ("value",)
    with pytest.raises(KeyColumnsError, match="has no fields"):
        key_columns_from_key_schema(Schema())


TABLE = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "tenant", StringType(), required=True),
    NestedField(3, "score", DoubleType(), required=True),
    NestedField(4, "ratio", FloatType(), required=True),
    NestedField(5, "opt", IntegerType(), required=False),
    NestedField(6, "addr", StructType(NestedField(10, "city", StringType(), required=True)), required=True),
    NestedField(7, "tags", ListType(11, StringType()), required=True),
    NestedField(8, "attrs", MapType(12, StringType(), 13, LongType()), required=True),
    NestedField(9, "day", DateType(), required=True),
    NestedField(14, "blob", BinaryType(), required=True),
    NestedField(15, "hash", FixedType(16), required=True),
    NestedField(16, "flag", BooleanType(), required=True),
    NestedField(17, "at", TimestamptzType(), required=True),
    NestedField(18, "amount", DecimalType(10, 2), required=True),
)


def test_usable_key_columns_have_no_problems():
    assert check_key_columns(TABLE, ["id"]) == []
    assert check_key_columns(TABLE, ["tenant", "id", "day", "blob", "hash", "flag", "at", "amount"]) == []
    assert check_key_columns(debezium_table_schema(avro_to_iceberg(ENVELOPE)), ["id"]) == []


@pytest.mark.parametrize("key,kind,text", [
    ([], "empty", "no key columns: set `key` or give the topic a record key schema"),
    (["id", "id"], "duplicate", "key column 'id': named twice"),
    (["nope"], "missing", "key column 'nope': is not a column of the table"),
    (["addr.city"], "nested", "key column 'addr.city': is nested in a struct; key columns must be top-level"),
    (["addr"], "not_primitive", "key column 'addr': has type struct<10: city: required string>; "
                                "key columns must be primitive"),
    (["tags"], "not_primitive", "key column 'tags': has type list<string>; key columns must be primitive"),
    (["attrs"], "not_primitive", "key column 'attrs': has type map<string, long>; key columns must be primitive"),
    (["score"], "floating", "key column 'score': has type double; Iceberg identifier fields must not be float or "
                            "double"),
    (["ratio"], "floating", "key column 'ratio': has type float; Iceberg identifier fields must not be float or "
                            "double"),
    (["opt"], "optional", "key column 'opt': is optional; Iceberg identifier fields must be required (rows with a "
                          "null key are dead-lettered)"),
])
def test_key_column_problems(key, kind, text):
    problems = check_key_columns(TABLE, key)
    assert [(p.kind, str(p)) for p in problems][-1:] == [(kind, text)]


def test_key_column_problems_agree_with_pyiceberg_identifier_fields():
    """Every kind but `missing`/`duplicate`/`empty` is what pyiceberg refuses as identifier field."""
    for name in ("score", "ratio", "opt", "addr", "tags", "attrs"):
        with pytest.raises(ValueError):
            Schema(*TABLE.fields, identifier_field_ids=[TABLE.find_field(name).field_id])
    Schema(*TABLE.fields, identifier_field_ids=[1, 2, 9, 14, 15, 16, 17, 18])  # accepted


def test_key_columns_case_insensitively():
    assert [p.kind for p in check_key_columns(TABLE, ["ID"])] == ["missing"]
    assert check_key_columns(TABLE, ["ID", "Tenant"], case_sensitive=False) == []
    assert [p.kind for p in check_key_columns(TABLE, ["id", "ID"], case_sensitive=False)] == ["duplicate"]


def test_sequence_by_paths():
    env = avro_to_iceberg(ENVELOPE)
    for ok in ("source.lsn", "ts_ms", "source.ts_ms", "source.snapshot"):
        assert check_sequence_by(env, ok) == []
    assert check_sequence_by(env, "source.nope") == ["sequence_by 'source.nope': the value schema has no field "
                                                     "'source.nope'"]
    assert check_sequence_by(env, "op.x") == ["sequence_by 'op.x': 'op' is string, not a struct"]
    assert check_sequence_by(env, "transaction") == [
        "sequence_by 'transaction': type struct<29: id: required string, 30: total_order: required long, "
        "31: data_collection_order: required long> does not order changes; use a number, decimal, string, date, "
        "time or timestamp"]
    assert check_sequence_by(TABLE, "flag")[0].startswith("sequence_by 'flag': type boolean does not order")
