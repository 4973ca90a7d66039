"""Plans applied to real Iceberg tables, read back with pyiceberg and DuckDB."""
from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa
import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import DayTransform

from evolution.apply import apply_plan
from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.changes import MappedSchema
from evolution.exceptions import ApplyError, EvolutionViolation
from evolution.plan import plan_evolution
from evolution.policy import EvolutionPolicy, Mode
from tests.duckdb_reader import read_iceberg_rows
from tests.evolution.helpers import amap, arr, dec, field, logical, opt, rec

UTC = dt.timezone.utc

V1 = rec(
    ("id", "int"), ("score", "float"), ("amount", dec(9, 2)), ("name", "string"),
    ("ts", logical("long", "timestamp-millis")),
    ("addr", rec(("city", "string"), name="Addr")),
    ("items", arr(rec(("sku", "string"), name="Item"))),
    ("attrs", amap(rec(("v", "int"), name="Attr"))),
)

V2 = rec(
    ("id", "long"), ("score", "double"), ("amount", dec(18, 2)),
    field("full_name", "string", aliases=["name"]),
    ("ts", logical("long", "timestamp-millis")),
    ("addr", rec(("city", "string"), ("zip", opt("string")), name="Addr")),
    ("items", arr(rec(("sku", "string"), ("qty", opt("long")), name="Item"))),
    ("attrs", amap(rec(("v", "int"), ("note", opt("string")), name="Attr"))),
    ("email", opt("string")),
)

ROW1 = {"id": 1, "score": 1.5, "amount": decimal.Decimal("1234567.89"), "name": "ann",
        "ts": dt.datetime(2024, 5, 1, 12, 0, tzinfo=UTC), "addr": {"city": "Oslo"},
        "items": [{"sku": "a"}, {"sku": "b"}], "attrs": [("k", {"v": 7})]}

ROW2 = {"id": 2**40, "score": 2.25, "amount": decimal.Decimal("1234567890123456.78"),
        "full_name": "bob", "ts": dt.datetime(2024, 5, 2, tzinfo=UTC),
        "addr": {"city": "Rome", "zip": "00100"}, "items": [{"sku": "c", "qty": 3}],
        "attrs": [("k", {"v": 8, "note": "hi"})], "email": "bob@example.com"}


def create_table(catalog, identifier: str, plan):
    """The table a new-table plan describes (the job creates it with router/catalog/tables.py)."""
    return catalog.create_table(identifier, schema=plan.target)


def mapped(avro) -> MappedSchema:
    return MappedSchema(avro_to_iceberg(avro), avro_field_aliases(avro))


def append(table, rows) -> None:
    table.append(pa.Table.from_pylist(rows, schema=iceberg_to_arrow(table.schema())))


def _normalise(row: dict) -> dict:
    """DuckDB returns maps as lists of {key, value}; pyiceberg as (key, value) tuples."""
    out = dict(row)
    attrs = out.get("attrs")
    if attrs is not None:
        out["attrs"] = {(e["key"] if isinstance(e, dict) else e[0]): (e["value"] if isinstance(e, dict) else e[1])
                        for e in (attrs.items() if isinstance(attrs, dict) else attrs)}
    return out


def test_evolve_write_read_back(evo_catalog) -> None:
    catalog, ns = evo_catalog
    create = plan_evolution(None, [mapped(V1)], table=f"{ns}.events")
    spec = PartitionSpec(PartitionField(source_id=create.target.find_field("ts").field_id, field_id=1000,
                                        transform=DayTransform(), name="ts_day"))
    table = catalog.create_table(f"{ns}.events", schema=create.target, partition_spec=spec)
    assert table.schema().as_struct() == create.target.as_struct()
    append(table, [ROW1])

    plan = plan_evolution(table.schema(), [mapped(V2)], table=f"{ns}.events")
    assert {c.kind for c in plan.changes} == {"widen_column", "rename_column", "add_column"}
    assert not plan.violations
    name_id = table.schema().find_field("name").field_id
    with table.transaction() as txn:
        staged = apply_plan(txn, plan)
        txn.set_properties({"icerouter.test": "1"})
    table = catalog.load_table(f"{ns}.events")
    assert table.schema().as_struct() == plan.target.as_struct() == staged.as_struct()
    assert table.properties["icerouter.test"] == "1"
    assert table.schema().find_field("full_name").field_id == name_id
    append(table, [ROW2])

    expected_old = {**ROW1, "id": 1, "full_name": "ann", "email": None,
                    "addr": {"city": "Oslo", "zip": None},
                    "items": [{"sku": "a", "qty": None}, {"sku": "b", "qty": None}],
                    "attrs": [("k", {"v": 7, "note": None})]}
    expected_old.pop("name")
    expected = [_normalise(expected_old), _normalise(ROW2)]

    via_pyiceberg = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [_normalise(r) for r in via_pyiceberg] == expected
    via_duckdb = read_iceberg_rows(table, order_by="id")
    assert [_normalise(r) for r in via_duckdb] == expected
    # the widened columns kept the old values intact
    assert via_duckdb[0]["score"] == 1.5 and via_duckdb[0]["amount"] == decimal.Decimal("1234567.89")


