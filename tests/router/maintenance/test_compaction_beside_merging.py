"""Compaction beside inline merging (router/maintenance/compaction_plan.plan_compaction's
`merged_inline_below`): on a table whose commits merge small files, compaction plans the files
merging never takes, so a merge landing meanwhile does not abort it. SQLite and PostgreSQL catalogs;
rows read back by DuckDB and pyiceberg.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pytest

from router.catalog import create_table, get_catalog, load_table
from router.catalog import merge_policy
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.config import MaintenanceConfig
from router.descriptors import TableResult
from router.exceptions import CompactionConflict
from router.maintenance import compact, maintain_table, plan_compaction
from tests.router.catalog.test_merge_small import JOB, SCHEMA, catalog_config, check_rows, live_files  # noqa: F401

MiB = 1 << 20
AT = 6
BIG_ROWS = 1500  # ~50 KB of Parquet: above the merge line the test draws (32 KiB), far below the target


@pytest.fixture
def merging(monkeypatch) -> MaintenanceConfig:
    """Inline merging at AT files with a 1 MiB target, its size line drawn at 32 KiB (64 KiB budget)."""
    monkeypatch.setattr(merge_policy, "MAX_BYTES", 64 * 1024)
    return MaintenanceConfig(merge_small_files_at=AT, target_file_size_bytes=MiB, expire_every_commits=1000)


def commit_rows(config, table_id: str, key: str, first: int, count: int, batch: int, maintenance,
                padded: bool = False):
    table = load_table(config, table_id, refresh=True)
    ids = list(range(first, first + count))
    bodies = [f"{key}:{i}:{os.urandom(16).hex() if padded else ''}" for i in ids]
    data = pa.table({"id": pa.array(ids, pa.int64()), "body": pa.array(bodies)})
    result = TableResult(table_id, data_files=write_data_files(table, data), rows=count,
                         offsets={key: [first, first + count - 1]})
    outcome = commit_table(config, result, JOB, batch, maintenance=maintenance)
    assert outcome.status == "committed"
    return outcome


def test_compaction_plans_what_merging_leaves_and_survives_a_merge(catalog_config, unique_name, merging):
    line = merge_policy.merge_candidate_limit(merging.target_file_size_bytes)
    assert line == 32 * 1024
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    off = MaintenanceConfig(merge_small_files_at=0, target_file_size_bytes=MiB)
    for batch in range(3):  # three files above the line: merging never takes them
        commit_rows(catalog_config, table_id, "t/0", batch * BIG_ROWS, BIG_ROWS, batch, off, padded=True)
    small_from = 3 * BIG_ROWS
    for batch in range(3, 3 + AT):  # small files, one a batch
        commit_rows(catalog_config, table_id, "t/0", small_from + (batch - 3) * 2, 2, batch, off)
    sizes = sorted(t.file.file_size_in_bytes for t in live_files(catalog_config, table_id))
    assert len(sizes) == 3 + AT and sizes[AT - 1] < line <= sizes[AT]

    planning = get_catalog(catalog_config).load_table(table_id)  # a handle of its own, as the scheduler's
    report = maintain_table(planning, merging, dry_run=True, orphans=False)  # the job's rule, as `maintain`
    beside = report.planned_groups
    assert len(beside) == 1 and all(f.file_size_in_bytes >= line for f in beside[0].files)
    assert len(beside[0].files) == 3
    everything = plan_compaction(planning, MiB)  # the rule without merging: small files too
    assert sum(len(g.files) for g in everything) == 3 + AT

    # a batch lands meanwhile and its commit merges the small files
    outcome = commit_rows(catalog_config, table_id, "t/0", small_from + AT * 2, 2, 3 + AT, merging)
    assert outcome.merged >= 2

    with pytest.raises(CompactionConflict):  # planned over small files: the merge took them
        compact(get_catalog(catalog_config).load_table(table_id), everything, MiB)
    result = compact(planning, beside, MiB)  # planned before the merge, on a handle that did not see it
    assert result.files_removed == 3 and result.files_added == 1

    expected = list(range(small_from + AT * 2 + 2))
    check_rows(catalog_config, table_id, expected)
    paths = {t.file.file_path for t in live_files(catalog_config, table_id)}
    assert not paths & {f.file_path for f in beside[0].files}


def test_without_big_files_compaction_plans_every_small_file(catalog_config, unique_name, merging):
    """Only files above the line that make a group change the plan: else all small files, as before."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    off = MaintenanceConfig(merge_small_files_at=0, target_file_size_bytes=MiB)
    commit_rows(catalog_config, table_id, "t/0", 0, BIG_ROWS, 0, off, padded=True)  # one big file: no group
    for batch in range(1, 5):
        commit_rows(catalog_config, table_id, "t/0", BIG_ROWS + batch, 1, batch, off)
    table = load_table(catalog_config, table_id, refresh=True)
    planned = maintain_table(table, merging, dry_run=True, orphans=False).planned_groups
    assert sum(len(g.files) for g in planned) == 5 == len(live_files(catalog_config, table_id))
