"""Table maintenance against real catalogs (SQLite and PostgreSQL on local disk, REST on S3), read back twice.

Tables are built the way the job builds them: many fast appends of small
Parquet files into a day(ts)-partitioned table, with the schema evolved half
way (a column added, int widened to long). Every check reads the rows with
pyiceberg AND with DuckDB's iceberg_scan, before and after. Files are listed,
written and deleted through a filesystem of their own (local, or pyarrow's S3
client on the SeaweedFS endpoint), independent of the code under test.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType, LongType, NestedField, StringType, TimestamptzType

from router.config import MaintenanceConfig, parse_config
from router.maintenance import (
    CompactionConflict, MaintenanceError, MaintenanceScheduler, UnsupportedLocation, compact, expire,
    maintain_table, plan_compaction, plan_groups, reachable_files, remove_orphans,
)
from router.progress import property_name, stored_progress
from tests.duckdb_reader import read_iceberg_rows

REPO = Path(__file__).resolve().parents[3]
BASE = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
DAYS = 3  # every batch touches three day partitions
ROWS_PER_BATCH = 12
MiB = 1 << 20
ORPHAN_AGE = 3600


def _schema() -> Schema:
    return Schema(NestedField(1, "id", LongType(), required=False),
                  NestedField(2, "ts", TimestamptzType(), required=False),
                  NestedField(3, "qty", IntegerType(), required=False))


def _batch(batch: int, evolved: bool) -> pa.Table:
    ids = list(range(batch * ROWS_PER_BATCH, (batch + 1) * ROWS_PER_BATCH))
    cols = {
        "id": pa.array(ids, pa.int64()),
        "ts": pa.array([BASE + dt.timedelta(days=i % DAYS, seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
        # after widening, values beyond the int range prove the long column is really used
        "qty": pa.array([i + (2**40 if evolved else 0) for i in ids], pa.int64() if evolved else pa.int32()),
    }
    if evolved:
        cols["note"] = pa.array([f"n{i}" for i in ids], pa.string())
    return pa.table(cols)


def build_table(catalog, namespace: str, name: str = "events", batches: int = 30, **properties: str):
    """A day(ts) table with one small fast append per batch; schema evolved half way."""
    from router.catalog import DEFAULT_TABLE_PROPERTIES

    catalog.create_namespace_if_not_exists(namespace)
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"))
    table = catalog.create_table(f"{namespace}.{name}", schema=_schema(), partition_spec=spec,
                                 properties={**DEFAULT_TABLE_PROPERTIES, **properties})
    for b in range(batches):
        if b == batches // 2:
            with table.update_schema() as update:
                update.add_column("note", StringType())
                update.update_column("qty", LongType())
        table.append(_batch(b, evolved=b >= batches // 2))
    return table


def rows(table) -> list[dict]:
    return sorted(table.refresh().scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def duck_rows(table) -> list[dict]:
    return read_iceberg_rows(table.refresh(), order_by="id")


def local(uri: str) -> str:
    """A local path for file:// URIs; object-store URIs stay as they are."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def _fs(location: str):
    """(pyarrow filesystem, path) of a location, built from the test store's settings, not the table's IO."""
    from pyarrow.fs import LocalFileSystem, S3FileSystem

    if not location.startswith("s3://"):
        return LocalFileSystem(), local(location)
    props = _S3_PROPS[0]
    fs = S3FileSystem(access_key=props["s3.access-key-id"], secret_key=props["s3.secret-access-key"],
                      region=props["s3.region"], endpoint_override=props["s3.endpoint"],
                      force_virtual_addressing=False)
    return fs, location[len("s3://"):]


_S3_PROPS: list[dict] = [{}]


@pytest.fixture(autouse=True)
def _s3_settings(request):
    """Object-store tests list and delete through the session store's own credentials."""
    if "catalog" in request.fixturenames and request.node.callspec.params.get("catalog") == "rest":
        _S3_PROPS[0] = request.getfixturevalue("object_store").s3_properties()


