"""The job's background compaction (router/driver/housekeeping.py) on a real SQLite catalog, read by DuckDB."""

from __future__ import annotations

import threading
from dataclasses import replace

from pyiceberg.catalog.sql import SqlCatalog

from router.config import parse_config
from router.driver.housekeeping import BackgroundMaintenance
from tests.duckdb_reader import read_iceberg_rows
from tests.router.maintenance.test_maintenance import DAYS, MiB, _router_config, _sqlite_props, build_table, \
    live_paths


def _wait_for_maintenance() -> None:
    for thread in threading.enumerate():
        if thread.name == "icerouter-maintenance":
            thread.join(120)


def test_files_committed_while_maintenance_is_busy_count_towards_the_next_run(tmp_path):
    props = _sqlite_props(tmp_path)
    table = build_table(SqlCatalog("maint", **props), "bg", batches=4)  # 12 small files over DAYS days
    rows = read_iceberg_rows(table, order_by="id")
    cfg = parse_config(_router_config(props, target_file_size_bytes=MiB, retain_last_snapshots=10,
                                      compact_interval_seconds=3600, compact_after_files=10))
    maintenance = BackgroundMaintenance(cfg)

    maintenance.submit({"bg.events": 6})  # below the file trigger, far from the interval
    _wait_for_maintenance()
    assert maintenance.totals["runs"] == 0

    with maintenance._busy:  # a run in progress: this batch's files wait for the next submit
        maintenance.submit({"bg.events": 6})
    assert maintenance.totals["runs"] == 0 and len(live_paths(table)) == 12

    maintenance.submit({"bg.events": 0})  # 6 + 6 >= 10: due
    _wait_for_maintenance()
    assert maintenance.totals == {"runs": 1, "failed": 0, "files_removed": 12, "files_added": DAYS,
                                  "replaced_deleted": 0}
    assert len(live_paths(table)) == DAYS
    assert read_iceberg_rows(table.refresh(), order_by="id") == rows


def test_both_triggers_off_means_no_background_maintenance(tmp_path):
    cfg = parse_config(_router_config(_sqlite_props(tmp_path), compact_after_files=0))
    assert BackgroundMaintenance(cfg).enabled  # the interval still runs
    off = replace(cfg, maintenance=replace(cfg.maintenance, compact_interval_seconds=0))
    assert not BackgroundMaintenance(off).enabled
