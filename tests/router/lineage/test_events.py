"""OpenLineage events without Spark: dataset naming, the events' shape against the spec's schemas,
the background sender (bounded, never raising), and secrets left out."""

from __future__ import annotations

import functools
import json
import re
import time

import jsonschema
import pytest
from openlineage.client.serde import Serde
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType, StructType

from router.config import parse_config
from router.lineage.emitter import JobLineage, Sender, command_lineage
from router.lineage.events import input_datasets, output_dataset, run_event
from router.lineage.naming import kafka_namespace, table_dataset, table_sources
from tests.router.lineage.schema import validate_event

BASE = {
    "kafka": {"bootstrap_servers": "SASL_SSL://broker-1.example:9093,broker-2.example:9093",
              "topics": ["orders.eu", "orders.us", "payments"],
              "client": {"sasl.username": "u", "sasl.password": "hunter2"}},
    "registry": {"url": "http://127.0.0.1:8081"},
    "catalog": {"name": "lake", "properties": {"uri": "postgresql+psycopg2://ice:hunter2@db:5432/cat",
                                               "warehouse": "s3://lake/wh"}},
    "tables": {"allowed_namespaces": ["raw", "all"]},
    "routes": [{"name": "raw", "topic": r"orders\..*", "table": "raw.{topic}"},       # one table per topic
               {"name": "all", "topic": r"orders\..*|payments", "table": "all.events"}],  # fan-in
}


def config(**lineage):
    return parse_config({**BASE, "lineage": lineage or {"transport": {"type": "console"}}})


def as_json(event) -> dict:
    return json.loads(Serde.to_json(event))


def test_kafka_and_table_names_follow_the_spec_and_carry_no_secret():
    assert kafka_namespace("SASL_SSL://broker-1.example:9093,broker-2:9093") == "kafka://broker-1.example:9093"
    assert kafka_namespace("localhost") == "kafka://localhost:9092"
    c = config()
    assert table_dataset(c.catalog, "raw.orders_eu") == ("iceberg://lake", "raw.orders_eu")
    rest = parse_config({**BASE, "catalog": {"name": "r", "properties": {
        "type": "rest", "uri": "https://user:pw@polaris.example/api/catalog?token=x"}}})
    assert table_dataset(rest.catalog, "a.b") == ("https://polaris.example:443", "a.b")
    glue = parse_config({**BASE, "catalog": {"name": "g", "properties": {"type": "glue", "glue.region": "eu-west-1",
                                                                         "glue.id": "123"}}})
    assert table_dataset(glue.catalog, "db.t") == ("arn:aws:glue:eu-west-1:123", "table/db/t")


def test_table_sources_show_fan_out_and_fan_in():
    sources = table_sources(config(), ["orders.eu", "orders.us", "payments"])
    assert sources == {"raw.orders_eu": {"orders.eu"}, "raw.orders_us": {"orders.us"},
                       "all.events": {"orders.eu", "orders.us", "payments"}}


def test_events_validate_against_the_spec_and_hold_no_secret():
    c = config()
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                    NestedField(3, "addr", StructType(NestedField(4, "city", StringType()))),
                    NestedField(5, "_kafka_offset", LongType()))
    out = output_dataset(c, "all.events", schema, ["orders.eu", "payments"], ["added column name"], 7)
    for state, error in (("START", None), ("RUNNING", None), ("COMPLETE", None), ("FAIL", "boom")):
        event = as_json(run_event(state, "0192f7a4-6f5e-7c1e-8b35-0d2c1b0b6a11", c, "job", streaming=True,
                                  inputs=input_datasets(c, ["orders.eu", "payments"]), outputs=[out], error=error))
        validate_event(event)
        text = json.dumps(event)
        assert "hunter2" not in text and "sasl" not in text and "postgresql" not in text
    facets = event["outputs"][0]["facets"]
    assert [f["name"] for f in facets["schema"]["fields"]] == ["id", "name", "addr", "_kafka_offset"]
    assert facets["schema"]["fields"][2]["fields"][0]["name"] == "city"
    assert {f["name"] for f in facets["columnLineage"]["fields"]["name"]["inputFields"]} == {"orders.eu", "payments"}
    assert facets["columnLineage"]["fields"]["_kafka_offset"]["inputFields"][0]["field"] == "offset"
    assert facets["icerouter_schemaChange"]["changes"] == ["added column name"]
    assert event["run"]["facets"]["errorMessage"]["message"] == "boom"
    # and the validation refuses what the specification does not allow
    for path, value in ((("eventTime",), "yesterday"), (("run", "runId"), "run-1"), (("eventType",), "DONE"),
                        (("outputs", 0, "facets", "schema", "_producer"), None),
                        (("outputs", 0, "facets", "columnLineage", "fields", "name", "inputFields", 0, "field"), None),
                        (("outputs", 0, "facets", "icerouter_schemaChange", "changes"), "added column name")):
        broken = json.loads(json.dumps(event))
        *parents, last = path
        holder = functools.reduce(lambda node, step: node[step], parents, broken)
        if value is None:
            del holder[last]
        else:
            holder[last] = value
        with pytest.raises(jsonschema.ValidationError):
            validate_event(broken)