def files_on_disk(table) -> dict[str, float]:
    """Every file (object) under the table location -> modification time."""
    from pyarrow.fs import FileSelector

    fs, root = _fs(table.location())
    prefix = "s3://" if table.location().startswith("s3://") else ""
    return {prefix + i.path: i.mtime.timestamp() for i in fs.get_file_info(FileSelector(root, recursive=True))
            if i.is_file}


def exists(path: str) -> bool:
    fs, p = _fs(path)
    return fs.get_file_info(p).is_file


def remove(path: str) -> None:
    fs, p = _fs(path)
    fs.delete_file(p)


def live_paths(table) -> set[str]:
    return {local(t.file.file_path) for t in table.refresh().scan().plan_files()}


def stray_file(table, name: str) -> str:
    """A Parquet file in the data directory that no snapshot references (a crashed writer's)."""
    path = local(table.location()).rstrip("/") + "/data/" + name
    fs, p = _fs(path)
    with fs.open_output_stream(p) as out:
        pq.write_table(pa.table({"x": [1]}), out)
    return path


def stray_pair(table) -> tuple[str, str, object]:
    """An old and a fresh orphan, and a clock under which only the old one is past the orphan age.

    Object stores date objects themselves (to the second) and cannot be back-dated, so the
    clock is moved instead: the cut-off falls between the two writes, a second from each.
    """
    old = stray_file(table, "orphan-old.parquet")
    boundary = time.time() + 1.05
    time.sleep(2.2)  # also ages every append snapshot past max_snapshot_age_seconds
    fresh = stray_file(table, "orphan-fresh.parquet")
    return old, fresh, lambda: boundary + ORPHAN_AGE


def config(**overrides) -> MaintenanceConfig:
    values = dict(retain_last_snapshots=2, max_snapshot_age_seconds=1, target_file_size_bytes=MiB,
                  orphan_min_age_seconds=ORPHAN_AGE)
    return MaintenanceConfig(**{**values, **overrides})


# ----------------------------------------------------------------------------- pure planning

def _file(path: str, size: int, day: int, spec_id: int = 0, rows: int = 10) -> DataFile:
    data_file = DataFile.from_args(content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
                                   partition=Record(day), record_count=rows, file_size_in_bytes=size)
    data_file.spec_id = spec_id
    return data_file


def test_plan_groups_bin_packs_small_files_per_partition_and_skips_large_ones():
    target = 100
    files = [_file(f"a{i}", 30, day=1) for i in range(7)]          # 210 bytes -> bins of <= 100
    files += [_file("big", 80, day=1), _file("edge", 75, day=1)]    # >= 75% of target: left alone
    files += [_file("b0", 10, day=2)]                                # alone in its partition
    files += [_file("c0", 20, day=3), _file("c1", 20, day=3, spec_id=1)]  # same value, other spec
    groups = plan_groups(files, target, min_input_files=2)

    planned = [f.file_path for g in groups for f in g.files]
    assert not {"big", "edge", "b0", "c0", "c1"} & set(planned)
    assert sorted(planned) == sorted(f"a{i}" for i in range(6))  # 3+3 packed, the 7th alone is dropped
    assert all(g.input_bytes <= target and len(g.files) >= 2 for g in groups)
    assert {(g.spec_id, g.partition) for g in groups} == {(0, Record(1))}
    assert len(plan_groups(files, target, min_input_files=4)) == 0
    assert "files=3" in repr(groups[0]) and "a0" not in repr(groups[0])


def test_errors_are_picklable_and_say_whether_to_retry():
    for exc in (CompactionConflict("gone", table="ns.t", attempts=3), UnsupportedLocation("s3", location="s3://b/t"),
                MaintenanceError("rows", table="ns.t", expected=3, read=2)):
        copy = pickle.loads(pickle.dumps(exc))
        assert type(copy) is type(exc) and str(copy) == str(exc) and copy.context == exc.context
    assert CompactionConflict.transient and not UnsupportedLocation.transient
    assert pickle.loads(pickle.dumps(CompactionConflict("x", table="ns.t"))).table == "ns.t"


