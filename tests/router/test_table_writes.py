"""Upsert tables' rules, as the job, plan and check all apply them (router/table_writes.py)."""

from __future__ import annotations

import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import DoubleType, IntegerType, ListType, LongType, NestedField, StringType, StructType

from evolution.policy import EvolutionPolicy
from router.decisions import decide_schema, plan_table
from router.table_writes import APPEND, TableWrite, key_problems, mode_conflict, table_key, with_key

UPSERT = TableWrite("upsert", ("id",))


def schema(*fields, key=()):
    built = Schema(*[NestedField(i + 1, name, t, required=False) for i, (name, t) in enumerate(fields)])
    return with_key(built, key) if key else built


def test_a_new_upsert_table_is_keyed_and_its_key_required():
    plan = plan_table(None, [schema(("id", LongType()), ("name", StringType()))], EvolutionPolicy(), True, "raw.c",
                      UPSERT)
    assert plan.status == "create" and table_key(plan.target) == ("id",)
    assert plan.target.find_field("id").required and not plan.target.find_field("name").required
    assert "upsert by id" in plan.notes


@pytest.mark.parametrize("current, write, reason", [
    (schema(("id", LongType()), key=("id",)), APPEND, "is an upsert table keyed by id; an append route cannot"),
    (schema(("id", LongType())), UPSERT, "is an append table; switching it to upsert is refused"),
    (schema(("id", LongType()), ("uid", LongType()), key=("uid",)), UPSERT, "is keyed by uid, the route by id"),
])
def test_a_table_keeps_its_mode_and_key(current, write, reason):
    assert reason in mode_conflict("raw.c", current, write)
    plan = plan_table(current, [schema(("id", LongType()), ("uid", LongType()))], EvolutionPolicy(), True, "raw.c",
                      write)
    assert plan.status == "failed" and not plan.changes and reason in plan.violations[0].reason
    decision = decide_schema(current, schema(("id", LongType())), EvolutionPolicy(), True, "raw.c", write)
    assert decision.action == "fail" and reason in decision.reason


def test_the_same_key_and_mode_pass():
    current = schema(("id", LongType()), key=("id",))
    assert mode_conflict("raw.c", current, UPSERT) is None
    assert mode_conflict("raw.c", schema(("id", LongType())), APPEND) is None
    assert mode_conflict("raw.c", None, UPSERT) is None


def test_key_columns_a_schema_cannot_key_by():
    s = schema(("id", DoubleType()), ("tags", ListType(9, StringType())), ("name", StringType()),
               ("meta", StructType(NestedField(10, "b", LongType(), required=False))))
    assert [c for c, _ in key_problems(s, ["id", "tags", "name", "missing", "meta.b"])] == ["id", "tags", "missing",
                                                                                           "meta.b"]
    assert "must not be float or double" in dict(key_problems(s, ["id"]))["id"]
    assert "key columns must be top-level" in dict(key_problems(s, ["meta.b"]))["meta.b"]


def test_a_schema_without_the_key_is_dead_lettered_and_the_key_never_retyped_or_relaxed():
    current = Schema(NestedField(1, "id", IntegerType(), required=True),
                     NestedField(2, "name", StringType(), required=False), identifier_field_ids=[1])
    no_key = decide_schema(current, schema(("name", StringType())), EvolutionPolicy(), True, "raw.c", UPSERT)
    assert no_key.action == "dlq" and "key column 'id': is not a column of the table" in no_key.reason
    wider = plan_table(current, [schema(("id", LongType()), ("name", StringType()))], EvolutionPolicy(), True,
                       "raw.c", UPSERT)
    assert wider.blocked and "would change type int -> long" in wider.violations[0].reason
    assert not any(c.path == ("id",) for c in wider.changes)
    relaxed = plan_table(current, [schema(("id", IntegerType()), ("name", StringType()), ("new", StringType()))],
                         EvolutionPolicy(), True, "raw.c", UPSERT)
    assert not relaxed.blocked and [c.path for c in relaxed.changes] == [("new",)]  # id stays required
