"""Change streams end to end: the real `icerouter run` process, broker, registry, Spark and the
PostgreSQL catalog (the executor-level tests in tests/router/executor/test_upsert.py cover SQLite and
PostgreSQL in seconds), three Debezium topics of two partitions mirrored into upsert tables.

1. The job is SIGKILLed in the middle of its first commits; the restart from the checkpoint
   finishes the batch.
2. More changes (updates, deletes, re-inserts, key changes) and the checkpoint is deleted:
   the tables' own offsets say where to go on.
3. One table is compacted between two runs (its position deletes applied, its delete files
   dropped); the stream goes on on top of the compacted files.

After every run DuckDB and pyiceberg must read exactly the rows the source tables hold, and no
manifest may hold an equality-delete file.
"""

from __future__ import annotations

import shutil
import signal

import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

import router.cli.demo_cdc as cdc
import router.cli.demo_data as data
from router.catalog import load_table
from router.catalog.snapshot_files import live_delete_files, snapshot_files
from router.config import CatalogConfig
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run
from tests.router.executor.test_upsert import COLUMNS, expected, manifests_hold_no_equality_deletes
from tests.duckdb_reader import connect

pytestmark = pytest.mark.slow

TOPICS = 3
PARTITIONS = 2


@pytest.fixture
def catalog_props(postgres_uri, tmp_path):
    return {"type": "sql", "uri": postgres_uri, "warehouse": (tmp_path / "warehouse").as_uri()}


class Source:
    """Three customers databases behind three Debezium topics; events keyed to partitions by id."""

    def __init__(self, bootstrap: str, registry_url: str, prefix: str):
        self.bootstrap = bootstrap
        self.topics = [f"{prefix}.db{i}.customers" for i in range(TOPICS)]
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for future in admin.create_topics([NewTopic(t, PARTITIONS, 1) for t in self.topics]).values():
            future.result(15)
        self.scripts = [cdc.ChangeScript(seed=100 + i) for i in range(TOPICS)]
        self.encoders = [cdc.ChangeEncoder(data.register(registry_url, f"{t}-key", cdc.CUSTOMER_KEY),
                                           data.register(registry_url, f"{t}-value", cdc.CUSTOMER_ENVELOPE))
                         for t in self.topics]

    def send(self, step) -> None:
        from confluent_kafka import Producer

        producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        for topic, script, encode in zip(self.topics, self.scripts, self.encoders):
            for event in step(script):
                _, key, value, _ = encode(topic, event)
                producer.produce(topic, key=key, value=value, partition=event.key["id"] % PARTITIONS)
        assert producer.flush(30) == 0


def _config(tmp_path, prefix: str, bootstrap: str, registry_url: str, catalog_props: dict):
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "pattern": rf"{prefix}\..*",
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": "cdc", "properties": catalog_props},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "trigger_seconds": 2,
                "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [f"{prefix}_crm", f"{prefix}_ops"]},
        "routes": [{"name": "customers", "topic": rf"{prefix}\.db\d\.customers",
                    "table": f"{prefix}_crm.{{topic}}", "cdc": "debezium", "sequence_by": "source.lsn"}],
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _check(catalog: CatalogConfig, source: Source, prefix: str, when: str) -> None:
    for topic, script in zip(source.topics, source.scripts):
        table = load_table(catalog, f"{prefix}_crm.{topic.replace('.', '_')}", refresh=True)
        location = table.metadata_location.removeprefix("file://")
        duck = connect().execute(f"SELECT {', '.join(COLUMNS)} FROM iceberg_scan('{location}') ORDER BY id").fetchall()
        scanned = table.scan(selected_fields=COLUMNS).to_arrow().sort_by("id").to_pylist()
        assert [tuple(r[c] for c in COLUMNS) for r in scanned] == duck, f"{when}: DuckDB and pyiceberg disagree"
        assert duck == list(expected(script).values()), f"{when}: {table.name()} differs from its source"
        manifests_hold_no_equality_deletes(table)


def test_change_streams_survive_a_crash_a_lost_checkpoint_and_a_compaction(tmp_path, kafka_bootstrap, registry_url,
                                                                          catalog_props, unique_name):
    prefix = unique_name("cdc")
    catalog = CatalogConfig("cdc", catalog_props)
    source = Source(kafka_bootstrap, registry_url, prefix)
    config = _config(tmp_path, prefix, kafka_bootstrap, registry_url, catalog_props)

    source.send(lambda s: [*s.snapshot(60), *s.mixed(80), *s.update(3), *s.update(3)])
    crashed = _run(config, "--available-now", env={"ICEROUTER_CRASH_AT": "commit:2", "ICEROUTER_CRASH_DIR": str(tmp_path)})
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    resumed = _run(config, "--available-now")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _check(catalog, source, prefix, "after the crash and the restart")

    source.send(lambda s: [*s.delete(5), *s.recreate(5), *s.change_key(), *s.mixed(60)])
    shutil.rmtree(tmp_path / "checkpoint")
    again = _run(config, "--available-now")
    assert again.returncode == 0, again.stderr[-3000:]
    _check(catalog, source, prefix, "after the checkpoint was lost")

    first = f"{prefix}_crm.{source.topics[0].replace('.', '_')}"
    assert live_delete_files(load_table(catalog, first, refresh=True)), "the stream should have deleted rows"
    dry = _run_maintain(config, first, "--dry-run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    header, line = dry.stdout.splitlines()[1], dry.stdout.splitlines()[2]
    assert header.split()[:5] == ["table", "data", "files", "delete", "files"]
    assert int(line.split()[2]) == len(live_delete_files(load_table(catalog, first, refresh=True))) > 0
    maintained = _run_maintain(config, first)
    assert maintained.returncode == 0, maintained.stderr[-3000:]
    compacted = load_table(catalog, first, refresh=True)
    assert live_delete_files(compacted) == [], "compaction left delete files behind"
    _check(catalog, source, prefix, "after the compaction")

    source.send(lambda s: [*s.mixed(50), *s.update(sorted(s.rows)[0])])
    last = _run(config, "--available-now")
    assert last.returncode == 0, last.stderr[-3000:]
    _check(catalog, source, prefix, "after the stream went on over compacted files")
    live = snapshot_files(load_table(catalog, first, refresh=True))
    for delete in live_delete_files(load_table(catalog, first, refresh=True)):
        assert set(delete.referenced) <= set(live.data), "a delete file names a data file that is gone"


def _run_maintain(config, table: str, *extra: str):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "router.cli", "maintain", "--config", str(config), "--table", table, *extra],
                          env=dict(os.environ), capture_output=True, text=True, timeout=300)
