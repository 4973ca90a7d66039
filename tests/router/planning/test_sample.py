"""`icerouter plan --sample TOPIC`: a topic without a registry planned from its latest records, decoded
as the job decodes them (a real broker, the registry emulator, a SQLite catalog, the CLI process)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from router.catalog import get_catalog
from router.config import load_config
from tests.router.executor.test_partition import make_dispatcher, run_batch
from tests.router.executor.test_upsert import kafka_batch


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
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
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
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
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
