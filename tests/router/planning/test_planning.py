"""`plan` / `check` library code against the real registry (full and strict API) and SQLite / PostgreSQL catalogs."""
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
from registry.client import CachedRegistry
from registry.config import RegistryConfig
from router.config import parse_config
from router.exceptions import ConfigError
from router.planning.check import (
    check_command, check_schema, exit_code, render_check_json, render_check_junit, render_check_text,
)
from router.planning.plan import (
    Planner, Target, detect_schema_type, parse_subject, plan_command, plan_for_schema, render_plan_json,
    render_plan_text, subject_topic,
)
from router.planning.services import CatalogReader


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


@pytest.fixture(params=["sqlite", "postgres"])
def plan_catalog(request, tmp_path, unique_name):
    """(catalog, namespace, tmp_path) on a SQLite catalog, then on a PostgreSQL one (same properties
    in the configs the commands load: ``catalog_props(tmp_path)``)."""
    uri = f"sqlite:///{tmp_path}/c.db" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    (tmp_path / "catalog.uri").write_text(uri)
    catalog = SqlCatalog("plan", uri=uri, warehouse=f"file://{tmp_path}/w")
    ns = unique_name("ns")
    catalog.create_namespace(ns)
    return catalog, ns, tmp_path


def catalog_props(tmp_path) -> dict:
    return {"type": "sql", "uri": (tmp_path / "catalog.uri").read_text(), "warehouse": f"file://{tmp_path}/w"}


@pytest.fixture
def client(registry_api_url) -> SchemaRegistryClient:
    """A client of the session registry, then of the strict emulator (per-version endpoint only)."""
    return SchemaRegistryClient({"url": registry_api_url})


@pytest.fixture
def registry(registry_api_url) -> CachedRegistry:
    return CachedRegistry(RegistryConfig(registry_api_url, retry_backoff_seconds=0.01))


def planner_for(tmp_path, registry_url: str, **tables) -> Planner:
    """A planner with the job's settings; metadata columns off so plans show only the schema's own."""
    return Planner(parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": ["t"]},
                                 "registry": {"url": registry_url},
                                 "tables": {"metadata_columns": False, **tables}}, source=tmp_path / "r.yaml"))


def make_table(catalog, identifier: str, schema_str: str):
    plan = plan_for_schema(catalog, identifier, schema_str)
    table = catalog.create_table(identifier, schema=plan.target)
    table.append(pa.Table.from_pylist([{"id": 1, "total": 9.5}], schema=iceberg_to_arrow(table.schema())))
    return table


def test_plan_for_new_and_existing_table(plan_catalog) -> None:
    catalog, ns, _ = plan_catalog
    new = plan_for_schema(catalog, f"{ns}.orders", V1)
    assert new.new_table and new.status == "create" and not new.blocked
    make_table(catalog, f"{ns}.orders", V1)
    evolve = plan_for_schema(catalog, f"{ns}.orders", V2_ADD)
    assert [c.describe() for c in evolve.changes] == ["+ note: optional string"]
    broken = plan_for_schema(catalog, f"{ns}.orders", V3_BREAK,
                             policy=EvolutionPolicy(type_change=Mode.FREEZE))
    assert broken.failed and not (new.blocked or evolve.blocked)
    text = render_plan_text([evolve, broken])
    assert f"table {ns}.orders: evolve" in text and "! id: type_change" in text
    data = json.loads(render_plan_json([evolve, broken]))
    assert data["blocked"] is True
    assert [p["status"] for p in data["plans"]] == ["evolve", "failed"]
    # nothing was written by planning
    assert [f.name for f in catalog.load_table(f"{ns}.orders").schema().fields] == ["id", "total"]


def test_plan_json_schema(plan_catalog) -> None:
    catalog, ns, _ = plan_catalog
    plan = plan_for_schema(catalog, f"{ns}.events", JSON_V1, "JSON")
    assert [(f.name, str(f.field_type)) for f in plan.target.fields] == [("id", "long"), ("at", "timestamptz")]


