"""Upsert and CDC tables through the executor write path and the real commit: a Debezium stream
mirrored into Iceberg with position deletes only, read back by DuckDB and pyiceberg."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFileContent, ManifestContent

import router.cli.demo_cdc as cdc
import router.cli.demo_data as data
from router.catalog import load_table
from router.source.schema import kafka_arrow_schema
from router.config import CatalogConfig
from tests.duckdb_reader import read_iceberg
from tests.router.executor.test_partition import make_dispatcher, run_batch

COLUMNS = ("id", "name", "email", "tier", "region")


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog_config(request, tmp_path, unique_name):
    """The catalog grid: SQLite and PostgreSQL on a local warehouse, REST with the tables in S3."""
    if request.param == "rest":
        return CatalogConfig(unique_name("c"), request.getfixturevalue("object_store").rest_catalog_properties())
    uri = f"sqlite:///{tmp_path / 'catalog.db'}" if request.param == "sqlite" else \
        request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def kafka_batch(records: list[tuple]) -> pa.RecordBatch:
    """(topic, partition, offset, key, value) -> a batch shaped like the Kafka source's."""
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    cols = {"key": [r[3] for r in records], "value": [r[4] for r in records], "topic": [r[0] for r in records],
            "partition": [r[1] for r in records], "offset": [r[2] for r in records],
            "timestamp": [now] * len(records), "timestampType": [0] * len(records), "headers": [[]] * len(records)}
    return pa.RecordBatch.from_pydict(cols, schema=kafka_arrow_schema())


class Stream:
    """Kafka positions for a script's events: partition by key, as Debezium's producer does."""

    def __init__(self, registry_url: str, topic: str, partitions: int = 2):
        self.topic, self.partitions = topic, partitions
        self.encode = cdc.ChangeEncoder(data.register(registry_url, f"{topic}-key", cdc.CUSTOMER_KEY),
                                        data.register(registry_url, f"{topic}-value", cdc.CUSTOMER_ENVELOPE))
        self.next = [0] * partitions

    def batches(self, events) -> list[pa.RecordBatch]:
        """One source batch per partition (one Spark task each)."""
        per: dict[int, list] = {}
        for event in events:
            _, key, value, _ = self.encode(self.topic, event)
            p = event.key["id"] % self.partitions
            per.setdefault(p, []).append((self.topic, p, self.next[p], key, value))
            self.next[p] += 1
        return [kafka_batch(rows) for _, rows in sorted(per.items())]


def live_rows(catalog_config, table: str) -> dict[int, tuple]:
    """The table as DuckDB reads it, checked against pyiceberg's scan."""
    handle = load_table(catalog_config, table, refresh=True)
    duck = [tuple(r[c] for c in COLUMNS) for r in read_iceberg(handle, order_by="id").to_pylist()]
    scanned = handle.scan(selected_fields=COLUMNS).to_arrow().sort_by("id")
    assert [tuple(r[c] for c in COLUMNS) for r in scanned.to_pylist()] == duck, "DuckDB and pyiceberg disagree"
    assert len({r[0] for r in duck}) == len(duck), "a key holds more than one live row"
    return {r[0]: r for r in duck}


def expected(script: cdc.ChangeScript) -> dict[int, tuple]:
    return {k: tuple(v[c] for c in COLUMNS) for k, v in sorted(script.rows.items())}


def manifests_hold_no_equality_deletes(handle) -> int:
    """Position-delete files of the current snapshot; fails on any equality-delete file."""
    count = 0
    for manifest in handle.current_snapshot().manifests(handle.io):
        for entry in manifest.fetch_manifest_entry(handle.io):
            assert entry.data_file.content != DataFileContent.EQUALITY_DELETES
            if manifest.content == ManifestContent.DELETES:
                assert entry.data_file.content == DataFileContent.POSITION_DELETES
                count += 1
            else:
                assert entry.data_file.content == DataFileContent.DATA
    return count


@pytest.mark.parametrize("commit_in_tasks", [True, False], ids=["tasks-commit", "driver-commits"])
def test_a_debezium_stream_is_mirrored_with_position_deletes(catalog_config, registry_url, unique_name,
                                                             commit_in_tasks):
    """Two partitions, two tasks: each task commits its part, or the driver commits both parts in turn."""
    ns = unique_name("u")
    topic, table = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic)
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "customers", "topic": rf"{ns}\.customers", "table": table, "cdc": "debezium"}],
        job={"commit_in_tasks": commit_in_tasks})
    script = cdc.ChangeScript(seed=11)
    steps = [
        lambda: list(script.snapshot(40)),                                            # r
        lambda: [*script.mixed(30), *script.update(3), *script.update(3), *script.update(3)],  # one key thrice
        lambda: [*script.delete(5), *script.recreate(5), *script.change_key(7), *script.mixed(25)],
        lambda: [*script.update(5), *script.delete(sorted(script.rows)[-1]), *script.mixed(20)],
    ]
    delete_files = 0
    for batch_id, step in enumerate(steps):
        results, report = run_batch(dispatcher, stream.batches(step()), batch_id)
        assert not [o for o in report.outcomes if o.status == "failed"], report.outcomes
        where = {o.where for o in report.outcomes if o.status == "committed"}
        assert where == {"task" if commit_in_tasks else "driver"}, report.outcomes
        assert live_rows(catalog_config, table) == expected(script), f"after batch {batch_id}"
        delete_files += sum(o.delete_files for o in report.committed if o.table == table)
    handle = load_table(catalog_config, table, refresh=True)
    assert handle.schema().identifier_field_names() == {"id"}
    # the outcomes count the delete files the scheduler weighs towards compaction
    assert delete_files == int(handle.current_snapshot().summary["total-delete-files"]) > 0
    assert manifests_hold_no_equality_deletes(handle) > 0