# ----------------------------------------------------------------------------- one table

def test_maintain_table_compacts_expires_and_removes_orphans(catalog, unique_name):
    table = build_table(catalog, unique_name("maint"))
    progress = '{"batch_id": 29, "offsets": {"orders/0": 360}}'
    table.transaction().set_properties({"icerouter.offsets.job": progress}).commit_transaction()
    before_rows, before_duck = rows(table), duck_rows(table)
    assert len(before_rows) == 30 * ROWS_PER_BATCH and before_duck == before_rows  # both readers agree
    files_before = len(live_paths(table))
    snapshots_before = len(table.metadata.snapshots)
    old_orphan, fresh_orphan, clock = stray_pair(table)

    report = maintain_table(table, config(retain_last_snapshots=1), clock=clock)

    assert rows(table) == before_rows
    assert duck_rows(table) == before_duck
    after_rows = rows(table)
    assert all(r["qty"] == r["id"] for r in after_rows[: 15 * ROWS_PER_BATCH])  # int files read as long
    assert all(r["qty"] == r["id"] + 2**40 for r in after_rows[15 * ROWS_PER_BATCH:])
    assert all(r["note"] is None for r in after_rows[: 15 * ROWS_PER_BATCH])           # column added later
    assert all(r["note"] == f"n{r['id']}" for r in after_rows[15 * ROWS_PER_BATCH:])
    live = live_paths(table)
    assert len(live) == DAYS < files_before == report.files_before
    assert report.files_after == DAYS and report.bytes_after < report.bytes_before
    assert report.compaction.files_removed == files_before and report.compaction.rows == len(before_rows)
    current = table.current_snapshot()
    assert current.summary.operation.value == "replace"
    assert current.summary["total-records"] == str(len(before_rows))
    assert len(table.metadata.snapshots) == report.snapshots_after == 1 < snapshots_before
    assert report.metadata_files_after < report.metadata_files_before
    assert len(current.manifests(table.io)) == 1  # the one-batch manifests were merged
    # replaced data files and expired manifests are gone from disk; nothing live was deleted
    on_disk = set(files_on_disk(table))
    assert live <= on_disk
    assert {p for p in on_disk if p.endswith(".parquet") and "/data/" in p} == live | {fresh_orphan}
    assert {local(p) for p in reachable_files(table)} <= on_disk
    assert report.orphans == [old_orphan] and not exists(old_orphan) and exists(fresh_orphan)
    assert table.properties["icerouter.offsets.job"] == progress  # the job's exactly-once state survives
    # a second run finds nothing left to do
    again = maintain_table(table, config(retain_last_snapshots=1), clock=clock)
    assert again.compaction.files_added == 0 and again.orphans == [] and rows(table) == before_rows


def test_a_table_rolled_back_to_a_compaction_reports_the_offsets_its_rows_hold(catalog, unique_name):
    """Compaction's snapshot carries its parent's job offsets: after the parents expired, a rollback
    to it must not fall back to the table property (the latest commit's, ahead of these rows)."""
    table = build_table(catalog, unique_name("carry"), batches=0)
    name = property_name("job")

    def job_commit(batch: int) -> None:
        doc = json.dumps({"batch_id": batch, "offsets": {"orders/0": (batch + 1) * ROWS_PER_BATCH}})
        with table.transaction() as tx:
            tx.set_properties({name: doc})
            tx.append(_batch(batch, evolved=False), snapshot_properties={name: doc})

    for batch in range(4):
        job_commit(batch)
    maintain_table(table, config(retain_last_snapshots=1, max_snapshot_age_seconds=0))  # compaction; parents expired
    compacted = table.refresh().current_snapshot()
    assert compacted.summary.operation.value == "replace" and len(table.metadata.snapshots) == 1
    job_commit(4)
    assert stored_progress(table.refresh(), "job")["offsets"] == {"orders/0": 60}
    table.manage_snapshots().rollback_to_snapshot(compacted.snapshot_id).commit()
    assert stored_progress(table.refresh(), "job")["offsets"] == {"orders/0": 48}
    assert len(rows(table)) == 48 == len(duck_rows(table))


