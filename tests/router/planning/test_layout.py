"""`plan` and `check` show a table's layout changes (partition spec, sort order) as they show column
changes, and refuse them under `freeze`: text and JSON, real registry, SQLite and PostgreSQL catalogs."""
from __future__ import annotations

import json

from confluent_kafka.schema_registry import Schema as RegistrySchema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.transforms import BucketTransform

from router.config import parse_config
from router.planning.check import check_command
from router.planning.plan import plan_command, plan_for_schema
from tests.router.planning.test_planning import V1, V2_ADD, catalog_props, client, plan_catalog  # noqa: F401

__all__ = ["client", "plan_catalog"]  # fixtures shared with test_planning


def config_for(tmp_path, registry_url: str, ns: str, topic: str, tables: dict, evolution: dict | None = None):
    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [topic]},
        "registry": {"url": registry_url},
        "catalog": {"name": "plan", "properties": catalog_props(tmp_path)},
        "routes": [{"name": "main", "topic": topic, "table": f"{ns}.{{topic}}"}],
        "tables": {"metadata_columns": False, **tables},
        "evolution": evolution,
    })


def bucketed_table(catalog, identifier: str) -> None:
    schema = plan_for_schema(catalog, identifier, V1).target
    spec = PartitionSpec(PartitionField(schema.find_field("id").field_id, 1000, BucketTransform(4), "id_bucket"))
    catalog.create_table(identifier, schema=schema, partition_spec=spec)


def test_plan_and_check_show_layout_changes(client, registry_api_url, plan_catalog, unique_name):  # noqa: F811
    catalog, ns, tmp_path = plan_catalog
    topic = unique_name("orders")
    table = f"{ns}.{topic}"
    client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
    bucketed_table(catalog, table)
    config = config_for(tmp_path, registry_api_url, ns, topic,
                        {"partition_by": ["truncate(10, id)"], "sort_by": ["total desc", "id"]})

    text, blocked, problems = plan_command(config, subjects=[f"{topic}-value"], fmt="text")
    assert (blocked, problems) == (False, [])
    assert text.splitlines() == [f"table {table}: evolve",
                                 "  ~ partition spec: bucket(4, id) -> truncate(10, id)",
                                 "  ~ sort order: unsorted -> total desc nulls last, id asc nulls first"]
    plans = json.loads(plan_command(config, subjects=[f"{topic}-value"], fmt="json")[0])["plans"]
    assert plans[0]["changes"] == [
        {"kind": "partition_spec", "path": [], "from": ["bucket(4, id)"], "to": ["truncate(10, id)"]},
        {"kind": "sort_order", "path": [], "from": [], "to": ["total desc nulls last", "id asc nulls first"]}]
    assert plans[0]["policy"]["partition_change"] == plans[0]["policy"]["sort_order_change"] == "evolve"

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2_ADD)  # a column change beside the layout change
    report, code, _ = check_command(config, str(schemas), fmt="json")
    assert code == 0
    [checked] = json.loads(report)["results"][0]["tables"]
    assert checked["verdict"] == "evolve"
    assert [c["kind"] for c in checked["plan"]["changes"]] == ["add_column", "partition_spec", "sort_order"]
    text, code, _ = check_command(config, str(schemas), fmt="text")
    assert code == 0 and "    ~ partition spec: bucket(4, id) -> truncate(10, id)" in text.splitlines()
    # plan and check only read: the table still has its spec and no sort order
    assert [f.name for f in catalog.load_table(table).spec().fields] == ["id_bucket"]
    assert catalog.load_table(table).sort_order().is_unsorted


def test_frozen_layout_changes_block_plan_and_check(client, registry_api_url, plan_catalog, unique_name):  # noqa: F811
    catalog, ns, tmp_path = plan_catalog
    topic = unique_name("orders")
    table = f"{ns}.{topic}"
    client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
    bucketed_table(catalog, table)
    config = config_for(tmp_path, registry_api_url, ns, topic, {"partition_by": ["truncate(10, id)"],
                                                                "sort_by": ["id"]},
                        {"default": {"partition_change": "freeze"}, "topics": {".*": {"sort_order_change": "freeze"}}})

    text, blocked, _ = plan_command(config, subjects=[f"{topic}-value"], fmt="text")
    assert blocked
    assert text.splitlines() == [
        f"table {table}: failed",
        "  ! <table>: partition_change: partition spec bucket(4, id) -> truncate(10, id) -> freeze",
        "  ! <table>: sort_order_change: sort order unsorted -> id asc nulls first -> freeze"]
    plan = json.loads(plan_command(config, subjects=[f"{topic}-value"], fmt="json")[0])
    assert plan["verdict"] == "blocked" and plan["plans"][0]["changes"] == []
    assert [v["kind"] for v in plan["plans"][0]["violations"]] == ["partition_change", "sort_order_change"]

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V1)
    report, code, _ = check_command(config, str(schemas), fmt="json")
    result = json.loads(report)["results"][0]
    assert code == 1 and result["blocked_by"] == [f"table {table} (failed)"]
