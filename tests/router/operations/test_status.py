"""`icerouter status` against a real broker and real SQLite / PostgreSQL catalogs, no Spark.

The tables are committed through the job's own commit (router/catalog/commit.py) with known
offsets, the dead-letter table with letters built as the tasks build them, the lease taken as
the job takes it; the command (a subprocess, as an operator runs it) must report each of them
and exit by the thresholds given.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow as pa
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.catalog.dead_letter_table import ensure_dead_letter_table
from router.catalog.lease import Lease, lease_table
from router.config import load_config
from router.descriptors import TableResult
from router.executor.dead_letters import DeadLetter, dead_letter_batch
from router.operations.status import breaches, job_state

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog_props(request, tmp_path) -> dict:
    if request.param == "rest":  # an Iceberg REST catalog on S3 (SeaweedFS)
        return request.getfixturevalue("object_store").rest_catalog_properties()
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()}


def write_config(tmp_path, prefix: str, bootstrap: str, props: dict, **job) -> str:
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": bootstrap, "topics": [f"{prefix}.orders", f"{prefix}.late"]},
        "registry": {"url": "http://127.0.0.1:9"},
        "catalog": {"name": prefix, "properties": props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), **job},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_ops"]},
        "routes": [{"name": "all", "topic": rf"{prefix}\.orders", "table": f"{prefix}_raw.orders"},
                   {"name": "copy", "topic": rf"{prefix}\.orders", "table": f"{prefix}_raw.copy"}],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }))
    return str(path)


def commit_rows(config, table_id: str, key: str, first: int, count: int, batch: int) -> None:
    table = load_table(config.catalog, table_id, refresh=True)
    ids = pa.array(range(first, first + count), pa.int64())
    result = TableResult(table_id, data_files=write_data_files(table, pa.table({"id": ids, "body": ids.cast(pa.string())})),
                         rows=count, offsets={key: [first, first + count - 1]})
    assert commit_table(config.catalog, result, config.job.name, batch).status == "committed"


def commit_letters(config, topic: str, offsets: list[int], settled: dict, batch: int) -> None:
    dlq = ensure_dead_letter_table(config.catalog, config.dlq.table)
    source = pa.table({"topic": [topic] * len(offsets), "partition": pa.array([0] * len(offsets), pa.int32()),
                       "offset": pa.array(offsets, pa.int64()),
                       "timestamp": pa.array([None] * len(offsets), pa.timestamp("us", tz="UTC")),
                       "key": pa.array([None] * len(offsets), pa.binary()),
                       "value": pa.array([b"bad"] * len(offsets), pa.binary()),
                       "headers": pa.array([[]] * len(offsets), pa.list_(pa.struct([("key", pa.string()),
                                                                                    ("value", pa.binary())])))})
    letters = [DeadLetter([0], "unmatched", "no route"), *[DeadLetter([i], "evolution_violation", "narrowing",
                                                                      table=f"{topic}")
                                                           for i in range(1, len(offsets))]]
    rows = dead_letter_batch(source, letters, config.job.name)
    result = TableResult(config.dlq.table, data_files=write_data_files(dlq, rows), rows=rows.num_rows,
                         settled=settled)
    from router.progress import tp_keys

    keys = tp_keys(rows.column("topic"), rows.column("partition"), rows.column("table_name"))
    for key, offset in zip(keys.to_pylist(), offsets):
        result.offsets[key] = [offset, offset]
    assert commit_table(config.catalog, result, config.job.name, batch).status == "committed"


def status(config_path: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", "status", "--config", config_path, *args],
                          capture_output=True, text=True, timeout=120)


def test_status_reports_tables_lag_lease_quarantine_and_letters(tmp_path, kafka_bootstrap, catalog_props,
                                                                 unique_name):
    prefix = unique_name("st")
    topic = f"{prefix}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    late = f"{prefix}.late"  # a topic the job never read: behind by all it holds
    for future in admin.create_topics([NewTopic(topic, 2, 1), NewTopic(late, 1, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(15):
        producer.produce(topic, value=b"x", partition=0 if i < 10 else 1)  # ends: p0 10, p1 5
    for i in range(3):
        producer.produce(late, value=b"x", partition=0)
    assert producer.flush(30) == 0
    path = write_config(tmp_path, prefix, kafka_bootstrap, catalog_props)
    config = load_config(path)
    orders, copy = f"{prefix}_raw.orders", f"{prefix}_raw.copy"
    for name in (orders, copy):
        create_table(config.catalog, name, SCHEMA)
    p0, p1 = f"{topic}/0", f"{topic}/1"
    commit_rows(config, orders, p0, 0, 6, 0)  # orders holds p0 0..5 and p1 0..4
    commit_rows(config, orders, p1, 0, 5, 1)
    commit_rows(config, copy, p0, 0, 4, 0)  # copy holds p0 0..3 only
    commit_letters(config, topic, [6, 7, 8], {p0: [0, 8], p1: [0, 4]}, 1)  # settled: p0 next 9, p1 next 5

    healthy = status(path, "--format", "json")
    assert healthy.returncode == 0, healthy.stderr
    doc = json.loads(healthy.stdout)
    tables = {t["table"]: t for t in doc["tables"]}
    assert sorted(tables) == [copy, orders]
    assert tables[orders]["rows"] == 11 and tables[orders]["data_files"] == 2 and tables[orders]["delete_files"] == 0
    # a table's lag: end minus its position, the job's read position where it is up to date (no
    # backfill of it is open): p0 10 - 9 even for copy, whose last row is at 3
    assert tables[orders]["next_offsets"] == {p0: 6, p1: 5} and tables[orders]["lag"] == {p0: 1, p1: 0}
    assert tables[copy]["lag"] == {p0: 1} and tables[copy]["batch_id"] == 0 and tables[copy]["backfill"] == {}
    stamp = load_table(config.catalog, orders, refresh=True).current_snapshot().timestamp_ms / 1000
    assert tables[orders]["last_commit"] == stamp
    # the job's next offset is the settled one: end 10 - next 9, end 5 - next 5
    assert doc["partitions"] == {p0: {"end": 10, "next": 9, "settled": 9, "lag": 1},
                                 p1: {"end": 5, "next": 5, "settled": 5, "lag": 0},
                                 f"{late}/0": {"end": 3, "next": None, "settled": None, "lag": 3}}
    assert doc["total_lag"] == 4 and doc["max_partition_lag"] == 3
    assert doc["dead_letters"]["total"] == 3
    assert doc["dead_letters"]["by_reason"] == {"evolution_violation": 2, "unmatched": 1}
    assert doc["lease"] is None and doc["quarantined"] == [] and doc["healthy"] is True

    over = status(path, "--max-lag", "0", "--max-dead-letters", "2")
    assert over.returncode == 1, over.stderr
    assert f"UNHEALTHY: lag over 0 on 2 partition(s) (worst {late}/0: 3)" in over.stdout
    assert "UNHEALTHY: 3 dead letters held (over 2)" in over.stdout
    assert f"{late}/0: end 3, never read, lag 3" in over.stdout
    assert status(path, "--max-lag", "3", "--max-dead-letters", "3").returncode == 0

    # a running job: its lease, and the tables its driver quarantined (the hand-off file of a live pid)
    lease = Lease(config.catalog, lease_table(config), config.job.name, ttl=30, settle=0)
    lease.acquire()
    handoff = tmp_path / "checkpoint" / "icerouter" / f"icerouter-{config.job.name}-{os.getpid()}.handoff.json"
    handoff.parent.mkdir(parents=True)
    handoff.write_text(json.dumps({"quarantined": [copy], "batch_id": 2}))
    state = job_state(config)
    assert state.lease["pid"] == os.getpid() and not state.lease["expired"] and state.lease["holder"] == lease.owner
    assert state.quarantined == [copy]
    assert breaches(state, max_quarantined=0) == [f"1 table(s) quarantined: {copy}"]
    assert breaches(state, require_lease=True) == []
    text = status(path, "--require-running")
    assert text.returncode == 0 and f"lease: pid {os.getpid()}" in text.stdout and f"quarantined: {copy}" in text.stdout
    lease.release()
    stopped = status(path, "--require-running")
    assert stopped.returncode == 1 and "not running (no live lease)" in stopped.stdout


def test_status_reads_by_commit_order_counts_backfills_and_lists_replayed_tables(tmp_path, kafka_bootstrap,
                                                                               catalog_props, unique_name):
    """The read position is the dead-letter table's settled offset as its latest commit left it: a
    batch without dead letters moves only its property, and a compaction of the table since (its
    snapshot carries the older summary) does not take it back; batch ids start again at 0 after a
    lost checkpoint and are not compared. A new route's table not yet written has its whole backfill
    to read: listed, counted in the partition's lag and over --max-lag. A table only `dlq replay`
    wrote is listed with the offsets it took."""
    from router.config import MaintenanceConfig
    from router.maintenance.run import maintain_table

    prefix = unique_name("sc")
    topic = f"{prefix}.orders"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1), NewTopic(f"{prefix}.late", 1, 1)]).values():
        future.result(15)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for _ in range(8):
        producer.produce(topic, value=b"x", partition=0)
    assert producer.flush(30) == 0
    path = write_config(tmp_path, prefix, kafka_bootstrap, catalog_props)
    config = load_config(path)
    orders, copy, replayed = f"{prefix}_raw.orders", f"{prefix}_raw.copy", f"{prefix}_raw.replayed"
    create_table(config.catalog, orders, SCHEMA)
    p0 = f"{topic}/0"
    commit_rows(config, orders, p0, 0, 4, 7)
    commit_letters(config, topic, [4], {p0: [0, 4]}, 7)
    commit_letters(config, topic, [5], {p0: [0, 5]}, 8)  # two small files: the compaction rewrites them
    commit_rows(config, orders, p0, 6, 1, 0)  # the checkpoint lost: batch ids start again at 0
    # batch 1 (no dead letters) read to the end: past a last offset no record stands for (a marker)
    dlq_result = TableResult(config.dlq.table, settled={p0: [6, 7]})
    assert commit_table(config.catalog, dlq_result, config.job.name, 1).status == "committed"
    report = maintain_table(load_table(config.catalog, config.dlq.table, refresh=True),
                            MaintenanceConfig(), orphans=False)
    assert report.compaction.files_removed == 2, report
    table = create_table(config.catalog, replayed, SCHEMA)
    with table.transaction() as tx:
        tx.set_properties({f"icerouter.replayed.{config.job.name}": json.dumps({p0: [[4, 5]]})})

    out = status(path, "--format", "json")
    assert out.returncode == 0 and out.stderr == "", out.stderr  # no thresholds; the start's log lines not shown
    doc = json.loads(out.stdout)
    tables = {t["table"]: t for t in doc["tables"]}
    assert sorted(tables) == [copy, orders, replayed]
    assert doc["partitions"][p0] == {"end": 8, "next": 0, "settled": 8, "lag": 8}  # copy's backfill: all 8
    assert tables[orders]["lag"] == {p0: 0} and tables[orders]["batch_id"] == 0 and tables[orders]["rows"] == 5
    assert tables[copy]["lag"] == tables[copy]["backfill"] == {p0: 8} and tables[copy]["rows"] is None
    assert tables[replayed]["replayed"] == {p0: [[4, 5]]} and tables[replayed]["batch_id"] is None
    text = status(path, "--max-lag", "7")
    assert text.returncode == 1 and f"{p0}: end 8, next 0 (read to 8, a backfill behind), lag 8" in text.stdout
    assert f"{copy}: - rows" in text.stdout and "(8 of them a backfill has to read)" in text.stdout
    assert f"{replayed}: 0 rows" in text.stdout and "2 offsets replayed" in text.stdout

    create_table(config.catalog, copy, SCHEMA)
    commit_rows(config, copy, p0, 0, 7, 2)  # the backfill done: the table stands at the read position
    doc = json.loads(status(path, "--format", "json", "--max-lag", "0").stdout)
    assert doc["partitions"][p0] == {"end": 8, "next": 8, "settled": 8, "lag": 0} and doc["healthy"]
    assert {t["table"]: t["lag"] for t in doc["tables"]}[copy] == {p0: 0}


def test_status_exit_codes_for_unreachable_services_and_bad_config(tmp_path, unique_name, kafka_bootstrap):
    prefix = unique_name("st")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    down = write_config(tmp_path, prefix, "127.0.0.1:9", props)  # nothing listens on port 9
    result = status(down)
    assert result.returncode == 3 and result.stdout == ""
    assert result.stderr.strip().startswith("icerouter: error: could not reach the Kafka brokers at 127.0.0.1:9")
    assert len(result.stderr.strip().splitlines()) == 1

    pg = {"type": "sql", "uri": "postgresql+psycopg2://u:s3cret@127.0.0.1:9/db", "warehouse": (tmp_path / "wh").as_uri()}
    (tmp_path / "pg").mkdir()
    no_catalog = write_config(tmp_path / "pg", prefix, kafka_bootstrap, pg)
    result = status(no_catalog)
    assert result.returncode == 3, result.stderr
    assert "could not reach the Iceberg catalog" in result.stderr and "127.0.0.1:9" in result.stderr
    assert "s3cret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1

    bad = tmp_path / "bad.yaml"
    bad.write_text(open(down).read().replace("trigger", "x") + "\nbogus: 1\n")
    result = status(str(bad))
    assert result.returncode == 2 and "bogus" in result.stderr
    assert status(down, "--max-lag", "-1").returncode == 2


def test_quarantine_from_the_status_file_counts_while_the_job_runs(tmp_path, kafka_bootstrap, unique_name):
    """Without a hand-off file (the driver-side source, a remote checkpoint) the status file the
    dispatcher writes names the quarantined tables; a stopped job's file is stale (a restart clears
    the quarantine), so it counts only while the job's lease is live."""
    from router.driver.status import BatchStats, write_status

    prefix = unique_name("st")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    config = load_config(write_config(tmp_path, prefix, kafka_bootstrap, props, status_file="status.json"))
    write_status(config.job.status_file, config.job.name, {}, BatchStats(3), {}, [f"{prefix}_raw.orders"])
    lease = Lease(config.catalog, lease_table(config), config.job.name, ttl=30, settle=0)
    lease.acquire()
    try:
        assert job_state(config).quarantined == [f"{prefix}_raw.orders"]
    finally:
        lease.release()
    assert job_state(config).quarantined == []
