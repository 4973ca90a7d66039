"""`plan` / `check` library code against the real registry fixture and SQLite catalogs."""
from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient
from pyiceberg.catalog.sql import SqlCatalog

from evolution.arrow import iceberg_to_arrow
from evolution.policy import EvolutionPolicy, Mode
from router.config import parse_config
from router.planning import (
    check_command, check_schema, detect_schema_type, exit_code, plan_command, plan_for_schema,
    render_check_json, render_check_junit, render_check_text, render_plan_json, render_plan_text,
    subject_topic,
)


def avro(*fields) -> str:
    return json.dumps({"type": "record", "name": "Order", "namespace": "shop",
                       "fields": [dict(f) for f in fields]})


V1 = avro({"name": "id", "type": "long"}, {"name": "total", "type": "double"})
V2_ADD = avro({"name": "id", "type": "long"}, {"name": "total", "type": "double"},
              {"name": "note", "type": ["null", "string"], "default": None})
V3_BREAK = avro({"name": "id", "type": "string"}, {"name": "total", "type": "double"})
JSON_V1 = json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object",
                      "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
                      "required": ["id"]})


@pytest.fixture
def sqlite(tmp_path, unique_name):
    catalog = SqlCatalog("plan", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/w")
    ns = unique_name("ns")
    catalog.create_namespace(ns)
    return catalog, ns, tmp_path


@pytest.fixture
def client(registry_url) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": registry_url})


def make_table(catalog, identifier: str, schema_str: str):
    plan = plan_for_schema(catalog, identifier, schema_str)
    table = catalog.create_table(identifier, schema=plan.target)
    table.append(pa.Table.from_pylist([{"id": 1, "total": 9.5}], schema=iceberg_to_arrow(table.schema())))
    return table


def test_plan_for_new_and_existing_table(sqlite) -> None:
    catalog, ns, _ = sqlite
    new = plan_for_schema(catalog, f"{ns}.orders", V1)
    assert new.new_table and new.status == "create" and not new.blocked
    make_table(catalog, f"{ns}.orders", V1)
    evolve = plan_for_schema(catalog, f"{ns}.orders", V2_ADD)
    assert [c.describe() for c in evolve.changes] == ["+ note: optional string"]
    broken = plan_for_schema(catalog, f"{ns}.orders", V3_BREAK,
                             policy=EvolutionPolicy(type_change=Mode.FREEZE))
    assert broken.failed and exit_code([new, evolve]) == 0 and exit_code([evolve, broken]) == 1
    text = render_plan_text([evolve, broken])
    assert f"table {ns}.orders: evolve" in text and "! id: type_change" in text
    data = json.loads(render_plan_json([evolve, broken]))
    assert data["blocked"] is True
    assert [p["status"] for p in data["plans"]] == ["evolve", "failed"]
    # nothing was written by planning
    assert [f.name for f in catalog.load_table(f"{ns}.orders").schema().fields] == ["id", "total"]


def test_plan_json_schema(sqlite) -> None:
    catalog, ns, _ = sqlite
    plan = plan_for_schema(catalog, f"{ns}.events", JSON_V1, "JSON")
    assert [(f.name, str(f.field_type)) for f in plan.target.fields] == [("id", "long"), ("at", "timestamptz")]


def test_check_new_subject_is_not_an_error(client, sqlite, unique_name) -> None:
    catalog, ns, _ = sqlite
    subject = f"{unique_name('orders')}-value"
    result = check_schema(client, subject, V1, "AVRO", [(f"{ns}.orders", None)], catalog=catalog)
    assert result.compatibility == "new" and result.ok
    assert result.tables[0].plan.new_table
    assert exit_code([result]) == 0


def test_check_compatible_and_incompatible(client, sqlite, unique_name) -> None:
    catalog, ns, _ = sqlite
    subject = f"{unique_name('orders')}-value"
    client.register_schema(subject, RegistrySchema(V1, "AVRO"))
    make_table(catalog, f"{ns}.orders", V1)
    tables = [(f"{ns}.orders", EvolutionPolicy()), (f"{ns}.orders_copy", EvolutionPolicy())]

    good = check_schema(client, subject, V2_ADD, "AVRO", tables, catalog=catalog)
    assert good.compatibility == "compatible" and good.ok
    assert good.level == client.get_compatibility()
    assert [c.describe() for c in good.tables[0].plan.changes] == ["+ note: optional string"]
    assert good.tables[1].plan.new_table

    bad = check_schema(client, subject, V3_BREAK, "AVRO", tables, catalog=catalog)
    assert bad.compatibility == "incompatible" and not bad.ok
    assert bad.messages  # the registry says why
    assert bad.tables[0].plan.blocked
    assert exit_code([good, bad]) == 1

    text = render_check_text([good, bad])
    assert f"subject {subject} (AVRO): OK" in text and f"subject {subject} (AVRO): FAILED" in text
    data = json.loads(render_check_json([good, bad]))
    assert data["ok"] is False and data["results"][1]["compatibility"] == "incompatible"

    suite = ET.fromstring(render_check_junit([good, bad])).find("testsuite")
    cases = suite.findall("testcase")
    assert suite.get("tests") == "4" and suite.get("failures") == "2"
    assert [(c.get("classname"), c.get("name"), c.find("failure") is not None) for c in cases] == [
        (subject, f"{ns}.orders", False), (subject, f"{ns}.orders_copy", False),
        (subject, f"{ns}.orders", True), (subject, f"{ns}.orders_copy", True)]


def test_check_uses_subject_level(client, sqlite, unique_name) -> None:
    catalog, ns, _ = sqlite
    subject = f"{unique_name('orders')}-value"
    client.register_schema(subject, RegistrySchema(V1, "AVRO"))
    client.set_compatibility(subject, "NONE")
    result = check_schema(client, subject, V3_BREAK, "AVRO", [(f"{ns}.orders", None)], catalog=catalog)
    assert result.level == "NONE" and result.compatibility == "compatible"
    # the registry accepts it, the table still cannot take it (new table here: fine)
    assert result.ok


def test_check_unmappable_schema_fails_the_table(client, unique_name) -> None:
    recursive = json.dumps({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]})
    result = check_schema(client, f"{unique_name('n')}-value", recursive, "AVRO", [("db.nodes", None)])
    assert result.compatibility == "new" and not result.ok
    assert "recursive" in result.tables[0].error
    junit = ET.fromstring(render_check_junit([result]))
    assert junit.find("testsuite").get("failures") == "1"