def test_check_new_subject_is_not_an_error(registry, registry_api_url, plan_catalog, unique_name) -> None:
    catalog, ns, tmp_path = plan_catalog
    subject = f"{unique_name('orders')}-value"
    result = check_schema(registry, subject, V1, "AVRO", [Target(f"{ns}.orders", EvolutionPolicy())],
                          planner_for(tmp_path, registry_api_url), catalog=CatalogReader(catalog))
    assert result.compatibility == "new" and result.ok and result.verdict == "ok"
    assert result.tables[0].plan.new_table
    assert exit_code([result]) == 0


def test_check_compatible_and_incompatible(client, registry, registry_api_url, plan_catalog, unique_name) -> None:
    catalog, ns, tmp_path = plan_catalog
    subject = f"{unique_name('orders')}-value"
    client.register_schema(subject, RegistrySchema(V1, "AVRO"))
    make_table(catalog, f"{ns}.orders", V1)
    tables = [Target(f"{ns}.orders", EvolutionPolicy()), Target(f"{ns}.orders_copy", EvolutionPolicy())]
    planner, reader = planner_for(tmp_path, registry_api_url), CatalogReader(catalog)

    good = check_schema(registry, subject, V2_ADD, "AVRO", tables, planner, catalog=reader)
    assert good.compatibility == "compatible" and good.ok
    assert good.level == client.get_compatibility()
    assert [c.describe() for c in good.tables[0].plan.changes] == ["+ note: optional string"]
    assert good.tables[1].plan.new_table

    bad = check_schema(registry, subject, V3_BREAK, "AVRO", tables, planner, catalog=reader)
    assert bad.compatibility == "incompatible" and not bad.ok and bad.verdict == "blocked"
    assert bad.messages and bad.messages[0].startswith("version 1: ")  # the registry says why
    assert bad.tables[0].plan.blocked
    assert exit_code([good, bad]) == 1

    text = render_check_text([good, bad])
    assert f"subject {subject} (AVRO): OK" in text and f"subject {subject} (AVRO): BLOCKED" in text
    data = json.loads(render_check_json([good, bad]))
    assert data["ok"] is False and data["exit_code"] == 1 and data["results"][1]["compatibility"] == "incompatible"

    suite = ET.fromstring(render_check_junit([good, bad])).find("testsuite")
    cases = suite.findall("testcase")
    assert suite.get("tests") == "4" and suite.get("failures") == "2" and suite.get("errors") == "0"
    assert [(c.get("classname"), c.get("name"), c.find("failure") is not None) for c in cases] == [
        (subject, f"{ns}.orders", False), (subject, f"{ns}.orders_copy", False),
        (subject, f"{ns}.orders", True), (subject, f"{ns}.orders_copy", True)]


def test_check_uses_subject_level_and_every_version_when_transitive(client, registry, registry_api_url, plan_catalog,
                                                                     unique_name) -> None:
    catalog, ns, tmp_path = plan_catalog
    planner, reader = planner_for(tmp_path, registry_api_url), CatalogReader(catalog)
    subject = f"{unique_name('orders')}-value"
    client.register_schema(subject, RegistrySchema(V1, "AVRO"))
    client.set_compatibility(subject, "NONE")
    result = check_schema(registry, subject, V3_BREAK, "AVRO", [Target(f"{ns}.orders", EvolutionPolicy())],
                          planner, catalog=reader)
    assert result.level == "NONE" and result.compatibility == "compatible"
    assert result.ok  # the registry accepts it, and the table does not exist yet
    # v2 (id: string) registered under NONE; v1 (id: long) stays: only a transitive level sees it
    client.register_schema(subject, RegistrySchema(V3_BREAK, "AVRO"))
    also_string = avro({"name": "id", "type": "string"}, {"name": "total", "type": "double"},
                       {"name": "note", "type": ["null", "string"], "default": None})
    client.set_compatibility(subject, "BACKWARD")
    assert check_schema(registry, subject, also_string, "AVRO", [], planner).compatibility == "compatible"
    client.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    transitive = check_schema(registry, subject, also_string, "AVRO", [], planner)
    assert (transitive.compatibility, transitive.level) == ("incompatible", "BACKWARD_TRANSITIVE")
    assert [m.split(":")[0] for m in transitive.messages] == ["version 1"]


