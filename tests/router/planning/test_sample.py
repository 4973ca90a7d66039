"""`icerouter plan --sample TOPIC`: a topic without a registry planned from its latest records, decoded
as the job decodes them (a real broker, the registry emulator, a SQLite catalog, the CLI process)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Producer

import router.cli.demo_cdc as cdc
from router.catalog import get_catalog, load_table
from router.changes.envelope import missing_key_reason
from router.config import load_config
from router.devstack.catalog import sqlite_catalog_properties
from tests.router.executor.test_partition import make_dispatcher, run_batch
from tests.router.executor.test_upsert import kafka_batch
from tests.router.source.kafka_helpers import create_topics


def _produce(bootstrap: str, topic: str, docs: list) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for d in docs:
        producer.produce(topic, value=d if isinstance(d, bytes) else json.dumps(d).encode())
    assert producer.flush(30) == 0


def _plan(path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", "plan", "--config", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def test_plan_samples_a_json_topic_then_sees_the_evolution(tmp_path, kafka_bootstrap, registry_url, unique_name):
    ns = unique_name("ps")
    topic = f"{ns}.clicks"
    create_topics(kafka_bootstrap, {}, [topic], 1)
    props = sqlite_catalog_properties(str(tmp_path))
    config = {"kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic]}, "registry": {"url": registry_url},
              "catalog": {"name": "ps", "properties": props}, "tables": {"allowed_namespaces": [ns]},
              "routes": [{"name": "clicks", "topic": topic, "table": f"{ns}.clicks", "format": "json"}],
              "dlq": {"table": f"{ns}.dead_letters"}}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    _produce(kafka_bootstrap, topic, [{"user": f"u{i}", "price": 1.5, "page": {"path": "/"}} for i in range(30)]
             + [b"{not json"])

    get_catalog(load_config(path).catalog)  # the job's first run creates the catalog; plan never does
    first = _plan(path, "--sample", topic, "--format", "json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    [plan] = out["plans"]
    assert plan["table"] == f"{ns}.clicks" and plan["new_table"] and not plan["blocked"]
    assert "price: optional double" in plan["target_schema"] and "page: optional struct" in plan["target_schema"]
    assert any("1 sampled record(s) would be dead-lettered: decode_error: invalid JSON" in n for n in out["notes"])

    # the job writes the table; new records bring a new key and a long where the table has a double
    dispatcher = make_dispatcher(load_config(path).catalog, registry_url, ns, config["routes"])
    run_batch(dispatcher, [kafka_batch([(topic, 0, 0, None, json.dumps({"user": "a", "price": 1.5}).encode())])], 0)
    _produce(kafka_bootstrap, topic, [{"user": "z", "price": 2, "referrer": "x"} for _ in range(10)])
    second = _plan(path, "--sample", topic, "--records", "10")
    assert second.returncode == 0, second.stderr
    assert "+ referrer: optional string" in second.stdout and "~ price" not in second.stdout, second.stdout
    assert "dead-lettered" not in second.stdout  # the bad record is older than the sample

    _produce(kafka_bootstrap, topic, [{"user": 7, "price": 1.0} for _ in range(10)])  # user: string -> long
    third = _plan(path, "--sample", topic, "--records", "6", "--format", "json")
    assert third.returncode == 1, third.stderr  # a type change the default policy dead-letters: blocked
    assert json.loads(third.stdout)["plans"][0]["violations"][0]["path"] == ["user"]


def test_plan_sample_of_a_missing_topic_is_a_usage_error(tmp_path, kafka_bootstrap, registry_url):
    config = {"kafka": {"bootstrap_servers": kafka_bootstrap, "topics": ["nope"]}, "registry": {"url": registry_url},
              "routes": [{"name": "r", "table": "raw.{topic}", "format": "json"}]}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    result = _plan(path, "--sample", "no-such-topic-here")
    assert result.returncode == 2 and "no such topic" in result.stderr and "Traceback" not in result.stderr


def test_check_gates_a_routes_declared_json_schema(tmp_path, registry_url, unique_name):
    """`icerouter check` on the new version of a route's schema_file: no subject to ask, the tables decide."""
    ns = unique_name("cd")
    v1 = {"type": "object", "required": ["id"], "properties": {"id": {"type": "integer"}, "amount": {"type": "number"}}}
    (tmp_path / "payments.json").write_text(json.dumps(v1))
    props = sqlite_catalog_properties(str(tmp_path))
    route = {"name": "payments", "topic": "payments", "table": f"{ns}.payments",
             "format": {"type": "json", "schema_file": "payments.json"}}
    config = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": ["payments"]}, "registry": {"url": registry_url},
              "catalog": {"name": "cd", "properties": props}, "tables": {"allowed_namespaces": [ns]},
              "routes": [route], "dlq": {"table": f"{ns}.dead_letters"}}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    dispatcher = make_dispatcher(load_config(path).catalog, registry_url, ns, [
        {**route, "format": {"type": "json", "schema_file": str(tmp_path / "payments.json")}}])
    run_batch(dispatcher, [kafka_batch([("payments", 0, 0, None, json.dumps({"id": 1, "amount": 2.5}).encode())])], 0)

    def check(v2: dict) -> subprocess.CompletedProcess:
        schemas = tmp_path / "schemas"
        schemas.mkdir(exist_ok=True)
        (schemas / "payments.json").write_text(json.dumps(v2))
        return subprocess.run([sys.executable, "-m", "router.cli", "check", "--config", str(path), "--schemas",
                               str(schemas), "--format", "json"], capture_output=True, text=True, timeout=120)

    added = check({**v1, "properties": {**v1["properties"], "currency": {"type": "string"}}})
    assert added.returncode == 0, added.stdout + added.stderr
    [result] = json.loads(added.stdout)["results"]
    assert result["compatibility"] == "declared" and result["tables"][0]["table"] == f"{ns}.payments"
    assert result["tables"][0]["plan"]["changes"][0]["path"] == ["currency"]

    retyped = check({**v1, "properties": {**v1["properties"], "amount": {"type": "string"}}})
    assert retyped.returncode == 1, retyped.stdout + retyped.stderr
    assert json.loads(retyped.stdout)["results"][0]["blocked_by"] == [f"table {ns}.payments (blocked)"]