def test_updates_that_move_rows_to_another_partition_of_the_table(catalog_config, registry_url, unique_name):
    """A table partitioned by region: an update that changes a row's region deletes it from the old
    partition's file and writes the new image into the new partition's, in one snapshot."""
    ns = unique_name("u")
    topic, table = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic)
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "customers", "topic": rf"{ns}\.customers", "table": table, "cdc": "debezium",
         "partition_by": ["identity(region)"]}])
    script = cdc.ChangeScript(seed=17)
    run_batch(dispatcher, stream.batches(list(script.snapshot(40))), 0)
    before = {k: v["region"] for k, v in script.rows.items()}
    changes = [*script.update(), *script.mixed(20, updates=1.0)]
    for key in sorted(script.rows)[:10]:
        changes.extend(script.update(key))
    results, report = run_batch(dispatcher, stream.batches(changes), 1)
    assert not [o for o in report.outcomes if o.status == "failed"], report.outcomes
    moved = [k for k, v in script.rows.items() if v["region"] != before[k]]
    assert moved, "the script moved no row to another region"
    assert live_rows(catalog_config, table) == expected(script)
    handle = load_table(catalog_config, table, refresh=True)
    assert [f.name for f in handle.spec().fields] == ["region"]
    regions = {f.partition[0] for f in (t.file for t in handle.scan().plan_files())}
    assert len(regions) > 1, regions
    assert manifests_hold_no_equality_deletes(handle) > 0


def test_a_replayed_batch_changes_nothing(catalog_config, registry_url, unique_name):
    ns = unique_name("u")
    topic, table = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic, partitions=1)
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "customers", "topic": rf"{ns}\.customers", "table": table, "cdc": "debezium"}])
    script = cdc.ChangeScript(seed=3)
    first = stream.batches(list(script.snapshot(20)))
    run_batch(dispatcher, first, 0)
    second = stream.batches([*script.mixed(15), *script.delete(2)])
    run_batch(dispatcher, second, 1)
    snapshot = load_table(catalog_config, table, refresh=True).current_snapshot().snapshot_id
    for batch_id, batches in ((1, second), (0, first), (2, first + second)):  # a replay, a rewind, both
        results, report = run_batch(dispatcher, batches, batch_id)
        assert all(o.status in ("skipped", "empty") for o in report.outcomes), report.outcomes
    assert load_table(catalog_config, table, refresh=True).current_snapshot().snapshot_id == snapshot
    assert live_rows(catalog_config, table) == expected(script)


def test_upsert_by_kafka_key_with_tombstones_and_bad_records(catalog_config, registry_url, unique_name):
    ns = unique_name("u")
    topic, table = f"{ns}.profiles", f"{ns}.profiles"
    key_id = data.register(registry_url, f"{topic}-key", cdc.CUSTOMER_KEY)
    value_id = data.register(registry_url, f"{topic}-value", cdc.CUSTOMER_VALUE)
    key, value = data.Encoder(cdc.CUSTOMER_KEY, key_id), data.Encoder(cdc.CUSTOMER_VALUE, value_id)
    envelope = data.Encoder(cdc.CUSTOMER_ENVELOPE, data.register(registry_url, f"{ns}.cdc-value",
                                                                 cdc.CUSTOMER_ENVELOPE))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "profiles", "topic": rf"{ns}\.profiles", "table": table, "mode": "upsert"},
        {"name": "cdc", "topic": rf"{ns}\.cdc", "table": f"{ns}.cdc", "cdc": "debezium"}])
    script = cdc.ChangeScript(seed=5)
    rows = {i: script._row(i) for i in range(1, 6)}
    records = [(topic, 0, i - 1, key({"id": i}), value(rows[i])) for i in rows]
    run_batch(dispatcher, [kafka_batch(records)], 0)
    rows[2] = script._row(2)
    records = [(topic, 0, 5, key({"id": 2}), value(rows[2])),     # update
               (topic, 0, 6, key({"id": 4}), None),                # tombstone: delete key 4
               (topic, 0, 7, None, None),                          # tombstone without a key: dead letter
               (topic, 0, 8, key({"id": 9}), None)]                # delete of a key never seen: nothing
    bad = script._envelope("x", None, script._row(50))
    cdc_records = [(f"{ns}.cdc", 0, 0, key({"id": 50}), envelope(bad))]  # unknown op: dead letter
    results, report = run_batch(dispatcher, [kafka_batch(records), kafka_batch(cdc_records)], 1)
    del rows[4]
    assert live_rows(catalog_config, table) == {k: tuple(v[c] for c in COLUMNS) for k, v in rows.items()}
    letters = [(r["offset"], r["error_class"], r["reason"]) for r in
               read_iceberg(load_table(catalog_config, f"{ns}.dead_letters", refresh=True),
                            order_by="error_class").to_pylist()]
    assert [(o, c) for o, c, _ in letters] == [(7, "null_key"), (0, "unknown_op")], letters
    assert "'x'" in letters[1][2]