def test_helpers() -> None:
    assert subject_topic("orders-value") == "orders" and subject_topic("plain") == "plain"
    assert detect_schema_type(V1, ".json") == "AVRO"
    assert detect_schema_type(JSON_V1, ".json") == "JSON"
    assert detect_schema_type('"string"', ".avsc") == "AVRO"


def _config(tmp_path, registry_url, ns: str, topic: str, **evolution):
    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [topic]},
        "registry": {"url": registry_url},
        "catalog": {"name": "plan", "properties": {
            "type": "sql", "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": f"file://{tmp_path}/w"}},
        "routes": [{"name": "main", "topic": topic, "table": f"{ns}.{{topic}}"},
                   {"name": "by_tenant", "topic": topic, "table": f"{ns}.{{header.tenant}}"}],
        "evolution": evolution or None,
    })


def test_plan_and_check_commands(client, registry_url, sqlite, unique_name) -> None:
    catalog, ns, tmp_path = sqlite
    topic = unique_name("orders")
    client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
    make_table(catalog, f"{ns}.{topic}", V1)
    config = _config(tmp_path, registry_url, ns, topic, default={"type_change": "freeze"})

    client.register_schema(f"{topic}-value", RegistrySchema(V2_ADD, "AVRO"))
    output, blocked = plan_command(config, subjects=[f"{topic}-value"], fmt="text")
    assert not blocked
    assert f"table {ns}.{topic}: evolve" in output and "+ note: optional string" in output
    assert "route by_tenant: table name depends on record data" in output

    schema_file = tmp_path / "orders.avsc"
    schema_file.write_text(V3_BREAK)
    output, blocked = plan_command(config, schema_file=str(schema_file), table=f"{ns}.{topic}", fmt="json")
    assert blocked and json.loads(output)["plans"][0]["status"] == "failed"

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V3_BREAK)
    output, failed = check_command(config, str(schemas), fmt="junit")
    assert failed
    cases = ET.fromstring(output).find("testsuite").findall("testcase")
    assert [c.get("name") for c in cases] == [f"{ns}.{topic}", "route by_tenant"]
    assert cases[0].find("failure") is not None  # registry: incompatible, table: type change frozen
    assert cases[1].find("failure").get("message") == "registry: incompatible"

    (schemas / f"{topic}.avsc").write_text(V2_ADD)
    output, failed = check_command(config, str(schemas), fmt="json")
    assert not failed
    result = json.loads(output)["results"][0]
    assert result["compatibility"] == "compatible"
    assert result["tables"][0]["plan"]["status"] == "evolve"  # plan/check never touched the table
    assert [c["path"] for c in result["tables"][0]["plan"]["changes"]] == [["note"]]
    output, failed = check_command(config, str(schemas), fmt="junit")
    cases = ET.fromstring(output).find("testsuite").findall("testcase")
    assert not failed and cases[0].find("failure") is None
    assert cases[1].find("skipped") is not None  # data-dependent table name cannot be planned offline