def test_dry_run_changes_nothing(catalog, unique_name):
    table = build_table(catalog, unique_name("dry"), batches=12)
    old_orphan = stray_file(table, "orphan-old.parquet")
    time.sleep(1.1)
    disk, location, data = files_on_disk(table), table.metadata_location, rows(table)

    report = maintain_table(table, config(retain_last_snapshots=1), dry_run=True,
                            clock=lambda: time.time() + ORPHAN_AGE)

    assert report.dry_run and report.planned_groups and report.expired_snapshots == 11
    assert sum(len(g.files) for g in report.planned_groups) == len(live_paths(table))
    assert report.orphans == [old_orphan]
    assert table.refresh().metadata_location == location
    assert files_on_disk(table) == disk
    assert rows(table) == data and report.files_after == report.files_before
    assert len(table.metadata.snapshots) == 12


def test_expire_deletes_only_files_no_snapshot_still_needs(catalog, unique_name):
    table = build_table(catalog, unique_name("exp"), batches=6)
    data = rows(table)
    time.sleep(1.1)
    result = expire(table, retain_last=1, max_age_seconds=1)
    assert result.expired == 5 and len(table.metadata.snapshots) == 1
    # fast appends keep every data file live: only manifest lists of expired snapshots go
    assert result.deleted_files and all(local(p).rsplit("/", 1)[1].startswith("snap-") for p in result.deleted_files)
    assert not any(exists(local(p)) for p in result.deleted_files)
    assert rows(table) == data and duck_rows(table) == sorted(data, key=lambda r: r["id"])


def test_reachable_files_reads_each_manifest_once_and_stays_right_after_expiry_and_compaction(
        catalog, unique_name, monkeypatch):
    """A maintenance run asks what the retained snapshots reach several times; manifest lists and
    manifests never change, so a repeat reads nothing, and what changed is what new files say."""
    from router.catalog import reachable

    table = build_table(catalog, unique_name("reach"), batches=8)
    opened: list[str] = []
    new_input = table.io.new_input
    monkeypatch.setattr(table.io, "new_input", lambda path: opened.append(path) or new_input(path))
    first = reachable_files(table)
    # the 8 manifests, and the manifest lists unless this process wrote them (catalog/manifest_lists.py)
    assert len([p for p in opened if "/metadata/" in p]) == len(opened) >= 8
    read_once = len(opened)
    assert reachable_files(table) == first and len(opened) == read_once
    assert set(map(local, first)) <= set(files_on_disk(table))

    time.sleep(1.1)  # every snapshot but the newest is past the age
    maintain_table(table, config(retain_last_snapshots=1), orphans=False)
    cached = (reachable_files(table), reachable_files(table, include_deleted_entries=True))
    reachable._named.clear()
    assert (reachable_files(table), reachable_files(table, include_deleted_entries=True)) == cached
    assert {local(p) for p in cached[0] if "/data/" in p} == live_paths(table)
    assert cached[1] > cached[0]  # the replace snapshot's manifests name the files it removed


# ----------------------------------------------------------------------------- concurrency

@pytest.mark.parametrize("pyiceberg_retries", ["0", "4"], ids=["own-retry", "pyiceberg-retry"])
def test_append_between_planning_and_commit_is_kept(catalog, unique_name, pyiceberg_retries):
    ns = unique_name("race")
    # icerouter's tables leave retries to us; tables made elsewhere let pyiceberg retry and re-validate
    table = build_table(catalog, ns, batches=8, **{"commit.retry.num-retries": pyiceberg_retries})
    data = rows(table)
    groups = plan_compaction(table, MiB)
    assert groups

    writer = catalog.load_table(f"{ns}.events")  # another process's handle
    late = _batch(100, evolved=True)
    writer.append(late)

    result = compact(table, groups, MiB)  # `table` is stale: its first commit attempt conflicts

    assert result.attempts == (2 if pyiceberg_retries == "0" else 1)
    assert result.files_removed == sum(len(g.files) for g in groups)
    expected = sorted(data + late.to_pylist(), key=lambda r: r["id"])
    assert rows(table) == expected
    assert [r["id"] for r in duck_rows(table)] == [r["id"] for r in expected]
    assert table.current_snapshot().summary.operation.value == "replace"
    assert table.current_snapshot().summary["total-records"] == str(len(expected))


