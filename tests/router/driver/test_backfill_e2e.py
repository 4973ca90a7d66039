"""A route added to a job whose topic stays quiet, and a table rolled back to an older snapshot: the
restarted job backfills them, in batches of at most `kafka.max_records_per_batch`, whether the
backlog fits in one batch or not, survives a crash halfway, and writes nothing twice (the real
`icerouter run` process, broker, registry, Spark, a SQLite catalog; DuckDB reads the tables back)."""

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


def produce_orders(kafka_bootstrap: str, registry_url: str, topic: str, first: int, count: int,
                   create: bool = False) -> None:
    if create:
        admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(15)
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for i in range(first, first + count):
        producer.produce(topic, value=encode(data.order(i)), partition=i % 2)
    assert producer.flush(30) == 0


def job_config(tmp_path, prefix: str, kafka_bootstrap: str, registry_url: str, topic: str, raw: str,
               limit: int | None) -> dict:
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    kafka = {"bootstrap_servers": kafka_bootstrap, "topics": [topic],
             "client": {"receive.message.max.bytes": 1_000_000_000}}
    if limit:
        kafka["max_records_per_batch"] = limit
    return {
        "kafka": kafka,
        "registry": {"url": registry_url},
        "catalog": {"name": "bf", "properties": props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_an", f"{prefix}_ops"]},
        "routes": [{"name": "raw", "topic": topic, "table": raw}],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }


def test_a_new_route_on_a_quiet_topic_is_backfilled_in_bounded_batches(tmp_path, kafka_bootstrap, registry_url,
                                                                       unique_name):
    """A backlog larger than the limit, and the job killed halfway through it: the restart goes on."""
    prefix = unique_name("bf")
    topic = f"{prefix}.orders"
    produce_orders(kafka_bootstrap, registry_url, topic, 0, RECORDS, create=True)
    raw, copy = f"{prefix}_raw.orders", f"{prefix}_an.orders_copy"
    config = job_config(tmp_path, prefix, kafka_bootstrap, registry_url, topic, raw, LIMIT)
    catalog = CatalogConfig("bf", config["catalog"]["properties"])
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    first = _run(path, "--available-now")
    assert first.returncode == 0, first.stderr[-3000:]
    every = sorted((i % 2, i // 2) for i in range(RECORDS))
    assert offsets(catalog, raw) == every

    config["routes"].append({"name": "copy", "topic": topic, "table": copy})  # nothing new on the topic
    path.write_text(yaml.safe_dump(config))
    # killed after its 4th table commit (each batch commits the copy and the dead-letter table's progress)
    crashed = _run(path, "--available-now", env={"ICEROUTER_CRASH_AT": "commit:4", "ICEROUTER_CRASH_DIR": str(tmp_path)})
    assert crashed.returncode == -9, crashed.stderr[-3000:]
    assert f"backfill of {copy}: {RECORDS} records to read" in crashed.stderr
    left = RECORDS - len(offsets(catalog, copy))
    assert 0 < left < RECORDS  # halfway
    second = _run(path, "--available-now")  # goes on from the checkpoint's cursor
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"backfill of {copy}: {left} records to read" in second.stderr, second.stderr[-3000:]
    assert f"backfill of {copy}: {left} of {left} records read" in second.stderr, second.stderr[-3000:]
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


def _snapshots_with_rows(catalog: CatalogConfig, table: str) -> list:
    return [s for s in load_table(catalog, table, refresh=True).snapshots()
            if int(s.summary.additional_properties.get("added-records", 0))]


def test_backlogs_within_one_batch_run_for_a_new_route_and_a_rolled_back_table(tmp_path, kafka_bootstrap,
                                                                               registry_url, unique_name):
    """The usual case: `max_records_per_batch` left at its default, each backlog far below it, the
    topic quiet. A new route's table is filled, then a table rolled back to an older snapshot gets
    its missing rows again, each exactly once, and the start and last lines say how many."""
    prefix = unique_name("bq")
    topic = f"{prefix}.orders"
    raw, copy = f"{prefix}_raw.orders", f"{prefix}_an.orders_copy"
    config = job_config(tmp_path, prefix, kafka_bootstrap, registry_url, topic, raw, None)
    catalog = CatalogConfig("bf", config["catalog"]["properties"])
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    produce_orders(kafka_bootstrap, registry_url, topic, 0, 80, create=True)
    assert _run(path, "--available-now").returncode == 0
    produce_orders(kafka_bootstrap, registry_url, topic, 80, 40)
    assert _run(path, "--available-now").returncode == 0
    every = sorted((i % 2, i // 2) for i in range(120))
    assert offsets(catalog, raw) == every

    config["routes"].append({"name": "copy", "topic": topic, "table": copy})  # nothing new on the topic
    path.write_text(yaml.safe_dump(config))
    added = _run(path, "--available-now")
    assert added.returncode == 0, added.stderr[-3000:]
    assert f"backfill of {copy}: 120 records to read ({topic}/0 0..60, {topic}/1 0..60)" in added.stderr
    assert f"backfill of {copy}: 120 of 120 records read" in added.stderr
    assert offsets(catalog, copy) == every and offsets(catalog, raw) == every

    first = _snapshots_with_rows(catalog, raw)[0]  # the first 80 records
    load_table(catalog, raw, refresh=True).manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    assert len(offsets(catalog, raw)) == 80
    restored = _run(path, "--available-now")
    assert restored.returncode == 0, restored.stderr[-3000:]
    assert f"backfill of {raw}: 40 records to read ({topic}/0 40..60, {topic}/1 40..60)" in restored.stderr
    assert f"backfill of {raw}: 40 of 40 records read" in restored.stderr
    assert offsets(catalog, raw) == every  # the 40 back, none twice
    assert offsets(catalog, copy) == every  # and the other table untouched
