"""Table-driven tests of the pure evolution planner (Avro and JSON Schema inputs)."""
from __future__ import annotations

import json
from dataclasses import dataclass, field as dfield
from typing import Any

import pytest
from pyiceberg.types import LongType, StringType

from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.changes import MappedSchema
from evolution.jsonschema import jsonschema_to_iceberg
from evolution.plan import can_promote, plan_evolution
from evolution.policy import EvolutionPolicy, Mode
from tests.evolution.helpers import amap, arr, dec, field, logical, opt, rec

ADDR = rec(("city", "string"), name="Addr")
ADDR_ZIP = rec(("city", "string"), ("zip", opt("string")), name="Addr")
ITEM = rec(("sku", "string"), name="Item")
ITEM_QTY = rec(("sku", "string"), ("qty", opt("int")), name="Item")


def mapped(schema: Any) -> MappedSchema:
    if isinstance(schema, dict) and schema.get("$schema"):
        return MappedSchema(jsonschema_to_iceberg(schema))
    return MappedSchema(avro_to_iceberg(schema), avro_field_aliases(schema))


def js(properties: dict, required: tuple = ()) -> dict:
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
            "properties": properties, "required": list(required)}


@dataclass
class Case:
    id: str
    current: Any                      # Avro/JSON schema of the table, None for a new table
    incoming: list
    changes: list[str] = dfield(default_factory=list)
    violations: list[tuple[str, str, str]] = dfield(default_factory=list)
    policy: dict | str = dfield(default_factory=dict)
    notes: int = 0
    case_sensitive: bool = True


BASE = rec(("id", "long"), ("name", "string"))

