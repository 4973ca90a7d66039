"""The streaming job end to end: real broker, registry, catalog (SQLite and PostgreSQL on local disk,
REST on S3), Spark.

One scenario, in three runs of the real `icerouter run` process:

1. 30 order topics + 3 click topics (fan-in) + a payments topic (fan-out by header
   and a projected copy) + a poison record; the job is SIGKILLed in the middle of
   its commit phase (some tables committed, the others not).
2. Restart from the checkpoint with --available-now: the replayed batch commits
   only the tables that had not committed it.
3. Continuous run: schema v2 on some topics (a new field and int -> long), a
   topic created while the job runs; then a clean stop.

DuckDB then reads every table and must find every produced (topic, partition,
offset) exactly once, and the poison records in the dead-letter table.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

import router.cli.demo_data as data
from tests.duckdb_reader import connect

pytestmark = pytest.mark.slow

ORDER_TOPICS = 30
CLICK_TOPICS = 3
PER_TOPIC = 40


LOCAL_SPARK = {"spark.master": "local[2]", "spark.driver.memory": "1g"}


def _config(tmp: Path, prefix: str, bootstrap: str, registry_url: str, catalog_props: dict,
            spark: dict | None = None, maintenance: dict | None = None) -> Path:
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "pattern": rf"{prefix}\..*",
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url, "latest_ttl_seconds": 2},
        "catalog": {"name": "e2e", "properties": catalog_props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp / "checkpoint"), "trigger_seconds": 2,
                "status_file": str(tmp / "status.json"),
                "spark": spark or LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_an", f"{prefix}_pay", f"{prefix}_ops"],
                   "partition_by": ["day(created_at)"]},
        "routes": [
            {"name": "orders", "topic": rf"{prefix}\.orders_.*", "table": f"{prefix}_raw.{{topic}}"},
            {"name": "clicks", "topic": rf"{prefix}\.clicks_.*", "table": f"{prefix}_an.clicks"},
            {"name": "by-region", "topic": rf"{prefix}\.payments", "headers": {"region": "eu|us"},
             "table": f"{prefix}_pay.{{header.region}}"},
            {"name": "payments-all", "topic": rf"{prefix}\.payments", "table": f"{prefix}_pay.all_regions",
             "columns": ["id", "amount", "created_at"]},
        ],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }
    if maintenance:
        config["maintenance"] = maintenance
    path = tmp / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(config: Path, *args: str, env: dict | None = None, timeout: float = 400,
         cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "router.cli", "run", "--config", str(config), *args],
                          env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=timeout, cwd=cwd)


class Ledger:
    """What was produced, per target table: (topic, partition, offset) of every record."""

    def __init__(self):
        self.expected: dict[str, Counter] = {}

    def produce(self, bootstrap: str, messages: list, tables_for) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
        for topic, key, value, headers in messages:
            def on_delivery(err, msg, topic=topic, headers=headers):
                assert err is None, err
                for table in tables_for(topic, headers):
                    self.expected.setdefault(table, Counter())[(msg.topic(), msg.partition(), msg.offset())] += 1
            producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
            producer.poll(0)
        assert producer.flush(30) == 0


def _read(con, table) -> list[tuple]:
    location = table.metadata_location.removeprefix("file://")
    return con.execute(f"SELECT _kafka_topic, _kafka_partition, _kafka_offset FROM iceberg_scan('{location}')"
                       ).fetchall()


@pytest.fixture
def catalog_props(request, tmp_path):
    """The SQL catalogs, one a scenario: the plain scenario on SQLite, the one that merges small
    files at every commit (more compare-and-swaps per table) on PostgreSQL (test_job_merge_e2e.py).
    The same scenario on the REST catalog with tables in S3 runs on the standalone cluster
    (test_job_cluster_e2e.py), where the executors share nothing with the driver."""
    if request.param == "sqlite":
        return {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                "warehouse": (tmp_path / "warehouse").as_uri()}
    uri = request.getfixturevalue("postgres_uri")
    return {"type": "sql", "uri": uri, "warehouse": (tmp_path / "warehouse").as_uri()}


@pytest.mark.parametrize("catalog_props", ["sqlite"], indirect=True)
def test_job_end_to_end_exactly_once(tmp_path, kafka_bootstrap, registry_url, catalog_props, unique_name):
    _exactly_once_scenario(tmp_path, kafka_bootstrap, registry_url, catalog_props, unique_name("e"))


def _exactly_once_scenario(tmp_path, kafka_bootstrap, registry_url, catalog_props, prefix, spark=None,
                           driver_env: dict | None = None, driver_cwd: Path | None = None,
                           maintenance: dict | None = None, java_reader=None):
    """`driver_env` / `driver_cwd`: the job's environment variables and working directory; `java_reader`:
    Java Iceberg reads every table too (tests/javaref/)."""
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyiceberg.catalog import load_catalog

    config = _config(tmp_path, prefix, kafka_bootstrap, registry_url, catalog_props, spark, maintenance)
    orders = [f"{prefix}.orders_{i:02d}" for i in range(ORDER_TOPICS)]
    clicks = [f"{prefix}.clicks_{i}" for i in range(CLICK_TOPICS)]
    payments = f"{prefix}.payments"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for f in admin.create_topics([NewTopic(t, 2, 1) for t in orders + clicks + [payments]]).values():
        f.result(30)

    def tables_for(topic: str, headers) -> list[str]:
        short = topic.split(".", 1)[1]
        if short.startswith("orders_"):
            return [f"{prefix}_raw.{prefix}_{short}"]
        if short.startswith("clicks_"):
            return [f"{prefix}_an.clicks"]
        region = dict(headers or [])["region"].decode()
        return [f"{prefix}_pay.{region}", f"{prefix}_pay.all_regions"]

    enc = {t: data.Encoder(data.ORDER_V1, data.register(registry_url, f"{t}-value", data.ORDER_V1))
           for t in orders + [payments]}
    click_enc = data.Encoder(data.CLICK, data.register(registry_url, f"{prefix}.clicks-value", data.CLICK))
    ledger = Ledger()
    phase1 = [(t, None, enc[t](data.order(i)), None) for t in orders for i in range(PER_TOPIC)]
    phase1 += [(clicks[i % 3], None, click_enc(data.click(i)), None) for i in range(90)]
    phase1 += [(payments, None, enc[payments](data.order(i)), [("region", (b"eu", b"us")[i % 2])])
               for i in range(60)]
    ledger.produce(kafka_bootstrap, phase1, tables_for)
    poison = [(orders[0], b"p1", b"\x00\x7f\xff\xff\x07garbage", None), (orders[1], b"p2", b"not framed", None)]
    ledger.produce(kafka_bootstrap, poison, lambda topic, headers: [f"{prefix}_ops.dead_letters"])

    # Run 1: SIGKILL after the 10th table commit of the first batch.
    crashed = _run(config, "--available-now", cwd=driver_cwd, env={
        **(driver_env or {}), "ICEROUTER_CRASH_AT": "commit:10", "ICEROUTER_CRASH_DIR": str(tmp_path)})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]

    # Run 2: restart from the checkpoint and catch up.
    caught_up = _run(config, "--available-now", env=driver_env, cwd=driver_cwd)
    assert caught_up.returncode == 0, caught_up.stderr[-3000:]
    # a checkpoint on local disk is written without Hadoop's checksum files (router/driver/session.py)
    logs = [p for p in (tmp_path / "checkpoint").rglob("*") if p.is_file()]
    assert any(p.parent.name == "offsets" for p in logs) and any(p.parent.name == "commits" for p in logs)
    assert not [p for p in logs if p.name.endswith(".crc")]

    # Run 3: continuous; v2 schema and a topic created while running.
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "run", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(driver_env or {})}, cwd=driver_cwd)
    started = time.time()
    try:
        status = tmp_path / "status.json"
        v2 = orders[:10]
        for t in v2:
            enc[(t, 2)] = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{t}-value", data.ORDER_V2))
        ledger.produce(kafka_bootstrap, [(t, None, enc[(t, 2)](data.order(1000 + i, 2)), None)
                                         for t in v2 for i in range(PER_TOPIC)], tables_for)
        _wait(lambda: json.loads(status.read_text())["updated"] > started, 180, proc)
        late = f"{prefix}.orders_late"  # created while the job runs: the pattern picks it up
        admin.create_topics([NewTopic(late, 1, 1)])[late].result(30)
        enc[late] = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{late}-value", data.ORDER_V1))
        ledger.produce(kafka_bootstrap, [(late, None, enc[late](data.order(i)), None) for i in range(25)],
                       tables_for)
        catalog = load_catalog("e2e", **catalog_props)
        con = connect(catalog_props)

        def all_landed() -> bool:
            for name, want in ledger.expected.items():
                if name.endswith("dead_letters"):
                    continue
                try:
                    table = catalog.load_table(name)
                except Exception:
                    return False
                if table.metadata.current_snapshot_id is None or len(_read(con, table)) < sum(want.values()):
                    return False
            return True

        _wait(all_landed, 300, proc)
        if maintenance:  # a third commit of the v2 tables: they hold two files by now, so it merges
            ledger.produce(kafka_bootstrap, [(t, None, enc[(t, 2)](data.order(2000 + i, 2)), None)
                                             for t in v2 for i in range(PER_TOPIC)], tables_for)
            _wait(all_landed, 300, proc)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(90)
        except subprocess.TimeoutExpired:
            proc.kill()
    assert proc.returncode == 0, "SIGTERM must stop the job cleanly"

    # Every produced record exactly once, in every table it was routed to.
    catalog = load_catalog("e2e", **catalog_props)
    con = connect(catalog_props)
    for name, want in ledger.expected.items():
        if name.endswith("dead_letters"):
            continue
        got = Counter(_read(con, catalog.load_table(name)))
        assert got == want, f"{name}: missing {sum((want - got).values())}, duplicated {sum((got - want).values())}"

    # Schema evolution: v2 columns exist, quantity widened, old rows NULL in the new column.
    evolved = catalog.load_table(f"{prefix}_raw.{prefix}_orders_00")
    schema = evolved.schema()
    assert str(schema.find_field("quantity").field_type) == "long"
    assert schema.find_field("channel").required is False
    location = evolved.metadata_location.removeprefix("file://")
    rows = con.execute(f"SELECT id, quantity, channel FROM iceberg_scan('{location}') ORDER BY id").fetchall()
    old = [r for r in rows if r[0] < 1000]
    new = [r for r in rows if r[0] >= 1000]
    assert old and all(r[2] is None and r[1] < 100 for r in old)
    assert new and all(r[1] > 3_000_000_000 for r in new)

    # Fan-in: three topics in one table; projection: only the selected columns plus Kafka metadata.
    assert {t for t, _, _ in _read(con, catalog.load_table(f"{prefix}_an.clicks"))} == set(clicks)
    projected = catalog.load_table(f"{prefix}_pay.all_regions").schema()
    assert [f.name for f in projected.fields][:3] == ["id", "amount", "created_at"]

    # Poison records: in the DLQ with their original bytes and a reason, exactly once.
    dlq = catalog.load_table(f"{prefix}_ops.dead_letters")
    location = dlq.metadata_location.removeprefix("file://")
    letters = con.execute(f"SELECT topic, \"offset\", value, error_class, reason FROM iceberg_scan('{location}')"
                          ).fetchall()
    assert sorted(v for _, _, v, _, _ in letters) == sorted([b"\x00\x7f\xff\xff\x07garbage", b"not framed"])
    assert all(reason for *_, reason in letters)

    if maintenance and maintenance.get("merge_small_files_at"):  # merges landed, in the batches' own snapshots
        merged = [s for name in ledger.expected if not name.endswith("dead_letters")
                  for s in catalog.load_table(name).metadata.snapshots
                  if s.summary.operation.value == "overwrite" and int(s.summary.get("deleted-data-files") or 0) >= 2]
        assert merged and all(s.summary.get("icerouter.batch-id") is not None for s in merged)
        # the batches' small files are written uncompressed (maintenance.transient_file_codec): every file an
        # append added; a merge's snapshot adds the batch's files and the merged file, which has the table's zstd
        codecs: dict[str, set[str]] = {"append": set(), "overwrite": set()}
        for name in ledger.expected:
            if name.endswith("dead_letters"):
                continue
            table = catalog.load_table(name)
            for snapshot in table.metadata.snapshots:
                if snapshot.summary.operation.value not in codecs:  # background compaction: the table's codec
                    continue
                for entry in table.inspect.entries(snapshot_id=snapshot.snapshot_id).to_pylist():
                    if entry["status"] == 1 and entry["snapshot_id"] == snapshot.snapshot_id:  # added here
                        with table.io.new_input(entry["data_file"]["file_path"]).open() as stream:
                            meta = pq.ParquetFile(stream).metadata
                        codecs[snapshot.summary.operation.value].update(
                            meta.row_group(0).column(c).compression for c in range(meta.num_columns))
        assert codecs == {"append": {"UNCOMPRESSED"}, "overwrite": {"UNCOMPRESSED", "ZSTD"}}

    if java_reader is not None:  # the reference implementation reads what the job wrote, row for row
        from tests.javaref.client import assert_readers_agree

        for name, want in ledger.expected.items():
            assert len(assert_readers_agree(java_reader, catalog.load_table(name))) == sum(want.values()), name


def _wait(predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else ""
            raise AssertionError(f"job exited with {proc.returncode}: {out[-3000:]}")
        try:
            if predicate():
                return
        except Exception:
            pass
        time.sleep(1)
    proc.kill()
    out = proc.stdout.read() if proc.stdout else ""
    raise AssertionError(f"timed out waiting for the job; its output ends with: {out[-4000:]}")