def _fields(schema_text: str) -> list[tuple[str, str, str]]:
    """(name, required|optional, type) of the top-level columns of a schema as plan prints it."""
    return [m.groups() for m in re.finditer(r"^  \d+: (\S+): (required|optional) (.+)$", schema_text, re.M)]


KEYED = {  # an upsert route without `key`, over each unframed format whose Kafka keys carry the key
    "connect-json-debezium": ({"format": "connect_json", "cdc": "debezium"}, cdc.DebeziumJsonEncoder(schemas=True)),
    "json-debezium": ({"format": "json", "cdc": "debezium"}, cdc.DebeziumJsonEncoder(schemas=False)),
    "flattened-json": ({"format": "json", "cdc": "debezium", "sequence_by": "__source_lsn"},
                       cdc.FlattenedJsonEncoder()),
    "json-upsert": ({"format": "json", "mode": "upsert"}, None),
}


@pytest.mark.parametrize("case", list(KEYED))
def test_plan_sample_keys_an_unframed_upsert_route_as_the_job_does(case, tmp_path, kafka_bootstrap, registry_url,
                                                                    unique_name):
    """No registry subject for the key: plan --sample decodes the sampled Kafka keys as the job does and
    plans the table the job then creates: the key columns required, the table's identifier fields."""
    ns = unique_name("pk")
    topic = f"{ns}.customers"
    create_topics(kafka_bootstrap, {}, [topic], 1)
    settings, encode = KEYED[case]
    script = cdc.ChangeScript(seed=3)
    events = list(script.snapshot(12)) + list(script.mixed(12))
    if encode is None:  # plain JSON keys and rows
        messages = [(json.dumps(e.key).encode(), json.dumps({**e.value["after"], "updated_at": 1}).encode())
                    for e in events if e.value is not None and e.value["after"] is not None]
    else:
        messages = [encode(topic, e)[1:3] for e in events]
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0
    props = sqlite_catalog_properties(str(tmp_path))
    route = {"name": "mirror", "topic": topic, "table": f"{ns}.customers", **settings}
    config = {"kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic]},
              "catalog": {"name": "pk", "properties": props}, "tables": {"allowed_namespaces": [ns]},
              "routes": [route], "dlq": {"table": f"{ns}.dead_letters"}}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    get_catalog(load_config(path).catalog)  # the job's first run creates the catalog

    planned = _plan(path, "--sample", topic, "--format", "json")
    assert planned.returncode == 0, planned.stderr
    out = json.loads(planned.stdout)
    [plan] = out["plans"]
    assert plan["new_table"] and not plan["blocked"], plan
    assert not any("-key" in note for note in out["notes"] + plan["notes"]), out
    assert any(note.startswith("upsert by id") for note in plan["notes"]), plan["notes"]

    dispatcher = make_dispatcher(load_config(path).catalog, registry_url, ns, [route])
    _, report = run_batch(dispatcher, [kafka_batch([(topic, 0, i, k, v) for i, (k, v) in enumerate(messages)])], 0)
    assert not report.failed, report.failed
    created = load_table(load_config(path).catalog, f"{ns}.customers", refresh=True).schema()
    assert created.identifier_field_names() == {"id"}
    assert _fields(plan["target_schema"]) == [
        (f.name, "required" if f.required else "optional", str(f.field_type)) for f in created.fields]
    assert ("id", "required", "long") in _fields(plan["target_schema"])