@pytest.mark.parametrize("pyiceberg_retries", ["0", "4"], ids=["own-retry", "pyiceberg-retry"])
def test_compaction_of_files_already_replaced_fails_and_changes_nothing(catalog, unique_name, pyiceberg_retries):
    ns = unique_name("conflict")
    table = build_table(catalog, ns, batches=8, **{"commit.retry.num-retries": pyiceberg_retries})
    data = rows(table)
    stale_groups = plan_compaction(table, MiB)

    other = catalog.load_table(f"{ns}.events")
    compact(other, plan_compaction(other, MiB), MiB)  # someone else compacted first
    location, disk = other.refresh().metadata_location, set(files_on_disk(other))

    with pytest.raises(CompactionConflict) as info:
        compact(table, stale_groups, MiB)

    assert info.value.table == f"{ns}.events" and info.value.transient
    assert table.refresh().metadata_location == location
    assert set(files_on_disk(table)) == disk  # the files written for the failed attempt were removed
    assert rows(table) == data and len(duck_rows(table)) == len(data)


def test_orphan_removal_refuses_a_table_split_across_file_systems(tmp_path):
    cat = SqlCatalog("remote", uri=f"sqlite:///{tmp_path}/c.db", warehouse=f"file://{tmp_path}/wh")
    cat.create_namespace("ns")
    table = cat.create_table("ns.t", schema=_schema(), properties={"write.data.path": "s3://bucket/ns/t/data"})
    with pytest.raises(UnsupportedLocation) as info:
        remove_orphans(table, 3600)
    assert "s3://" in str(info.value) and not info.value.transient
    report = maintain_table(table, config())  # the other steps still run; the skip is reported
    assert report.error is None and report.orphans == [] and "s3://" in report.notes[0]


# ----------------------------------------------------------------------------- scheduler and CLI

def _router_config(catalog_props: dict, **maintenance) -> dict:
    return {"kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
            "registry": {"url": "http://127.0.0.1:9"},
            "catalog": {"name": "maint", "properties": catalog_props},
            "maintenance": maintenance}


def _sqlite_props(tmp_path) -> dict:
    from router.devstack.catalog import sqlite_catalog_properties

    return sqlite_catalog_properties(str(tmp_path))


def test_scheduler_compacts_a_table_at_most_once_per_interval(tmp_path):
    props = _sqlite_props(tmp_path)
    table = build_table(SqlCatalog("maint", **props), "sched", batches=6)
    cfg = parse_config(_router_config(props, target_file_size_bytes=MiB, retain_last_snapshots=10))
    now = [1000.0]
    scheduler = MaintenanceScheduler(cfg, interval_seconds=60, clock=lambda: now[0])

    assert scheduler.maybe_run(["sched.events"]) == []  # first sight starts the clock
    now[0] += 30
    assert scheduler.maybe_run(["sched.events"]) == []
    now[0] += 31
    [report] = scheduler.maybe_run(["sched.events"])
    assert report.error is None and report.compaction.files_added == DAYS
    assert len(live_paths(table)) == DAYS and report.orphans == []
    assert scheduler.maybe_run(["sched.events"]) == []


