"""A route added to a job whose topic stays quiet: the restarted job backfills the new table, in
batches of at most `kafka.max_records_per_batch`, and writes nothing twice (the real `icerouter run`
process, broker, registry, Spark, a SQLite catalog; DuckDB reads the tables back)."""

from __future__ import annotations

import json

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import router.cli.demo_data as data
from router.catalog import load_table
from router.config import CatalogConfig
from tests.duckdb_reader import connect
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run

pytestmark = pytest.mark.slow

RECORDS, LIMIT = 240, 50


def offsets(catalog: CatalogConfig, table: str) -> list[tuple]:
    location = load_table(catalog, table, refresh=True).metadata_location.removeprefix("file://")
    return sorted(connect().execute(
        f"SELECT _kafka_partition, _kafka_offset FROM iceberg_scan('{location}')").fetchall())


def test_a_new_route_on_a_quiet_topic_is_backfilled_in_bounded_batches(tmp_path, kafka_bootstrap, registry_url,
                                                                       unique_name):
    prefix = unique_name("bf")
    topic = f"{prefix}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, value=encode(data.order(i)), partition=i % 2)
    assert producer.flush(30) == 0

    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    catalog = CatalogConfig("bf", props)
    raw, copy = f"{prefix}_raw.orders", f"{prefix}_an.orders_copy"
    config = {
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic], "max_records_per_batch": LIMIT,
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": "bf", "properties": props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_an", f"{prefix}_ops"]},
        "routes": [{"name": "raw", "topic": topic, "table": raw}],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    first = _run(path, "--available-now")
    assert first.returncode == 0, first.stderr[-3000:]
    every = sorted((i % 2, i // 2) for i in range(RECORDS))
    assert offsets(catalog, raw) == every

    config["routes"].append({"name": "copy", "topic": topic, "table": copy})  # nothing new on the topic
    path.write_text(yaml.safe_dump(config))
    second = _run(path, "--available-now")
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"new table {copy}" in second.stderr
    assert offsets(catalog, copy) == every  # backfilled although the topic stayed quiet
    assert offsets(catalog, raw) == every   # and nothing written twice to the old table
    added = [int(s.summary["added-records"]) for s in load_table(catalog, copy, refresh=True).snapshots()
             if "added-records" in s.summary.additional_properties]
    assert sum(added) == RECORDS and max(added) <= LIMIT and len(added) >= RECORDS // LIMIT, added

    third = _run(path, "--available-now")  # caught up: no batch reads it again
    assert third.returncode == 0, third.stderr[-3000:]
    assert offsets(catalog, copy) == every and offsets(catalog, raw) == every
    status = json.loads((tmp_path / "checkpoint" / "offsets" / max(
        (f for f in (tmp_path / "checkpoint" / "offsets").iterdir() if f.name.isdigit()),
        key=lambda f: int(f.name)).name).read_text().splitlines()[-1])
    assert not any(k.startswith("#rewind:") for k in status)  # every cursor closed
