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
                 "--format", "json"]) == 1
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
        "starting_offsets, max_records_per_batch)")