def test_apply_on_table_commits_directly(evo_catalog) -> None:
    catalog, ns = evo_catalog
    base = rec(("id", "long"), ("name", "string"))
    table = create_table(catalog, f"{ns}.t", plan_evolution(None, [mapped(base)],
                                   EvolutionPolicy(optional_on_create=False)))
    append(table, [{"id": 1, "name": "x"}])
    plan = plan_evolution(table.schema(), [mapped(rec(("id", "long")))])
    assert [c.describe() for c in plan.changes] == ["? name: required -> optional"]
    apply_plan(table, plan)
    table = catalog.load_table(f"{ns}.t")
    assert not table.schema().find_field("name").required
    append(table, [{"id": 2, "name": None}])
    assert read_iceberg_rows(table, order_by="id") == [{"id": 1, "name": "x"}, {"id": 2, "name": None}]


def test_stale_plan_is_rejected_as_transient(evo_catalog) -> None:
    catalog, ns = evo_catalog
    table = create_table(catalog, f"{ns}.t", plan_evolution(None, [mapped(rec(("id", "int")))]))
    plan_a = plan_evolution(table.schema(), [mapped(rec(("id", "int"), ("a", opt("int"))))])
    plan_b = plan_evolution(table.schema(), [mapped(rec(("id", "int"), ("b", opt("int"))))])
    apply_plan(table, plan_a)
    with pytest.raises(ApplyError) as err:
        apply_plan(catalog.load_table(f"{ns}.t"), plan_b)
    assert err.value.transient
    assert [f.name for f in catalog.load_table(f"{ns}.t").schema().fields] == ["id", "a"]


def test_frozen_plan_raises_and_changes_nothing(evo_catalog) -> None:
    catalog, ns = evo_catalog
    table = create_table(catalog, f"{ns}.t", plan_evolution(None, [mapped(rec(("id", "long")))]))
    plan = plan_evolution(table.schema(), [mapped(rec(("id", "string"), ("x", opt("int"))))],
                          EvolutionPolicy(type_change=Mode.FREEZE))
    with pytest.raises(EvolutionViolation) as err:
        apply_plan(table, plan)
    assert err.value.column == "id" and err.value.kind == "type_change"
    assert [f.name for f in catalog.load_table(f"{ns}.t").schema().fields] == ["id"]


def test_dlq_violation_still_applies_legal_changes(evo_catalog) -> None:
    catalog, ns = evo_catalog
    table = create_table(catalog, f"{ns}.t", plan_evolution(None, [mapped(rec(("id", "long")))]))
    plan = plan_evolution(table.schema(), [mapped(rec(("id", "string"), ("x", opt("int"))))])
    assert plan.blocked and [v.outcome for v in plan.violations] == [Mode.DLQ]
    apply_plan(table, plan)
    schema = catalog.load_table(f"{ns}.t").schema()
    assert [(f.name, str(f.field_type)) for f in schema.fields] == [("id", "long"), ("x", "int")]


def test_new_table_plan_is_not_applied(evo_catalog) -> None:
    catalog, ns = evo_catalog
    plan = plan_evolution(None, [mapped(rec(("id", "long")))])
    table = create_table(catalog, f"{ns}.t", plan)
    with pytest.raises(ApplyError):
        apply_plan(table, plan)


def test_case_insensitive_apply(evo_catalog) -> None:
    catalog, ns = evo_catalog
    table = create_table(catalog, f"{ns}.t", plan_evolution(
        None, [mapped(rec(("Id", "int"), ("Addr", rec(("City", "string"), name="Addr"))))]))
    incoming = rec(("id", "long"), ("addr", rec(("city", "string"), ("zip", opt("string")), name="Addr")))
    plan = plan_evolution(table.schema(), [mapped(incoming)], case_sensitive=False)
    apply_plan(table, plan, case_sensitive=False)
    schema = catalog.load_table(f"{ns}.t").schema()
    assert schema.as_struct() == plan.target.as_struct()
    assert str(schema.find_field("Id").field_type) == "long"
    assert schema.find_field("Addr.zip").field_id == plan.target.find_field("Addr.zip").field_id
