"""Lag as the tables have it, on the real stack: `icerouter status` (text and JSON), the consumer group
(what Kafka's tools read: AdminClient offsets and watermarks) and the tables (DuckDB) agree

- on a topic a transactional producer wrote (every transaction ends in a commit marker, so a
  partition's end offset is one past its last record), an upsert table among its tables;
- after the checkpoint is lost (batch ids start again at 0), with new records since;
- during a backfill stopped half way (a route added, the job killed), and once it finished;
- the live job's partition lag metric, caught up on the transactional topic.

One job, one topic, the real `icerouter run` process, broker, registry, Spark and a SQLite
catalog (the status arithmetic runs over the catalog grid in test_status.py, without Spark).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys

import pytest
import yaml
from confluent_kafka import IsolationLevel, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

import router.cli.demo_data as data
from router.catalog import load_table
from router.config import load_config
from router.devstack._proc import free_port
from router.progress import stored_progress
from tests.duckdb_reader import connect
from tests.router.driver.test_consumer_group import group_offsets
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run, _wait
from tests.router.driver.test_metrics_e2e import scrape

pytestmark = pytest.mark.slow

KEYS = 10  # the upsert table's keys: it holds KEYS live rows whatever was added


def produce_in_transactions(bootstrap: str, topic: str, encode, first: int, count: int, per_tx: int,
                            poison: bool = False) -> None:
    """`count` orders (id `first`..) round-robin over 2 partitions, `per_tx` per transaction, each
    transaction ending in a commit marker; `poison`: one record that is not framed, in its own."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"tx-{topic}-{first}",
                         "linger.ms": 5})
    producer.init_transactions(30)
    for start in range(first, first + count, per_tx):
        producer.begin_transaction()
        for i in range(start, min(start + per_tx, first + count)):
            producer.produce(topic, value=encode(data.order(i)), partition=i % 2)
        producer.commit_transaction(30)
    if poison:
        producer.begin_transaction()
        producer.produce(topic, value=b"not framed", partition=1)
        producer.commit_transaction(30)
    assert producer.flush(30) == 0


def broker_ends(bootstrap: str, topic: str) -> dict[str, int]:
    """read_committed end offsets (the last stable offset), as the job reads."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_offsets({TopicPartition(topic, p): OffsetSpec.latest() for p in (0, 1)},
                                 isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=15)
    return {f"{tp.topic}/{tp.partition}": f.result().offset for tp, f in futures.items()}


def live_rows(catalog, table: str) -> int:
    location = load_table(catalog, table, refresh=True).metadata_location.removeprefix("file://")
    return connect().execute(f"SELECT count(*) FROM iceberg_scan('{location}')").fetchone()[0]


def status(path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", "status", "--config", str(path), *args],
                          capture_output=True, text=True, timeout=120)


def agree(path, bootstrap: str, topic: str, tables: dict[str, int]) -> dict:
    """status, group and tables when the job is caught up: lag 0 everywhere, the group at the broker's
    end offsets (past the markers), each table's rows as DuckDB counts them (`tables`: name -> rows)."""
    config = load_config(path)
    ends = broker_ends(bootstrap, topic)
    out = status(path, "--format", "json", "--max-lag", "0")
    assert out.returncode == 0, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    assert doc["partitions"] == {k: {"end": e, "next": e, "settled": e, "lag": 0} for k, e in ends.items()}, \
        (doc["partitions"], ends)
    assert doc["total_lag"] == 0
    listed = {t["table"]: t for t in doc["tables"]}
    for name, rows in tables.items():
        assert listed[name]["rows"] == rows == live_rows(config.catalog, name), (name, listed[name], rows)
        assert set(listed[name]["lag"].values()) == {0}, listed[name]
    assert group_offsets(bootstrap, config.job.group_id) == ends
    text = status(path, "--max-lag", "0")
    assert text.returncode == 0 and "lag: 0 records over 2 partitions" in text.stdout, text.stdout
    return doc