def test_scheduler_compacts_a_table_once_enough_files_arrived_before_its_interval(tmp_path):
    props = _sqlite_props(tmp_path)
    cat = SqlCatalog("maint", **props)
    busy, quiet = build_table(cat, "sched", "busy", batches=6), build_table(cat, "sched", "quiet", batches=6)
    cfg = parse_config(_router_config(props, target_file_size_bytes=MiB, retain_last_snapshots=10,
                                      compact_after_files=10))
    assert cfg.maintenance.compact_after_files == 10 and parse_config(_router_config(props)).maintenance \
        .compact_after_files == 100  # the default
    data = rows(busy)
    scheduler = MaintenanceScheduler(cfg, interval_seconds=3600, clock=lambda: 1000.0, after_files=10)
    names = ["sched.busy", "sched.quiet"]

    assert scheduler.maybe_run(names, {"sched.busy": 6, "sched.quiet": 1}) == []  # 6 < 10, clock far off
    [report] = scheduler.maybe_run(names, {"sched.busy": 6, "sched.quiet": 1})  # 12 new files: due
    assert report.table == "sched.busy" and report.error is None
    assert report.compaction.files_removed == 18 and report.compaction.files_added == DAYS
    assert len(live_paths(busy)) == DAYS and rows(busy) == data == duck_rows(busy)
    assert len(live_paths(quiet)) == 18  # 2 new files, not due
    assert scheduler.maybe_run(names, {"sched.busy": 5}) == []  # the count restarted after the run
    # the job's cached handle, refreshed and committed in place by its commit threads, is not the
    # one maintenance works on (it would move under them)
    from router.catalog import load_table

    cached = load_table(cfg.catalog, "sched.quiet")
    before = cached.metadata_location
    [quiet_report] = scheduler.maybe_run(names, {"sched.quiet": 20})
    assert quiet_report.compaction.files_removed == 18 and cached.metadata_location == before
    assert load_table(cfg.catalog, "sched.quiet", refresh=True).metadata_location != before

    # each table's threshold is spread over 0.75x-1.25x so tables fed alike do not compact together
    thresholds = [MaintenanceScheduler(cfg, after_files=100).files_threshold(f"ns.t{i}") for i in range(50)]
    assert all(75 <= t <= 125 for t in thresholds) and len(set(thresholds)) > 20
    # the premises of the counts above: busy due at 12 new files, not at 5 or 6; quiet at 20, not at 2
    assert 6 < scheduler.files_threshold("sched.busy") <= 12 and 2 < scheduler.files_threshold("sched.quiet") <= 20

    off = MaintenanceScheduler(cfg, interval_seconds=3600, clock=lambda: 1000.0, after_files=0)
    assert off.maybe_run(names, {"sched.busy": 1000}) == []  # 0: the file trigger is off


def test_scheduler_deletes_the_files_its_compaction_replaced_once_no_snapshot_reads_them(tmp_path):
    props = _sqlite_props(tmp_path)
    table = build_table(SqlCatalog("maint", **props), "sched", "replaced", batches=6)
    data, small = duck_rows(table), live_paths(table)
    cfg = parse_config(_router_config(props, target_file_size_bytes=MiB, retain_last_snapshots=10))
    scheduler = MaintenanceScheduler(cfg, interval_seconds=3600, clock=lambda: 1000.0, after_files=10)

    [first] = scheduler.maybe_run(["sched.replaced"], {"sched.replaced": 18})
    assert first.compaction.files_removed == 18 and first.replaced_deleted == []
    assert all(os.path.exists(p) for p in small)  # older snapshots still read them

    # the job's commits expire those snapshots and delete nothing (router/catalog/commit.py)
    table.refresh()
    older = [s.snapshot_id for s in table.metadata.snapshots if s.snapshot_id != table.metadata.current_snapshot_id]
    table.maintenance.expire_snapshots().by_ids(older).commit()
    assert all(os.path.exists(p) for p in small)

    [second] = scheduler.maybe_run(["sched.replaced"], {"sched.replaced": 10})
    assert second.error is None and sorted(map(local, second.replaced_deleted)) == sorted(small)
    assert not any(os.path.exists(p) for p in small)
    assert duck_rows(table) == data and len(live_paths(table)) == DAYS
    assert scheduler.replaced == {}


