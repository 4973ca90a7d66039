"""`icerouter maintain` as a lineage run of its own, on the file transport: START and COMPLETE with the
maintained tables, each event valid against the spec's schemas; a dry run sends nothing."""

from __future__ import annotations

import json

import yaml
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField

from router.catalog import create_table
from router.cli import main
from router.config import load_config
from tests.router.lineage.schema import validate_event


def test_maintain_is_a_run_with_the_tables_it_maintained(tmp_path):
    events = tmp_path / "lineage.jsonl"
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["orders"]},
        "registry": {"url": "http://127.0.0.1:8081"},
        "catalog": {"name": "c", "properties": {"uri": f"sqlite:///{tmp_path}/c.db", "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"name": "orders-router"},
        "routes": [{"name": "orders", "topic": "orders", "table": "raw.orders"}],
        "lineage": {"transport": {"type": "file", "log_file_path": str(events), "append": True}},
    }))
    create_table(load_config(config).catalog, "raw.orders", Schema(NestedField(1, "id", LongType())))
    assert main(["maintain", "--config", str(config), "--table", "raw.*", "--dry-run"]) == 0
    assert not events.exists()
    assert main(["maintain", "--config", str(config), "--table", "raw.*"]) == 0
    sent = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    assert [e["eventType"] for e in sent] == ["START", "COMPLETE"]
    for event in sent:
        validate_event(event)
        assert event["job"] == {**event["job"], "namespace": "icerouter", "name": "orders-router.maintain"}
        assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [("iceberg://c", "raw.orders")]
        assert [d["name"] for d in event["inputs"]] == ["raw.orders"]
    assert sent[1]["outputs"][0]["facets"]["schema"]["fields"][0]["name"] == "id"
    assert sent[0]["job"]["facets"]["jobType"]["processingType"] == "BATCH"