def test_plan_sample_of_an_upsert_route_whose_keys_name_no_column(tmp_path, kafka_bootstrap, unique_name):
    """Kafka keys that are no record (not JSON at all): the job dead-letters the records (missing_key);
    the plan says so instead of planning a table without a key."""
    ns = unique_name("pn")
    topic = f"{ns}.items"
    create_topics(kafka_bootstrap, {}, [topic], 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(5):
        producer.produce(topic, key=b"not json", value=json.dumps({"id": i}).encode())
    assert producer.flush(30) == 0
    props = sqlite_catalog_properties(str(tmp_path))
    config = {"kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic]},
              "catalog": {"name": "pn", "properties": props}, "tables": {"allowed_namespaces": [ns]},
              "routes": [{"name": "items", "topic": topic, "table": f"{ns}.items", "format": "json", "mode": "upsert"}]}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    get_catalog(load_config(path).catalog)
    planned = _plan(path, "--sample", topic, "--format", "json")
    assert planned.returncode == 1, planned.stderr
    [violation] = json.loads(planned.stdout)["plans"][0]["violations"]
    assert (violation["kind"], violation["outcome"]) == ("missing_key", "dlq")
    assert violation["reason"] == missing_key_reason(f"{ns}.items")


def test_plan_samples_a_variant_route_and_its_drift_changes_nothing(tmp_path, kafka_bootstrap, unique_name):
    """The sampled records decode as the job decodes them (registry/json_variant.py): the payload is one
    variant column whatever its shape, and after the job wrote the table a new shape plans no change."""
    ns = unique_name("pv")
    topic = f"{ns}.events"
    create_topics(kafka_bootstrap, {}, [topic], 1)
    props = sqlite_catalog_properties(str(tmp_path))
    route = {"name": "events", "topic": topic, "table": f"{ns}.events", "format_version": 3,
             "format": {"type": "json", "variant": ["payload"]}}
    config = {"kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic]},
              "catalog": {"name": "pv", "properties": props}, "tables": {"allowed_namespaces": [ns]},
              "routes": [route], "dlq": {"table": f"{ns}.dead_letters"}}
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    _produce(kafka_bootstrap, topic, [{"id": i, "payload": {"a": i}} for i in range(5)])
    get_catalog(load_config(path).catalog)
    first = _plan(path, "--sample", topic, "--format", "json")
    assert first.returncode == 0, first.stderr
    [plan] = json.loads(first.stdout)["plans"]
    assert plan["new_table"] and "payload: optional variant" in plan["target_schema"]

    dispatcher = make_dispatcher(load_config(path).catalog, "http://127.0.0.1:1", ns, config["routes"])
    _, report = run_batch(dispatcher, [kafka_batch([(topic, 0, 0, None, json.dumps({"id": 1, "payload": {"a": 1}})
                                                     .encode())])], 0)
    assert not report.failed
    _produce(kafka_bootstrap, topic, [{"id": 9, "payload": s} for s in ("text", [1, {"b": None}], 2.5)])
    second = _plan(path, "--sample", topic, "--records", "3", "--format", "json")
    assert second.returncode == 0, second.stderr
    [plan] = json.loads(second.stdout)["plans"]
    assert not plan["changes"] and not plan["violations"] and not plan["new_table"], plan
