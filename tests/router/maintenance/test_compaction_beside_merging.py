"""The job's compaction beside the commits' small-file merging (router/maintenance/compaction.py
`leave_below`, router/maintenance/run.py `compaction_floor`), on real catalogs.

Merging takes the files under its limit, compaction those above: a compaction that also planned
small files lost its commit to the first merge that took one of them, so a busy table kept its
big files for good.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog.merge_small import merged_below
from router.config import MaintenanceConfig, parse_config
from router.maintenance import CompactionConflict, MaintenanceScheduler, compact, maintain_table, plan_compaction
from router.maintenance.compaction import plan_groups
from router.maintenance.run import compaction_floor
from router.catalog.snapshot_files import live_delete_files, snapshot_files
from tests.duckdb_reader import read_iceberg_rows
from tests.router.catalog.rowlevel import append, assert_readers_agree, make_table, rows_for, upsert

KiB, MiB = 1 << 10, 1 << 20
TARGET = 4 * MiB
FLOOR = 128 * KiB  # files under it are the merge's in these tests
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "payload", StringType(), required=False))


def _rows(start: int, n: int, payload_bytes: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "payload": pa.array([os.urandom(payload_bytes // 2).hex() for _ in range(n)], pa.string())})


def mixed_table(catalog, namespace: str, small: int = 4, big: int = 3):
    """`small` files of 20 rows (a few KiB) and `big` files of 3,000 random 100-byte payloads (~170 KiB)."""
    catalog.create_namespace_if_not_exists(namespace)
    table = catalog.create_table(f"{namespace}.events", schema=SCHEMA)
    start = 0
    for n, payload in [(20, 10)] * small + [(3000, 100)] * big:
        table.append(_rows(start, n, payload))
        start += n
    return table.refresh()


def _live(table) -> dict[str, int]:
    return {t.file.file_path: t.file.file_size_in_bytes for t in table.refresh().scan().plan_files()}


def _ids(table) -> list[int]:
    return sorted(table.refresh().scan().to_arrow().column("id").to_pylist())


def test_compaction_leaves_the_files_merging_takes_and_rewrites_the_others(catalog, unique_name):
    table = mixed_table(catalog, unique_name("merging"))
    live = _live(table)
    small = {p for p, size in live.items() if size < FLOOR}
    assert len(small) == 4 and len(live) == 7  # the premise: four files under the floor, three over it
    ids = _ids(table)

    everything = {f.file_path for g in plan_compaction(table, TARGET) for f in g.files}
    assert everything == set(live)  # without a floor every file is planned
    planned = {f.file_path for g in plan_compaction(table, TARGET, leave_below=FLOOR) for f in g.files}
    assert planned == set(live) - small

    config = MaintenanceConfig(target_file_size_bytes=TARGET, retain_last_snapshots=10)
    report = maintain_table(table, config, orphans=False, leave_below=FLOOR)
    assert report.compaction.files_removed == 3 and report.compaction.files_added == 1
    after = _live(table)
    assert small <= set(after) and len(after) == 5  # the small files untouched, the big ones in one
    assert _ids(table) == ids
    assert sorted(r["id"] for r in read_iceberg_rows(table)) == ids  # a second reader sees the same rows


def test_a_merge_landing_during_compaction_no_longer_makes_it_lose(catalog, unique_name):
    """Both plan, then a merge of the small files lands first (as the job's commits do every few
    batches): the compaction that planned small files too loses; the one above the floor lands."""
    table = mixed_table(catalog, unique_name("race"))
    ids = _ids(table)
    with_small = plan_compaction(table, TARGET)
    above = plan_compaction(table, TARGET, leave_below=FLOOR)
    small = [f for f in table.scan().plan_files() if f.file.file_size_in_bytes < FLOOR]
    merge = plan_groups([t.file for t in small], TARGET)  # stands in for the commit's merge of them
    assert compact(table, merge).files_removed == 4

    with pytest.raises(CompactionConflict):
        compact(table.refresh(), with_small)
    result = compact(table.refresh(), above)
    assert result.files_removed == 3 and result.files_added == 1
    assert len(_live(table)) == 2 and _ids(table) == ids
    assert sorted(r["id"] for r in read_iceberg_rows(table)) == ids


def test_a_table_with_delete_files_is_compacted_whole(catalog, unique_name):
    """Merging leaves tables with delete files (upserts, change streams) to compaction: the floor
    does not apply to them."""
    table = make_table(catalog, unique_name("deletes"))
    expected: dict = {}
    append(table, rows_for(range(2000), "v0" * 40), expected)
    for batch in range(3):
        append(table, rows_for(range(5000 + batch * 10, 5010 + batch * 10), "v0"), expected)
    big = max(snapshot_files(table).data.values(), key=lambda f: f.file_size_in_bytes)
    floor, target = big.file_size_in_bytes, 4 * big.file_size_in_bytes  # only the big file is at the floor
    assert plan_compaction(table, target, leave_below=floor) == []  # it alone: nothing to pack

    upsert(table, rows_for([], "v1"), [1, 5000], expected)  # a position-delete file
    assert live_delete_files(table)
    planned = {f.file_path for g in plan_compaction(table, target, leave_below=floor) for f in g.files}
    assert planned == set(snapshot_files(table).data)
    compact(table, plan_compaction(table, target, leave_below=floor))
    assert_readers_agree(table, expected)


def test_the_job_scheduler_leaves_small_files_to_merging_only_when_merging_is_on(tmp_path):
    from router.devstack.catalog import sqlite_catalog_properties

    props = sqlite_catalog_properties(str(tmp_path))
    mixed_table(SqlCatalog("maint", **props), "sched")

    def scheduler(merge_at: int) -> MaintenanceScheduler:
        cfg = parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
                            "registry": {"url": "http://127.0.0.1:9"},
                            "catalog": {"name": "maint", "properties": props},
                            "maintenance": {"target_file_size_bytes": 256 * KiB, "retain_last_snapshots": 10,
                                            "merge_small_files_at": merge_at}})
        return MaintenanceScheduler(cfg, interval_seconds=3600, clock=lambda: 0.0, after_files=1)

    # a 256 KiB target: merging takes files under 192 KiB (75% of it), which is every file here
    assert compaction_floor(MaintenanceConfig(target_file_size_bytes=256 * KiB, merge_small_files_at=16)) \
        == merged_below(256 * KiB) == 192 * KiB
    assert compaction_floor(MaintenanceConfig(target_file_size_bytes=128 * MiB, merge_small_files_at=16)) == 16 * MiB
    assert compaction_floor(MaintenanceConfig(target_file_size_bytes=128 * MiB, merge_small_files_at=0)) == 0

    [merging] = scheduler(16).maybe_run(["sched.events"], {"sched.events": 7})
    assert merging.error is None and merging.planned_groups == [] and merging.compaction.files_removed == 0
    [alone] = scheduler(0).maybe_run(["sched.events"], {"sched.events": 7})
    assert alone.error is None and alone.compaction.files_removed >= 2