def test_cli_maintain_end_to_end(tmp_path):
    props = _sqlite_props(tmp_path)
    cat = SqlCatalog("maint", **props)
    good = build_table(cat, "app", "good", batches=10)
    broken = build_table(cat, "app", "broken", batches=2)
    os.remove(local(broken.metadata_location))  # loading it fails; the others must still be maintained
    data, location = rows(good), good.metadata_location
    cfg = tmp_path / "icerouter.yaml"
    cfg.write_text(yaml.safe_dump(_router_config(props, retain_last_snapshots=1, max_snapshot_age_seconds=1,
                                                 target_file_size_bytes=MiB)))
    env = {**os.environ, "PYTHONPATH": str(REPO)}

    def run(*args):
        return subprocess.run([sys.executable, "-m", "router.cli", "maintain", "--config", str(cfg), *args],
                              capture_output=True, text=True, cwd=REPO, env=env, timeout=120)

    dry = run("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "dry run" in dry.stdout and "would rewrite 30 files" in dry.stdout
    assert good.refresh().metadata_location == location

    time.sleep(1.1)
    done = run("--table", "app.*")
    assert done.returncode == 0, done.stderr
    lines = {line.split()[0]: line for line in done.stdout.splitlines()[2:]}
    assert "FAILED" in lines["app.broken"]
    assert "30 -> 3" in lines["app.good"] and "ok, rewrote 30 -> 3 files" in lines["app.good"]
    assert "maintained 1 tables, 1 failed" in done.stdout.splitlines()[0]
    assert rows(good) == data and len(live_paths(good)) == DAYS and len(good.metadata.snapshots) == 1

    none = run("--table", "nothing.*")
    assert none.returncode == 0 and "no tables match" in none.stdout


def test_files_of_an_older_partition_spec_are_rewritten_into_the_current_one(catalog, unique_name):
    ns = unique_name("spec")
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.events", schema=_schema())  # unpartitioned at first
    for b in range(4):
        table.append(_batch(b, evolved=False))
    with table.update_spec() as update:
        update.add_field("ts", DayTransform(), "ts_day")
    for b in range(4, 8):
        table.append(_batch(b, evolved=False))
    data, duck = rows(table), duck_rows(table)
    groups = plan_compaction(table, MiB)
    assert {g.spec_id for g in groups} == {0, 1} and len(groups) == 1 + DAYS

    compact(table, groups, MiB)

    assert rows(table) == data and duck_rows(table) == duck
    files = [t.file for t in table.refresh().scan().plan_files()]
    # the unpartitioned group lands as one file per day, next to each day's rewritten files
    assert len(files) == 2 * DAYS and {f.spec_id for f in files} == {table.spec().spec_id}
    compact(table, plan_compaction(table, MiB), MiB)
    assert len(live_paths(table)) == DAYS and rows(table) == data


def test_orphan_removal_refuses_when_live_files_are_missing(catalog, unique_name):
    table = build_table(catalog, unique_name("lost"), batches=2)
    stray = stray_file(table, "orphan-old.parquet")
    remove(sorted(live_paths(table))[0])
    with pytest.raises(MaintenanceError, match="live data files not found"):
        remove_orphans(table, ORPHAN_AGE, clock=lambda: time.time() + ORPHAN_AGE)
    assert exists(stray)


def test_a_planned_file_that_vanished_aborts_without_changing_the_table(catalog, unique_name):
    table = build_table(catalog, unique_name("vanish"), batches=4)
    groups = plan_compaction(table, MiB)
    location, disk = table.metadata_location, set(files_on_disk(table))
    victim = local(groups[-1].files[0].file_path)
    remove(victim)  # as if another maintenance run had replaced it and expired the old snapshot
    with pytest.raises(CompactionConflict, match="vanished"):
        compact(table, groups, MiB)
    assert table.refresh().metadata_location == location
    assert set(files_on_disk(table)) == disk - {victim}  # files written for earlier groups were removed