def test_check_unmappable_schema_fails_the_table(registry, registry_api_url, tmp_path, unique_name) -> None:
    recursive = json.dumps({"type": "record", "name": "Node", "fields": [
        {"name": "next", "type": ["null", "Node"]}]})
    result = check_schema(registry, f"{unique_name('n')}-value", recursive, "AVRO",
                          [Target("db.nodes", EvolutionPolicy())], planner_for(tmp_path, registry_api_url))
    assert result.compatibility == "new" and not result.ok
    assert "recursive" in result.problem and result.blocked_by == [f"table db.nodes (blocked)"]
    [violation] = result.tables[0].plan.violations
    assert violation.kind == "invalid_schema" and "recursive" in violation.reason
    junit = ET.fromstring(render_check_junit([result]))
    assert junit.find("testsuite").get("failures") == "1"
    failure = junit.find("testsuite").find("testcase").find("failure")
    assert failure.text.count("db.nodes") == 1  # the table is named once


def test_helpers() -> None:
    assert subject_topic("orders-value") == "orders" and subject_topic("plain") == "plain"
    assert parse_subject("orders-value") == ("orders-value", "latest")
    assert parse_subject("orders-value:3") == ("orders-value", 3)
    assert parse_subject("orders-value:latest") == ("orders-value", "latest")
    assert parse_subject(":.ctx:orders-value") == (":.ctx:orders-value", "latest")  # a context, no version
    with pytest.raises(ConfigError, match="versions start at 1"):
        parse_subject("orders-value:0")
    assert detect_schema_type(V1, ".json") == "AVRO"
    assert detect_schema_type(JSON_V1, ".json") == "JSON"
    assert detect_schema_type('"string"', ".avsc") == "AVRO"


def _config(tmp_path, registry_url, ns: str, topic: str, **evolution):
    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [topic]},
        "registry": {"url": registry_url},
        "catalog": {"name": "plan", "properties": catalog_props(tmp_path)},
        "routes": [{"name": "main", "topic": topic, "table": f"{ns}.{{topic}}"},
                   {"name": "by_tenant", "topic": topic, "table": f"{ns}.{{header.tenant}}"}],
        "tables": {"metadata_columns": False},
        "evolution": evolution or None,
    })


def test_plan_and_check_commands(client, registry_api_url, plan_catalog, unique_name) -> None:
    catalog, ns, tmp_path = plan_catalog
    topic = unique_name("orders")
    client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
    make_table(catalog, f"{ns}.{topic}", V1)
    config = _config(tmp_path, registry_api_url, ns, topic, default={"type_change": "freeze"})

    client.register_schema(f"{topic}-value", RegistrySchema(V2_ADD, "AVRO"))
    output, blocked, problems = plan_command(config, subjects=[f"{topic}-value"], fmt="text")
    assert problems == []
    assert not blocked
    assert f"table {ns}.{topic}: evolve" in output and "+ note: optional string" in output
    assert "route by_tenant: table name depends on record data" in output

    schema_file = tmp_path / "orders.avsc"
    schema_file.write_text(V3_BREAK)
    output, blocked, _ = plan_command(config, schema_file=str(schema_file), table=f"{ns}.{topic}", fmt="json",
                                      topic=topic)
    assert blocked and json.loads(output)["plans"][0]["status"] == "failed"

    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V3_BREAK)
    output, code, unreachable = check_command(config, str(schemas), fmt="junit")
    assert (code, unreachable) == (1, [])
    cases = ET.fromstring(output).find("testsuite").findall("testcase")
    assert [c.get("name") for c in cases] == [f"{ns}.{topic}", "route by_tenant"]
    assert cases[0].find("failure") is not None  # registry: incompatible, table: type change frozen
    assert cases[1].find("failure").get("message") == "registry: incompatible at BACKWARD"

    (schemas / f"{topic}.avsc").write_text(V2_ADD)
    output, code, _ = check_command(config, str(schemas), fmt="json")
    assert code == 0
    result = json.loads(output)["results"][0]
    assert result["compatibility"] == "compatible"
    assert result["tables"][0]["plan"]["status"] == "evolve"  # plan/check never touched the table
    assert [c["path"] for c in result["tables"][0]["plan"]["changes"]] == [["note"]]
    output, code, _ = check_command(config, str(schemas), fmt="junit")
    cases = ET.fromstring(output).find("testsuite").findall("testcase")
    assert code == 0 and cases[0].find("failure") is None
    assert cases[1].find("skipped") is not None  # data-dependent table name cannot be planned offline


