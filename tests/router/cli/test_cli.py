"""The `icerouter` command line, in-process and as a real process: exit codes and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET

import pyarrow as pa
import pytest
import yaml
from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry import SchemaRegistryClient

from router.cli import main

V1 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "qty", "type": "int"}]})
V2 = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "long"}, {"name": "qty", "type": "long"},
    {"name": "note", "type": ["null", "string"], "default": None}]})
BREAK = json.dumps({"type": "record", "name": "Order", "fields": [
    {"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]})


def icerouter(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def setup(tmp_path, registry_url, unique_name):
    """A registry subject at v1, a table created from v1 with one row, and a config routing the topic."""
    from pyiceberg.catalog.sql import SqlCatalog

    topic = unique_name("orders")
    client = SchemaRegistryClient({"url": registry_url})
    client.register_schema(f"{topic}-value", RegistrySchema(V1, "AVRO"))
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "w").as_uri()}
    catalog = SqlCatalog("cli", **props)
    catalog.create_namespace("raw")
    table = catalog.create_table(f"raw.{topic}", schema=pa.schema([("id", pa.int64()), ("qty", pa.int32())]))
    table.append(pa.table({"id": pa.array([1], pa.int64()), "qty": pa.array([2], pa.int32())}))
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [topic]},
        "registry": {"url": registry_url},
        "catalog": {"name": "cli", "properties": props},
        "routes": [{"name": "raw", "topic": topic, "table": "raw.{topic}"}],
        "evolution": {"default": {"type_change": "dlq"}},
    }))
    return topic, client, config, tmp_path


def test_plan_in_process_text_and_exit_codes(setup, capsys):
    topic, client, config, tmp = setup
    client.register_schema(f"{topic}-value", RegistrySchema(V2, "AVRO"))
    assert main(["plan", "--config", str(config), "--subject", f"{topic}-value"]) == 0
    out = capsys.readouterr().out
    assert f"raw.{topic}" in out and "note" in out and "qty" in out
    bad = tmp / "break.avsc"
    bad.write_text(BREAK)
    assert main(["plan", "--config", str(config), "--schema-file", str(bad), "--table", f"raw.{topic}",
                 "--topic", topic, "--format", "json"]) == 1
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans[0]["blocked"] and plans[0]["violations"][0]["path"] == ["id"]


def test_check_end_to_end_junit(setup):
    topic, client, config, tmp = setup
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}-value.avsc").write_text(V2)
    ok = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "junit")
    assert ok.returncode == 0, ok.stderr
    suite = ET.fromstring(ok.stdout).find("testsuite")
    assert suite.get("failures") == "0" and len(suite.findall("testcase")) >= 1

    (schemas / f"{topic}-value.avsc").write_text(BREAK)
    failed = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "junit")
    assert failed.returncode == 1
    suite = ET.fromstring(failed.stdout).find("testsuite")
    assert int(suite.get("failures")) >= 1
    assert suite.find("testcase").find("failure") is not None
    # nothing was changed by plan or check
    from pyiceberg.catalog.sql import SqlCatalog

    cfg = yaml.safe_load(config.read_text())
    table = SqlCatalog("cli", **cfg["catalog"]["properties"]).load_table(f"raw.{topic}")
    assert [f.name for f in table.schema().fields] == ["id", "qty"]


@pytest.mark.parametrize("args, message", [
    (["plan", "--config", "/nonexistent.yaml", "--subject", "s"], "config file not found"),
    (["run"], "the following arguments are required: --config"),
    (["bogus"], "invalid choice"),
    (["pack", "--output", "/nonexistent-dir/env.tar.gz"], "cannot write /nonexistent-dir/env.tar.gz: directory "
                                                         "/nonexistent-dir does not exist"),
])
def test_usage_and_config_errors_exit_2_with_one_line(args, message):
    result = icerouter(*args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_invalid_config_key_is_reported_with_its_path(tmp_path):
    config = tmp_path / "bad.yaml"
    config.write_text("kafka: {bootstrap_servers: b, topics: [a], colour: red}\nregistry: {url: http://x}\n")
    result = icerouter("plan", "--config", str(config), "--subject", "s")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        "icerouter: error: kafka: unknown key 'colour' (allowed: bootstrap_servers, client, topics, pattern, "
        "starting_offsets, max_records_per_batch, catch_up)")


def _rewrite(config, **changes):
    cfg = yaml.safe_load(config.read_text())
    for key, value in changes.items():
        cfg[key] = value
    config.write_text(yaml.safe_dump(cfg))
    return cfg


def test_plan_subject_with_version(setup, capsys):
    topic, client, config, tmp = setup
    client.register_schema(f"{topic}-value", RegistrySchema(V2, "AVRO"))
    assert main(["plan", "--config", str(config), "--subject", f"{topic}-value:1", "--format", "json"]) == 0
    v1_plan = json.loads(capsys.readouterr().out)["plans"][0]
    assert v1_plan["changes"] == [c for c in v1_plan["changes"] if c["path"][0].startswith("_kafka_")]
    assert main(["plan", "--config", str(config), "--subject", f"{topic}-value:2", "--format", "json"]) == 0
    v2_plan = json.loads(capsys.readouterr().out)["plans"][0]
    assert {"note", "qty"} <= {c["path"][0] for c in v2_plan["changes"]}
    assert main(["plan", "--config", str(config), "--subject", f"{topic}-value:9"]) == 2
    assert f"--subject {topic}-value:9: not found in the registry" in capsys.readouterr().err


def test_plan_schema_file_follows_the_route_policy_like_check(setup):
    topic, client, config, tmp = setup
    _rewrite(config, routes=[{"name": "raw", "topic": topic, "table": "raw.{topic}", "evolution": "freeze"}])
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)
    plan = icerouter("plan", "--config", str(config), "--schema-file", str(schemas / f"{topic}.avsc"),
                     "--table", f"raw.{topic}", "--format", "json")
    check = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "json")
    assert (plan.returncode, check.returncode) == (1, 1), plan.stderr + check.stderr
    planned = json.loads(plan.stdout)["plans"][0]
    checked = json.loads(check.stdout)["results"][0]["tables"][0]["plan"]
    assert planned["status"] == checked["status"] == "failed"
    assert planned["policy"] == checked["policy"] and planned["policy"]["new_column"] == "freeze"
    assert planned["violations"] == checked["violations"]


def test_check_ignores_columns_the_route_projects_away(setup):
    topic, client, config, tmp = setup
    _rewrite(config, routes=[{"name": "raw", "topic": topic, "table": "raw.{topic}", "columns": ["id", "qty"]}],
             tables={"metadata_columns": False})
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)  # adds `note`, widens qty
    result = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "json")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)["results"][0]["tables"][0]["plan"]
    assert [c["path"] for c in plan["changes"]] == [["qty"]]  # no `note`: the table never gets it


def test_registry_unreachable_is_could_not_decide_exit_3(setup):
    topic, client, config, tmp = setup
    _rewrite(config, registry={"url": "http://ci:hunter2@127.0.0.1:9", "retry_attempts": 1},
             routes=[{"name": "raw", "topic": f"{topic}|other", "table": "raw.{topic}"}])
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)
    (schemas / "other.avsc").write_text(V2)
    result = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "junit")
    assert result.returncode == 3
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("icerouter: error: could not reach the schema registry at http://ci:******@127.0.0.1:9")
    assert "hunter2" not in result.stderr + result.stdout
    suite = ET.fromstring(result.stdout).find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "2")
    plan = icerouter("plan", "--config", str(config), "--subject", f"{topic}-value")
    assert plan.returncode == 3 and "could not reach the schema registry at http://ci:******@127.0.0.1:9" in plan.stderr
    assert "Traceback" not in plan.stderr and "hunter2" not in plan.stderr


def test_postgres_catalog_unreachable_is_could_not_decide_exit_3(setup, postgres_uri):
    topic, client, config, tmp = setup
    from sqlalchemy.engine import make_url

    down = make_url(postgres_uri).set(port=9, password="s3cret-pw")
    _rewrite(config, catalog={"name": "down", "properties": {
        "type": "sql", "uri": down.render_as_string(hide_password=False), "warehouse": (tmp / "w2").as_uri()}})
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)
    result = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "json")
    assert result.returncode == 3, result.stderr
    assert "could not reach the Iceberg catalog 'down' at postgresql" in result.stderr
    assert ":******@" in result.stderr and "s3cret-pw" not in result.stderr + result.stdout
    report = json.loads(result.stdout)
    assert report["exit_code"] == 3 and report["results"][0]["compatibility"] == "compatible"
    assert report["results"][0]["tables"][0]["verdict"] == "undecided"
    plan = icerouter("plan", "--config", str(config), "--subject", f"{topic}-value")
    assert plan.returncode == 3 and "could not reach the Iceberg catalog 'down'" in plan.stderr


def test_read_only_commands_never_create_a_catalog(setup, kafka_bootstrap):
    """A mistyped SQLite catalog path: status, dlq list / summary / replay, plan and check say so in
    one line naming the catalog and exit 3; none creates the file, its folder or the warehouse."""
    topic, client, config, tmp = setup
    typo = tmp / "typo"
    _rewrite(config, catalog={"name": "mistyped", "properties": {
        "type": "sql", "uri": f"sqlite:///{typo / 'c.db'}", "warehouse": (tmp / "typo-wh").as_uri()}},
        dlq={"table": "ops.dead_letters"}, kafka={"bootstrap_servers": kafka_bootstrap, "topics": [topic]})
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)
    client.register_schema(f"{topic}-value", RegistrySchema(V2, "AVRO"))
    commands = [("status",), ("status", "--format", "json"), ("dlq", "list"), ("dlq", "summary"),
                ("dlq", "replay", "--all"), ("dlq", "replay", "--all", "--dry-run"),
                ("plan", "--subject", f"{topic}-value"), ("check", "--schemas", str(schemas))]
    for command in commands:
        result = icerouter(*command, "--config", str(config))
        assert result.returncode == 3, (command, result.stderr)
        assert result.stderr.splitlines() == [f"icerouter: error: the Iceberg catalog 'mistyped' at "
                                              f"sqlite:///{typo / 'c.db'} does not exist (no file {typo / 'c.db'}): "
                                              "check catalog.properties.uri (the job's first run creates it)"], command
        assert not typo.exists() and not (tmp / "typo-wh").exists(), command


def test_bad_schema_files_and_table_names_are_named_in_the_message(setup):
    topic, client, config, tmp = setup
    schemas = tmp / "schemas"
    schemas.mkdir()
    (schemas / f"{topic}.avsc").write_text(V2)
    binary = schemas / "blob.avsc"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    check = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "junit")
    assert check.returncode == 1, check.stderr
    cases = ET.fromstring(check.stdout).find("testsuite").findall("testcase")
    blob = next(c for c in cases if c.get("classname") == "blob-value")
    assert str(binary) in blob.find("failure").text and "not UTF-8" in blob.find("failure").text
    assert any(c.get("classname") == f"{topic}-value" and c.find("failure") is None for c in cases)

    plan = icerouter("plan", "--config", str(config), "--schema-file", str(binary), "--table", f"raw.{topic}")
    assert plan.returncode == 1 and str(binary) in plan.stderr and "not UTF-8" in plan.stderr  # as check: blocked
    assert len(plan.stderr.strip().splitlines()) == 1
    plan = icerouter("plan", "--config", str(config), "--schema-file", str(schemas / f"{topic}.avsc"),
                     "--table", "orders")
    assert plan.returncode == 2 and "Traceback" not in plan.stderr
    assert plan.stderr.strip().splitlines()[-1] == (
        "icerouter: error: --table 'orders': give the table with its namespace, e.g. raw.orders")


def test_help_documents_exit_codes():
    result = icerouter("check", "--help")
    assert result.returncode == 0
    assert "3  could not decide" in result.stdout and "1  blocked" in result.stdout


RECURSIVE = json.dumps({"type": "record", "name": "Node", "fields": [
    {"name": "id", "type": "long"}, {"name": "next", "type": ["null", "Node"], "default": None}]})
YAML = "type: record\nname: Order\nfields:\n" + "".join(f"  - name: f{i}\n    type: long\n" for i in range(400))
BAD_INPUTS = {  # file content -> what the one stderr line must say
    "recursive": (RECURSIVE, "recursive type 'Node' cannot be flattened"),
    "yaml": (YAML, "is not JSON (line 1, column 1: Expecting value)"),
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe", "is not UTF-8 text"),
    "empty": ("  \n", "is empty"),
}


@pytest.mark.parametrize("kind", list(BAD_INPUTS))
def test_bad_schema_input_one_verdict_in_plan_and_check(setup, kind):
    """The same verdict (blocked, exit 1), one stderr line naming the file, well-formed JSON on stdout."""
    topic, client, config, tmp = setup
    content, says = BAD_INPUTS[kind]
    schemas = tmp / "schemas"
    schemas.mkdir()
    path = schemas / f"{topic}.avsc"
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    plan = icerouter("plan", "--config", str(config), "--schema-file", str(path), "--table", f"raw.{topic}",
                     "--format", "json")
    check = icerouter("check", "--config", str(config), "--schemas", str(schemas), "--format", "json")
    for run in (plan, check):
        assert run.returncode == 1, run.stderr
        [line] = run.stderr.strip().splitlines()  # one line: no pyiceberg INFO, no traceback
        assert line.startswith(f"icerouter: error: schema file {path}") and says in line and len(line) < 300
    planned = json.loads(plan.stdout)
    assert planned["verdict"] == "blocked" and planned["errors"] == [line.removeprefix("icerouter: error: ")]
    [violation] = planned["plans"][0]["violations"]
    assert violation["kind"] == "invalid_schema" and says in violation["reason"]
    [result] = json.loads(check.stdout)["results"]
    assert result["verdict"] == "blocked" and says in result["problem"]
    assert result["tables"][0]["table"] == f"raw.{topic}"  # the routed table is named, not "(no routed tables)"
    assert result["tables"][0]["plan"]["violations"] == planned["plans"][0]["violations"]
    # the registry is asked only about a schema document: never about bytes that are not one
    assert (result["compatibility"] == "not_asked") is (kind != "recursive")
    text = icerouter("check", "--config", str(config), "--schemas", str(schemas))
    assert text.returncode == 1 and "BLOCKED by " in text.stdout and f"table raw.{topic} (blocked)" in text.stdout
