"""A live job's offsets in its Kafka consumer group: after `icerouter run --available-now` against
the real broker, registry, Spark and a SQLite catalog, what Kafka's tools read from the group
(confluent-kafka's `list_consumer_group_offsets`) matches the tables and `icerouter status`.

One topic of two partitions fans out to two tables; the last record of partition 1 is poison
(a dead letter), so there the group stands one past the tables' own offsets, at the dead-letter
table's settled offset.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import router.cli.demo_data as data
from router.catalog import load_table
from router.config import load_config
from router.progress import stored_progress
from tests.router.driver.test_consumer_group import group_offsets
from tests.router.driver.test_job_e2e import LOCAL_SPARK

pytestmark = pytest.mark.slow

PER_PARTITION = 20


def test_group_offsets_of_a_live_job_match_the_tables(tmp_path, kafka_bootstrap, registry_url, unique_name):
    prefix = unique_name("cg")
    topic = f"{prefix}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for i in range(2 * PER_PARTITION):
        producer.produce(topic, value=encode(data.order(i)), partition=i % 2)
    producer.produce(topic, value=b"not framed", partition=1)  # offset PER_PARTITION of p1: a dead letter
    assert producer.flush(30) == 0
    orders, copy, dlq = f"{prefix}_raw.orders", f"{prefix}_raw.copy", f"{prefix}_ops.dead_letters"
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic],
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": prefix, "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                   "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "trigger_seconds": 1,
                "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_ops"]},
        "routes": [{"name": "all", "topic": rf"{prefix}\.orders", "table": orders},
                   {"name": "copy", "topic": rf"{prefix}\.orders", "table": copy, "columns": ["id", "amount"]}],
        "dlq": {"table": dlq},
    }))
    run = subprocess.run([sys.executable, "-m", "router.cli", "run", "--config", str(path), "--available-now"],
                         capture_output=True, text=True, timeout=400)
    assert run.returncode == 0, run.stderr[-3000:]
    config = load_config(path)

    group = group_offsets(kafka_bootstrap, config.job.group_id)
    p0, p1 = f"{topic}/0", f"{topic}/1"
    assert group == {p0: PER_PARTITION, p1: PER_PARTITION + 1}
    held = {t: stored_progress(load_table(config.catalog, t, refresh=True), config.job.name)["offsets"]
            for t in (orders, copy)}
    settled = stored_progress(load_table(config.catalog, dlq, refresh=True), config.job.name)["settled"]
    assert held[orders] == held[copy] == {p0: PER_PARTITION, p1: PER_PARTITION}  # fan-out: both tables alike
    assert settled == group  # the poison record of p1 is settled as a dead letter
    assert group[p0] == min(h[p0] for h in held.values())  # where every record reached its tables

    status = subprocess.run([sys.executable, "-m", "router.cli", "status", "--config", str(path), "--format",
                             "json", "--max-lag", "0", "--max-dead-letters", "1"], capture_output=True, text=True,
                            timeout=120)
    assert status.returncode == 0, status.stdout + status.stderr
    doc = json.loads(status.stdout)
    assert {k: p["next"] for k, p in doc["partitions"].items()} == group
    assert {k: p["lag"] for k, p in doc["partitions"].items()} == {p0: 0, p1: 0}
    assert doc["dead_letters"]["by_reason"] == {"wire_format": 1} and doc["dead_letters"]["by_topic"] == {topic: 1}