def test_check_junit_for_every_verdict_kind(client, registry_api_url, plan_catalog, unique_name) -> None:
    catalog, ns, tmp_path = plan_catalog
    fine, broken, frozen, fresh = (unique_name(n) for n in ("fine", "broken", "frozen", "fresh"))
    for topic in (fine, broken, frozen):
        client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
        make_table(catalog, f"{ns}.{topic}", V1)
    raw = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [fine, broken, frozen, fresh]},
           "registry": {"url": registry_api_url, "retry_attempts": 1},
           "catalog": {"name": "plan", "properties": catalog_props(tmp_path)},
           "tables": {"metadata_columns": False},
           "routes": [{"name": "frozen", "topic": frozen, "table": f"{ns}.{{topic}}", "evolution": "freeze"},
                      {"name": "main", "topic": f"(?!{frozen}).*", "table": f"{ns}.{{topic}}"}]}
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    for topic, text in ((fine, V2_ADD), (broken, V3_BREAK), (frozen, V2_ADD), (fresh, V1)):
        (schemas / f"{topic}.avsc").write_text(text)
    output, code, unreachable = check_command(parse_config(raw), str(schemas), fmt="junit")
    assert (code, unreachable) == (1, [])
    suite = ET.fromstring(output).find("testsuite")
    assert [suite.get(k) for k in ("tests", "failures", "errors", "skipped")] == ["4", "2", "0", "0"]
    cases = {c.get("classname"): c for c in suite.findall("testcase")}
    assert set(cases) == {f"{t}-value" for t in (fine, broken, frozen, fresh)}
    ok = cases[f"{fine}-value"]
    assert ok.find("failure") is None and ok.find("error") is None
    assert ok.find("system-out").text.startswith("registry: compatible at ") and "+ note" in ok.find("system-out").text
    by_registry = cases[f"{broken}-value"].find("failure")
    assert by_registry.get("message").startswith("registry: incompatible at ") and "version 1: BACKWARD: " in by_registry.text
    by_table = cases[f"{frozen}-value"].find("failure")
    assert by_table.get("message") == f"table {ns}.{frozen}: failed"
    assert "new_column" in by_table.text and by_table.text.count(f"{ns}.{frozen}") == 1
    new = cases[f"{fresh}-value"]
    assert new.find("failure") is None and new.find("system-out").text.startswith("registry: new")
    assert f"table {ns}.{fresh}: create" in new.find("system-out").text

    # registry down: what only the registry could tell is undecided; a table the policy blocks stays blocked
    raw["registry"]["url"] = "http://127.0.0.1:9"
    output, code, unreachable = check_command(parse_config(raw), str(schemas), fmt="junit")
    assert code == 1 and len(unreachable) == 1
    suite = ET.fromstring(output).find("testsuite")
    assert [suite.get(k) for k in ("tests", "failures", "errors")] == ["4", "2", "2"]  # both tables refuse
    for topic in (broken, frozen):
        (schemas / f"{topic}.avsc").unlink()
    output, code, unreachable = check_command(parse_config(raw), str(schemas), fmt="junit")
    assert code == 3 and len(unreachable) == 1
    assert unreachable[0].startswith("could not reach the schema registry at http://127.0.0.1:9: ")
    suite = ET.fromstring(output).find("testsuite")
    assert [suite.get(k) for k in ("tests", "failures", "errors")] == ["2", "0", "2"]
    errors = [c.find("error") for c in suite.findall("testcase")]
    assert all(e is not None and e.get("type") == "undecided" for e in errors)
    assert all(e.get("message").startswith("could not decide: registry: undecided") for e in errors)
    assert "could not reach the schema registry at http://127.0.0.1:9" in errors[0].text
