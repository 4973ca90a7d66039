"""The Prometheus endpoint of a live job: scraped while `icerouter run` runs against a real broker,
registry, Spark and a SQLite catalog, every value checked against the tables (DuckDB), the
dead-letter table and the status file. The same job sends OpenLineage events to a local receiver
(validated against the spec's schemas, datasets checked against the routes, a fan-out and a fan-in
among them), and its scrape feeds `promtool test rules` (tests/router/observability/promtool.py)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.request

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

import router.cli.demo_data as data
from router.catalog import load_table
from router.config import CatalogConfig
from router.devstack._proc import free_port
from tests.duckdb_reader import connect
from tests.router.lineage.receiver import LineageReceiver, check_job_lineage
from tests.router.observability.promtool import promtool, run_rule_tests
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _wait

pytestmark = pytest.mark.slow

PER_TOPIC = 300


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(samples: dict, name: str, **labels) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def count(catalog: CatalogConfig, table: str, where: str = "true") -> int:
    location = load_table(catalog, table, refresh=True).metadata_location.removeprefix("file://")
    return connect().execute(f"SELECT count(*) FROM iceberg_scan('{location}') WHERE {where}").fetchone()[0]


def test_metrics_of_a_live_job_match_the_tables(tmp_path, kafka_bootstrap, registry_url, unique_name):
    prefix = unique_name("m")
    topics = [f"{prefix}.orders_a", f"{prefix}.orders_b"]
    payments = f"{prefix}.payments"  # lineage: orders_b fans out (raw + mixed), mixed is fed by two topics
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in topics] + [NewTopic(payments, 1, 1)]).values():
        future.result(15)
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    catalog = CatalogConfig("m", props)
    port = free_port()
    dlq = f"{prefix}_ops.dead_letters"
    config = tmp_path / "router.yaml"
    receiver = LineageReceiver()
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": topics + [payments],
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": "m", "properties": props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "trigger_seconds": 1,
                "status_file": str(tmp_path / "status.json"), "spark": LOCAL_SPARK,
                "metrics": {"port": port, "host": "127.0.0.1"}},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_ops", f"{prefix}_all"]},
        "routes": [{"name": "raw", "topic": rf"{prefix}\.orders_.*", "table": f"{prefix}_raw.{{topic}}"},
                   {"name": "mixed", "topic": rf"{prefix}\.(orders_b|payments)", "table": f"{prefix}_all.mixed"}],
        "dlq": {"table": dlq},
        "lineage": {"transport": {"type": "http", "url": receiver.url, "endpoint": "api/v1/lineage"}},
    }))
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topics[0]}-value", data.ORDER_V1))
    data.register(registry_url, f"{topics[1]}-value", data.ORDER_V1)
    pay = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{payments}-value", data.ORDER_V1))
    proc = subprocess.Popen([sys.executable, "-m", "router.cli", "run", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: scrape(port) is not None, 180, proc)  # the endpoint is up before the first batch
        producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
        for i in range(PER_TOPIC):
            for n, topic in enumerate(topics):
                producer.produce(topic, value=encode(data.order(i + n * PER_TOPIC)), partition=i % 2)
        for i in range(20):
            producer.produce(payments, value=pay(data.order(5 * PER_TOPIC + i)), partition=0)
        producer.produce(topics[0], value=b"not framed", partition=0)  # a poison record: one dead letter
        assert producer.flush(30) == 0
        tables = [f"{prefix}_raw.{t.replace('.', '_')}" for t in topics]  # {topic} normalised

        seen: list = []

        def settled() -> bool:
            status = json.loads((tmp_path / "status.json").read_text())
            samples = scrape(port)
            rows = [value(samples, "icerouter_rows_committed_total", table=t) or 0 for t in tables]
            seen[:] = [rows, status["totals"], value(samples, "icerouter_batches_total")]
            # the same batch count in the status file and the endpoint: no batch between the two reads
            return rows == [PER_TOPIC, PER_TOPIC] and status["totals"]["batches"] == value(
                samples, "icerouter_batches_total") and status["totals"]["dead_letters"] == 1

        try:
            _wait(settled, 240, proc)
        except AssertionError as exc:
            raise AssertionError(f"last seen (rows, status totals, batches): {seen}") from exc
        samples = scrape(port)
        status = json.loads((tmp_path / "status.json").read_text())
        for table in tables:
            assert value(samples, "icerouter_rows_committed_total", table=table) == count(catalog, table) \
                == status["tables"][table] == PER_TOPIC
            data_files = [f for f in load_table(catalog, table, refresh=True).inspect.files().to_pylist()]
            assert value(samples, "icerouter_files_committed_total", table=table, content="data") == len(data_files)
            assert value(samples, "icerouter_bytes_committed_total", table=table) == sum(
                f["file_size_in_bytes"] for f in data_files)
            since = value(samples, "icerouter_table_seconds_since_last_commit", table=table)
            last = value(samples, "icerouter_table_last_commit_timestamp_seconds", table=table)
            snapshot_ms = load_table(catalog, table, refresh=True).current_snapshot().timestamp_ms
            assert 0 <= since < 600 and abs(last - snapshot_ms / 1000) < 5
            assert value(samples, "icerouter_commit_failures_total", table=table) is None
        letters = connect().execute(
            "SELECT error_class, count(*) FROM iceberg_scan('"
            + load_table(catalog, dlq, refresh=True).metadata_location.removeprefix("file://")
            + "') GROUP BY 1").fetchall()
        assert [(reason, n) for reason, n in letters] == [
            (k[1][0][1], v) for k, v in samples.items() if k[0] == "icerouter_dead_letters_total"]
        assert sum(n for _, n in letters) == 1

        def lag() -> dict[str, float]:
            return {dict(k[1])["topic"] + "/" + dict(k[1])["partition"]: v for k, v in scrape(port).items()
                    if k[0] == "icerouter_partition_lag_records"}

        # the lag comes from the query's last progress (posted after the batch's foreachBatch returned),
        # read at most every few seconds: every partition read reaches 0
        _wait(lambda: lag() == {**{f"{t}/{p}": 0.0 for t in topics for p in (0, 1)}, f"{payments}/0": 0.0}, 60, proc)
        assert value(samples, "icerouter_record_freshness_seconds_count") >= 2  # one per table commit
        assert 0 < value(samples, "icerouter_record_freshness_seconds_sum") / value(
            samples, "icerouter_record_freshness_seconds_count") < 600
        assert value(samples, "icerouter_records_read_total") >= 2 * PER_TOPIC + 1
        assert value(samples, "icerouter_batch_phase_seconds_total", phase="commit") > 0
        assert value(samples, "icerouter_commit_duration_seconds_count", where="task") >= 2
        assert value(samples, "icerouter_job_info", job=f"job_{prefix}") == 1
        # the consumer group commits after batches (in the background: the batch's render may precede it)
        _wait(lambda: value(scrape(port), "icerouter_consumer_group_commits_total", outcome="committed") >= 1, 30, proc)
        assert value(scrape(port), "icerouter_consumer_group_commits_total", outcome="failed") is None
        time.sleep(3)  # idle: seconds since the last commit grow, nothing else moves
        later = scrape(port)
        assert value(later, "icerouter_table_seconds_since_last_commit", table=tables[0]) > \
            value(samples, "icerouter_table_seconds_since_last_commit", table=tables[0])
        assert value(later, "icerouter_rows_committed_total", table=tables[0]) == PER_TOPIC

        # a replay beside the live job: the poison record still fails (it stays, with its reason); the
        # job's next batch commits the dead-letter table and shows what the replay did
        replay = subprocess.run([sys.executable, "-m", "router.cli", "dlq", "replay", "--all", "--config",
                                 str(config)], capture_output=True, text=True, timeout=120)
        assert replay.returncode == 1 and "still failing" in replay.stdout, replay.stdout + replay.stderr
        producer.produce(topics[0], value=encode(data.order(10 * PER_TOPIC)), partition=0)
        assert producer.flush(30) == 0
        _wait(lambda: value(scrape(port), "icerouter_dead_letter_replays", outcome="runs") == 1, 120, proc)
        replays = scrape(port)
        assert value(replays, "icerouter_dead_letter_replays", outcome="still_failing") == 1
        assert value(replays, "icerouter_dead_letter_replays", outcome="landed") == 0
        assert count(catalog, dlq) == 1  # the letter stayed, once
        if promtool():  # the alert rules over this job's own series
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            rules = tmp_path / "promtool"
            rules.mkdir()
            done = run_rule_tests(text, rules)
            assert done.returncode == 0, done.stdout + done.stderr
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(90) == 0
        check_job_lineage(receiver.events, f"job_{prefix}", kafka_bootstrap, topics + [payments], {
            tables[0]: {topics[0]}, tables[1]: {topics[1]},
            f"{prefix}_all.mixed": {topics[1], payments}}, dlq)
    finally:
        receiver.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(90)
            except subprocess.TimeoutExpired:
                proc.kill()