CASES = [
    # ---- legal, no change ------------------------------------------------
    Case("identical", BASE, [BASE]),
    Case("optional-column-missing", rec(("id", "long"), ("note", opt("string"))), [rec(("id", "long"))]),
    Case("enum-into-string", BASE, [rec(("id", "long"), ("name", {"type": "enum", "name": "N", "symbols": ["a"]}))]),
    Case("ts-millis-into-micros", rec(("ts", logical("long", "timestamp-micros"))),
         [rec(("ts", logical("long", "timestamp-millis")))]),
    Case("uuid-into-string", rec(("u", "string")), [rec(("u", logical("string", "uuid")))]),
    # ---- narrower incoming: writable upcast, no change ----------------------
    Case("long-table-int-incoming", rec(("id", "long")), [rec(("id", "int"))], notes=1),
    Case("double-table-float-incoming", rec(("x", "double")), [rec(("x", "float"))], notes=1),
    Case("decimal-table-wider", rec(("d", dec(18))), [rec(("d", dec(9)))], notes=1),
    # ---- additions -----------------------------------------------------------
    Case("add-optional-column", BASE, [rec(("id", "long"), ("name", "string"), ("email", opt("string")))],
         ["+ email: optional string"]),
    Case("add-required-column-added-optional", BASE, [rec(("id", "long"), ("name", "string"), ("age", "int"))],
         ["+ age: optional int"]),
    Case("add-struct-column", BASE, [rec(("id", "long"), ("name", "string"), ("addr", ADDR))],
         ["+ addr: optional struct<4: city: required string>"]),
    Case("add-nested-struct-field", rec(("id", "long"), ("addr", ADDR)),
         [rec(("id", "long"), ("addr", ADDR_ZIP))], ["+ addr.zip: optional string"]),
    Case("add-field-in-list-element", rec(("items", arr(ITEM))), [rec(("items", arr(ITEM_QTY)))],
         ["+ items.element.qty: optional int"]),
    Case("add-field-in-map-value", rec(("m", amap(ITEM))), [rec(("m", amap(ITEM_QTY)))],
         ["+ m.value.qty: optional int"]),
    Case("add-list-column", BASE, [rec(("id", "long"), ("name", "string"), ("tags", opt(arr("string"))))],
         ["+ tags: optional list<string>"]),
    Case("add-map-column", BASE, [rec(("id", "long"), ("name", "string"), ("m", amap("long")))],
         ["+ m: optional map<string, long>"]),
    Case("add-multi-union-column", BASE, [rec(("id", "long"), ("name", "string"), ("u", ["int", "string"]))],
         ["+ u: optional struct<4: int: optional int, 5: string: optional string>"]),
    # ---- widening ---------------------------------------------------------------
    Case("int-to-long", rec(("id", "int")), [rec(("id", "long"))], ["~ id: int -> long"]),
    Case("float-to-double", rec(("x", "float")), [rec(("x", "double"))], ["~ x: float -> double"]),
    Case("decimal-precision-up", rec(("d", dec(9))), [rec(("d", dec(18)))],
         ["~ d: decimal(9, 2) -> decimal(18, 2)"]),
    Case("widen-list-element", rec(("xs", arr("int"))), [rec(("xs", arr("long")))],
         ["~ xs.element: int -> long"]),
    Case("widen-map-value", rec(("m", amap("float"))), [rec(("m", amap("double")))],
         ["~ m.value: float -> double"]),
    Case("widen-in-nested-struct", rec(("s", rec(("n", "int"), name="S"))), [rec(("s", rec(("n", "long"), name="S")))],
         ["~ s.n: int -> long"]),
    # ---- nullability -----------------------------------------------------------
    Case("required-to-optional", BASE, [rec(("id", "long"), ("name", opt("string")))],
         ["? name: required -> optional"]),
    Case("required-column-missing-made-optional", BASE, [rec(("id", "long"))],
         ["? name: required -> optional"]),
    Case("list-element-to-optional", rec(("xs", arr("int"))), [rec(("xs", arr(opt("int"))))],
         ["? xs.element: required -> optional"]),
    # ---- renames via aliases -----------------------------------------------------
    Case("rename-by-alias", BASE, [rec(("id", "long"), field("full_name", "string", aliases=["name"]))],
         ["> name -> full_name"]),
    Case("rename-nested-by-alias", rec(("addr", ADDR)),
         [rec(("addr", rec(field("town", "string", aliases=["city"]), name="Addr")))],
         ["> addr.city -> town"]),
    Case("alias-kept-when-old-name-still-used", BASE,
         [rec(("id", "long"), field("full_name", "string", aliases=["name"])), BASE],
         ["? name: required -> optional", "+ full_name: optional string"], notes=1),
    # ---- fan-in -----------------------------------------------------------------------
    Case("fan-in-union-of-columns", BASE,
         [rec(("id", "long"), ("name", "string"), ("a", opt("int"))),
          rec(("id", "long"), ("name", "string"), ("b", opt("string")))],
         ["+ a: optional int", "+ b: optional string"]),
    Case("fan-in-widest-wins", rec(("n", "int")), [rec(("n", "int")), rec(("n", "long"))], ["~ n: int -> long"]),
    Case("fan-in-conflict", rec(("n", "long")), [rec(("n", "long")), rec(("n", "string"))],
         violations=[("n", "type_change", "dlq")]),
    # ---- case sensitivity -----------------------------------------------------------------
    Case("case-insensitive-match", BASE, [rec(("ID", "long"), ("Name", "string"))], case_sensitive=False),
    Case("case-sensitive-twin-column", BASE, [rec(("id", "long"), ("name", "string"), ("Name", opt("string")))],
         violations=[("Name", "case_conflict", "dlq")]),
    # ---- JSON Schema incoming ----------------------------------------------------------
    Case("json-add-column", js({"id": {"type": "integer"}, "name": {"type": "string"}}, ("id", "name")),
         [js({"id": {"type": "integer"}, "name": {"type": "string"},
              "at": {"type": "string", "format": "date-time"}}, ("id", "name"))],
         ["+ at: optional timestamptz"]),
    Case("json-integer-widens-avro-int", rec(("n", "int")), [js({"n": {"type": "integer"}}, ("n",))],
         ["~ n: int -> long"]),
    Case("json-nullable-makes-optional", BASE,
         [js({"id": {"type": "integer"}, "name": {"type": ["string", "null"]}}, ("id", "name"))],
         ["? name: required -> optional"]),
    Case("json-number-vs-long", rec(("n", "long")), [js({"n": {"type": "number"}}, ("n",))],
         violations=[("n", "type_change", "dlq")]),
    # ---- illegal type changes ------------------------------------------------------------------
    Case("long-to-string", rec(("id", "long")), [rec(("id", "string"))], violations=[("id", "type_change", "dlq")]),
    Case("string-to-int", rec(("s", "string")), [rec(("s", "int"))], violations=[("s", "type_change", "dlq")]),
    Case("int-to-double", rec(("n", "int")), [rec(("n", "double"))], violations=[("n", "type_change", "dlq")]),
    Case("boolean-to-long", rec(("b", "boolean")), [rec(("b", "long"))], violations=[("b", "type_change", "dlq")]),
    Case("decimal-scale-change", rec(("d", dec(10, 2))), [rec(("d", dec(12, 3)))],
         violations=[("d", "type_change", "dlq")]),
    Case("decimal-to-double", rec(("d", dec(10, 2))), [rec(("d", "double"))], violations=[("d", "type_change", "dlq")]),
    Case("fixed-size-change", rec(("f", {"type": "fixed", "name": "F", "size": 4})),
         [rec(("f", {"type": "fixed", "name": "F", "size": 8}))], violations=[("f", "type_change", "dlq")]),
    Case("date-to-timestamp", rec(("d", logical("int", "date"))), [rec(("d", logical("long", "timestamp-micros")))],
         violations=[("d", "type_change", "dlq")]),
    Case("utc-to-local-timestamp", rec(("t", logical("long", "timestamp-micros"))),
         [rec(("t", logical("long", "local-timestamp-micros")))], violations=[("t", "type_change", "dlq")]),
    Case("bytes-to-string", rec(("b", "bytes")), [rec(("b", "string"))], violations=[("b", "type_change", "dlq")]),
    Case("struct-to-primitive", rec(("addr", ADDR)), [rec(("addr", "string"))],
         violations=[("addr", "type_change", "dlq")]),
    Case("primitive-to-struct", rec(("addr", "string")), [rec(("addr", ADDR))],
         violations=[("addr", "type_change", "dlq")]),
    Case("list-to-map", rec(("xs", arr("long"))), [rec(("xs", amap("long")))], violations=[("xs", "type_change", "dlq")]),
    Case("union-branch-added-to-primitive", rec(("v", "int")), [rec(("v", ["int", "string"]))],
         violations=[("v", "type_change", "dlq")]),
    Case("list-element-type-change", rec(("xs", arr("long"))), [rec(("xs", arr("string")))],
         violations=[("xs.element", "type_change", "dlq")]),
    Case("map-value-type-change", rec(("m", amap(ITEM))), [rec(("m", amap(rec(("sku", "long"), name="Item"))))],
         violations=[("m.value.sku", "type_change", "dlq")]),
    Case("narrowing-plus-legal-add", rec(("id", "long")), [rec(("id", "string"), ("x", opt("int")))],
         ["+ x: optional int"], violations=[("id", "type_change", "dlq")]),
    # ---- policies ---------------------------------------------------------------------------------
    Case("type-change-freeze", rec(("id", "long")), [rec(("id", "string"))],
         violations=[("id", "type_change", "freeze")], policy={"type_change": "freeze"}),
    Case("type-change-discard-value", rec(("id", "long")), [rec(("id", "string"))],
         violations=[("id", "type_change", "discard_value")], policy={"type_change": "discard_value"}),
    Case("new-column-frozen", BASE, [rec(("id", "long"), ("name", "string"), ("x", opt("int")))],
         violations=[("x", "new_column", "freeze")], policy={"new_column": "freeze"}),
    Case("widen-under-dlq", rec(("id", "int")), [rec(("id", "long"))],
         violations=[("id", "widen", "dlq")], policy={"new_column": "dlq"}),
    Case("missing-required-discard-value-means-row", BASE, [rec(("id", "long"))],
         violations=[("name", "missing_required", "discard_row")], policy={"new_column": "discard_value"}),
    # ---- names that differ only by case -----------------------------------
    Case("case-twin-refused", rec(("UserId", "long")), [rec(("UserId", "long"), ("userid", opt("long")))],
         violations=[("userid", "case_conflict", "dlq")]),
    Case("case-twin-frozen", rec(("UserId", "long")), [rec(("userid", "long"))],
         violations=[("userid", "case_conflict", "freeze"), ("UserId", "missing_required", "freeze")],
         policy="freeze"),
    Case("case-twin-nested", rec(("a", rec(("Zip", "string"), name="A"))),
         [rec(("a", rec(("Zip", "string"), ("ZIP", opt("string")), name="A")))],
         violations=[("a.ZIP", "case_conflict", "dlq")]),
    Case("case-twin-insensitive-maps-onto-column", rec(("UserId", "int")), [rec(("userid", "long"))],
         changes=["~ UserId: int -> long"], case_sensitive=False),
    Case("new-column-discard-value", BASE, [rec(("id", "long"), ("name", "string"), ("x", opt("int")))],
         violations=[("x", "new_column", "discard_value")], policy={"new_column": "discard_value"}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_plan_table(case: Case) -> None:
    current = mapped(case.current).schema if case.current is not None else None
    policy = EvolutionPolicy.from_spec(case.policy)
    plan = plan_evolution(current, [mapped(s) for s in case.incoming], policy,
                          case_sensitive=case.case_sensitive)
    assert [c.describe() for c in plan.changes] == case.changes
    assert [(".".join(v.path), v.kind, v.outcome.value) for v in plan.violations] == case.violations
    assert len(plan.notes) == case.notes, plan.notes
    assert plan.is_noop == (not case.changes and not case.violations)
    blocking = {"freeze", "dlq", "discard_row"}
    assert plan.blocked == any(v[2] in blocking for v in case.violations)
    # the target schema carries every change and keeps existing field ids
    for f in current.fields:
        if not any(v[0] == f.name for v in case.violations) and "> " not in "".join(case.changes):
            assert plan.target.find_field(f.field_id).name == f.name
    json.dumps(plan.to_dict())  # JSON-serialisable


def test_case_count_covers_brief() -> None:
    assert len(CASES) >= 40


def test_new_table_defaults_to_optional_top_level_columns() -> None:
    schema = avro_to_iceberg(rec(("id", "long"), ("addr", ADDR)))
    plan = plan_evolution(None, [schema])
    assert plan.new_table and not plan.changes and not plan.violations
    assert plan.status == "create"
    assert [f.required for f in plan.target.fields] == [False, False]
    assert plan.target.find_field("addr.city").required  # nested kept as in the source


def test_new_table_can_keep_required_columns() -> None:
    schema = avro_to_iceberg(rec(("id", "long"), ("note", opt("string"))))
    plan = plan_evolution(None, [schema], EvolutionPolicy(optional_on_create=False))
    assert [f.required for f in plan.target.fields] == [True, False]


def test_new_table_fan_in_merges_and_relaxes_missing() -> None:
    a = avro_to_iceberg(rec(("id", "int"), ("a", "string")))
    b = avro_to_iceberg(rec(("id", "long"), ("b", "string")))
    plan = plan_evolution(None, [a, b], EvolutionPolicy(optional_on_create=False))
    target = {f.name: (f.field_type, f.required) for f in plan.target.fields}
    assert target == {"id": (LongType(), True), "a": (StringType(), False), "b": (StringType(), False)}
    assert [f.field_id for f in plan.target.fields] == [1, 2, 3]


def test_new_table_fan_in_conflict_is_violation() -> None:
    a = avro_to_iceberg(rec(("id", "long")))
    b = avro_to_iceberg(rec(("id", "string")))
    plan = plan_evolution(None, [a, b])
    assert [(v.path, v.kind) for v in plan.violations] == [(("id",), "type_change")]
    assert plan.target.find_field("id").field_type == LongType()


def test_new_table_refused_by_policy() -> None:
    plan = plan_evolution(None, [avro_to_iceberg(BASE)], EvolutionPolicy(new_table=Mode.FREEZE))
    assert [(v.kind, v.outcome) for v in plan.violations] == [("new_table", Mode.FREEZE)]
    assert plan.failed and plan.blocked and plan.status == "failed"


def test_plan_is_deterministic_and_pure() -> None:
    current = avro_to_iceberg(rec(("id", "int"), ("addr", ADDR)))
    before = current.model_dump_json()
    incoming = [mapped(rec(("id", "long"), ("addr", ADDR_ZIP), ("x", opt("int"))))]
    first = plan_evolution(current, incoming)
    second = plan_evolution(current, incoming)
    assert first == second
    assert current.model_dump_json() == before


def test_target_ids_continue_after_highest() -> None:
    current = avro_to_iceberg(rec(("id", "long"), ("addr", ADDR)))
    plan = plan_evolution(current, [mapped(rec(("id", "long"), ("addr", ADDR_ZIP), ("x", opt("int"))))])
    assert plan.target.find_field("addr.zip").field_id == current.highest_field_id + 1
    assert plan.target.find_field("x").field_id == current.highest_field_id + 2
    assert plan.target.find_field("addr.city").field_id == current.find_field("addr.city").field_id


def test_rename_keeps_field_id() -> None:
    current = avro_to_iceberg(BASE)
    plan = plan_evolution(current, [mapped(rec(("id", "long"), field("full_name", "string", aliases=["name"])))])
    assert plan.target.find_field("full_name").field_id == current.find_field("name").field_id


def test_describe_and_to_dict() -> None:
    plan = plan_evolution(avro_to_iceberg(rec(("id", "int"))),
                          [mapped(rec(("id", "string"), ("x", opt("int"))))], table="db.t")
    text = plan.describe()
    assert text.splitlines()[0] == "table db.t: blocked"
    assert "+ x: optional int" in text and "! id: type_change" in text and "-> dlq" in text
    data = plan.to_dict()
    assert data["table"] == "db.t" and data["blocked"] is True
    assert data["changes"] == [{"kind": "add_column", "path": ["x"], "type": "int", "doc": None}]
    assert data["violations"][0]["outcome"] == "dlq"


def test_noop_describe() -> None:
    plan = plan_evolution(avro_to_iceberg(BASE), [avro_to_iceberg(BASE)])
    assert plan.is_noop and plan.status == "unchanged" and "(no changes)" in plan.describe()


def test_can_promote_table() -> None:
    from pyiceberg.types import DecimalType, DoubleType, FloatType, IntegerType
    assert can_promote(IntegerType(), LongType())
    assert can_promote(FloatType(), DoubleType())
    assert can_promote(DecimalType(9, 2), DecimalType(10, 2))
    assert not can_promote(DecimalType(9, 2), DecimalType(10, 3))
    assert not can_promote(LongType(), IntegerType())
    assert not can_promote(IntegerType(), DoubleType())


def test_plan_needs_schema_for_new_table() -> None:
    with pytest.raises(ValueError):
        plan_evolution(None, [])


def test_plan_pickles_and_compares() -> None:
    import pickle
    plan = plan_evolution(avro_to_iceberg(rec(("id", "int"))), [mapped(rec(("id", "string"), ("x", opt("int"))))])
    again = pickle.loads(pickle.dumps(plan))
    assert again == plan and again.blocked and again.changes[0].type == plan.changes[0].type


def test_case_insensitive_paths_use_table_casing() -> None:
    current = avro_to_iceberg(rec(("Id", "int"), ("Addr", ADDR)))
    plan = plan_evolution(current, [mapped(rec(("id", "long"), ("addr", ADDR_ZIP)))], case_sensitive=False)
    assert [c.describe() for c in plan.changes] == ["~ Id: int -> long", "+ Addr.zip: optional string"]
    assert [f.name for f in plan.target.fields] == ["Id", "Addr"]


def test_case_twins_in_one_new_schema_are_refused() -> None:
    plan = plan_evolution(None, [mapped(rec(("UserId", "long"), ("userid", "long")))])
    assert [(v.path, v.kind, v.outcome) for v in plan.violations] == [(("userid",), "case_conflict", Mode.DLQ)]
    assert "only by case" in plan.violations[0].reason and plan.blocked
    assert [f.name for f in plan.target.fields] == ["UserId"]