def test_status_group_and_tables_agree_on_markers_a_lost_checkpoint_and_a_backfill(
        tmp_path, kafka_bootstrap, registry_url, unique_name):
    prefix = unique_name("lag")
    topic = f"{prefix}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    raw, latest, copy = f"{prefix}_raw.orders", f"{prefix}_raw.latest", f"{prefix}_an.copy"
    config = {
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic],
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": prefix, "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                   "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_an", f"{prefix}_ops"]},
        "routes": [{"name": "raw", "topic": topic, "table": raw},
                   {"name": "latest", "topic": topic, "table": latest, "mode": "upsert", "key": ["id"],
                    "columns": ["id", "amount"]}],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    catalog = load_config(path).catalog

    # ids repeat every KEYS records in the upsert table: 40 rows added, KEYS live
    produce_in_transactions(kafka_bootstrap, topic, lambda r: encode({**r, "id": r["id"] % KEYS}), 0, 40, 7,
                            poison=True)
    # the first run lives (its metrics are served while it runs), then stops on SIGTERM
    port = free_port()
    config["job"]["metrics"] = {"port": port, "host": "127.0.0.1"}
    config["job"]["trigger_seconds"] = 1
    path.write_text(yaml.safe_dump(config))
    ends = broker_ends(kafka_bootstrap, topic)
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "run", "--config", str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def caught_up() -> bool:  # the metric and the group both at 0 lag
            lag = {f"{topic}/{labels[0][1]}": v for (name, labels), v in scrape(port).items()
                   if name == "icerouter_partition_lag_records"}
            return lag == dict.fromkeys(ends, 0) and group_offsets(kafka_bootstrap, f"job_{prefix}") == ends

        _wait(caught_up, 240, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
    assert proc.returncode == 0
    agree(path, kafka_bootstrap, topic, {raw: 40, latest: KEYS})
    del config["job"]["metrics"], config["job"]["trigger_seconds"]
    path.write_text(yaml.safe_dump(config))

    # the checkpoint lost; new records (no dead letter among them) since
    produce_in_transactions(kafka_bootstrap, topic, lambda r: encode({**r, "id": r["id"] % KEYS}), 40, 20, 6)
    shutil.rmtree(tmp_path / "checkpoint")
    second = _run(path, "--available-now")
    assert second.returncode == 0, second.stderr[-3000:]
    agree(path, kafka_bootstrap, topic, {raw: 60, latest: KEYS})

    # a route added; its backfill stopped half way (the job killed after its 4th table commit)
    config["routes"].append({"name": "copy", "topic": topic, "table": copy})
    config["kafka"]["max_records_per_batch"] = 10
    path.write_text(yaml.safe_dump(config))
    crashed = _run(path, "--available-now", env={"ICEROUTER_CRASH_AT": "commit:4",
                                                 "ICEROUTER_CRASH_DIR": str(tmp_path)})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    ends = broker_ends(kafka_bootstrap, topic)
    held = stored_progress(load_table(catalog, copy, refresh=True), f"job_{prefix}")["offsets"]
    left = {key: end - held.get(key, 0) for key, end in ends.items()}
    assert 0 < sum(left.values()) < 60 + 4, (left, ends)
    assert live_rows(catalog, copy) < 60
    out = status(path, "--format", "json", "--max-lag", "0")
    assert out.returncode == 1, out.stdout + out.stderr
    doc = json.loads(out.stdout)
    # the partitions lag by what the backfill has to read; the job's read position (the group's) is the end
    assert doc["partitions"] == {k: {"end": e, "next": e - left[k], "settled": e, "lag": left[k]}
                                 for k, e in ends.items()}, (doc["partitions"], left)
    listed = {t["table"]: t for t in doc["tables"]}
    assert listed[copy]["lag"] == listed[copy]["backfill"] == left
    assert listed[copy]["rows"] == live_rows(catalog, copy)
    assert set(listed[raw]["lag"].values()) == {0} and listed[raw]["backfill"] == {}
    assert doc["total_lag"] == sum(left.values())
    assert group_offsets(kafka_bootstrap, f"job_{prefix}") == ends  # documented: the group stays at the read position
    text = status(path, "--max-lag", str(max(left.values()) - 1))
    assert text.returncode == 1 and f"lag: {sum(left.values()):,} records over 2 partitions" in text.stdout
    assert f"{copy}: " in text.stdout and f"({sum(left.values())} of them a backfill has to read)" in text.stdout

    finished = _run(path, "--available-now")
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert f"backfill of {copy}: {sum(left.values())} of {sum(left.values())} records read" in finished.stderr, \
        finished.stderr[-3000:]
    assert f"backfill of {raw}" not in finished.stderr  # it stood past the cursor only by its markers
    doc = agree(path, kafka_bootstrap, topic, {raw: 60, latest: KEYS, copy: 60})
    assert {t["table"]: t["backfill"] for t in doc["tables"]}[copy] == {}