class Recorder:
    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.events, self.delay, self.fail = [], delay, fail

    def emit(self, event):
        time.sleep(self.delay)
        if self.fail:
            raise ConnectionError("receiver down")
        self.events.append(as_json(event))


def test_the_job_run_names_new_tables_once_and_ends_complete(tmp_path):
    c = parse_config({**BASE, "catalog": {"name": "lake", "properties": {
        "uri": f"sqlite:///{tmp_path}/c.db", "warehouse": (tmp_path / "wh").as_uri()}},
        "lineage": {"transport": {"type": "console"}}})
    recorder = Recorder()
    run = JobLineage(c, Sender(c, client=recorder))
    run.start()
    run.batch(0, ["raw.orders_eu", "all.events"], ["orders.eu"])  # the START named them: no event
    run.batch(1, ["raw.orders_eu", "all.events"], ["orders.eu"])
    run.batch(2, ["all.events"], ["payments"], {"all.events": ["added column amount"]})
    run.finish()
    kinds = [e["eventType"] for e in recorder.events]
    assert kinds == ["START", "RUNNING", "COMPLETE"]
    assert len({e["run"]["runId"] for e in recorder.events}) == 1
    for event in recorder.events:
        validate_event(event)
    start = recorder.events[0]
    assert {d["name"] for d in start["inputs"]} == {"orders.eu", "orders.us", "payments"}
    assert {d["name"] for d in start["outputs"]} == {"raw.orders_eu", "raw.orders_us", "all.events",
                                                     "ops.dead_letters"}
    evolved = recorder.events[1]["outputs"][0]
    assert evolved["name"] == "all.events" and evolved["facets"]["icerouter_schemaChange"]["batchId"] == 2


def test_a_slow_or_failing_receiver_never_holds_up_or_fails_the_caller():
    c = config(transport={"type": "console"}, queue_size=2)
    slow = Sender(c, client=Recorder(delay=0.5))
    started = time.perf_counter()
    accepted = [slow.submit(lambda: [run_event("START", "0192f7a4-6f5e-7c1e-8b35-0d2c1b0b6a11", c, "j",
                                               streaming=True)]) for _ in range(10)]
    assert time.perf_counter() - started < 0.2  # submit never waits
    assert accepted.count(False) == slow.dropped >= 7
    failing = Sender(c, client=Recorder(fail=True))
    failing.submit(lambda: [run_event("START", "0192f7a4-6f5e-7c1e-8b35-0d2c1b0b6a11", c, "j", streaming=True)])
    failing.submit(lambda: 1 / 0)  # a builder that raises
    failing.close()
    assert failing.failed == 2 and failing.sent == 0
    slow.close(0.1)


def test_a_command_run_ends_with_fail_when_the_command_raises(monkeypatch):
    c = config()
    recorder = Recorder()
    monkeypatch.setattr("router.lineage.emitter.make_client", lambda transport: recorder)
    monkeypatch.setattr("router.lineage.emitter._outputs", lambda config, tables, *a, **k: [])
    with pytest.raises(RuntimeError):
        with command_lineage(c, "maintain", inputs=lambda: []):
            raise RuntimeError("catalog away")
    assert [e["eventType"] for e in recorder.events] == ["START", "FAIL"]
    assert recorder.events[0]["job"]["name"] == "icerouter.maintain"
    with command_lineage(None, "maintain") as run:  # a dry run: nothing sent
        assert run.outputs == []


@pytest.mark.parametrize("lineage, message", [
    ({"transport": {"type": "smoke"}}, "lineage.transport.type: 'smoke' is not one of http, file, console, kafka"),
    ({"transport": {"type": "http"}}, "lineage.transport.url: required by the http transport"),
    ({"transport": {"type": "http", "url": "marquez:5000"}}, "must start with http:// or https://"),
    ({"transport": {"type": "file", "path": "x"}}, "lineage.transport: unknown key 'path'"),
    ({"transport": {"type": "kafka", "topic": "ol", "config": {"acks": "all"}}}, "needs bootstrap.servers"),
    ({"transport": {"type": "console"}, "queue_size": 0}, "lineage.queue_size: must be > 0"),
    ({"endpoint": "x"}, "lineage: unknown key 'endpoint'"),
])
def test_the_lineage_section_is_validated_at_load(lineage, message):
    from router.exceptions import ConfigError

    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_config({**BASE, "lineage": lineage})


def test_lineage_is_off_by_default_and_its_secrets_never_show():
    assert not parse_config(BASE).lineage.enabled
    c = parse_config({**BASE, "lineage": {"transport": {"type": "http", "url": "https://u:pw@gms.example",
                                                        "auth": {"type": "api_key", "apiKey": "tok-123"}}}})
    assert c.lineage.enabled and "tok-123" not in repr(c.lineage) and "pw@" not in repr(c.lineage)
