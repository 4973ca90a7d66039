"""Sorted data files (router/catalog/sorting.py): the order itself, then every writer of a sorted table
(appends, the batch's small-file merge, compaction) on real SQLite and PostgreSQL catalogs, the files
read back with pyarrow, the rows with DuckDB and pyiceberg.
"""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.catalog.sorting import sort_rows
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from router.maintenance.compaction import compact
from router.maintenance.compaction_plan import plan_compaction
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "name", StringType(), required=False),
                NestedField(3, "ts", TimestamptzType(), required=False))
SORT_BY = ["name desc nulls first", "id"]
JOB = "sorting-test"
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


def test_each_field_has_its_own_direction_and_null_order() -> None:
    data = pa.table({"id": pa.array([3, None, 1, 2, None, 1], pa.int64()),
                     "name": ["b", "a", None, "a", None, "b"],
                     "ts": pa.array([T0] * 6, pa.timestamp("us", "UTC"))})
    order = SortOrder(SortField(2, IdentityTransform(), SortDirection.DESC, NullOrder.NULLS_FIRST),
                      SortField(1, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_LAST))
    rows = sort_rows(data, SCHEMA, order).select(["name", "id"]).to_pylist()
    assert [(r["name"], r["id"]) for r in rows] == [(None, 1), (None, None), ("b", 1), ("b", 3), ("a", 2),
                                                    ("a", None)]


def test_a_transform_sorts_by_its_value_and_ties_keep_their_order() -> None:
    ts = [T0 + dt.timedelta(days=2, hours=5), T0 + dt.timedelta(hours=9), T0 + dt.timedelta(days=2), T0]
    data = pa.table({"id": pa.array([0, 1, 2, 3], pa.int64()), "name": ["x"] * 4,
                     "ts": pa.array(ts, pa.timestamp("us", "UTC"))})
    order = SortOrder(SortField(3, DayTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST))
    assert sort_rows(data, SCHEMA, order).column("id").to_pylist() == [1, 3, 0, 2]  # by day, stable within it


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def rows_for(first: int, count: int, seed: int) -> pa.Table:
    ids = list(range(first, first + count))
    random.Random(seed).shuffle(ids)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "name": [None if i % 5 == 0 else f"n{i % 7}" for i in ids],
                     "ts": pa.array([T0 + dt.timedelta(hours=i) for i in ids], pa.timestamp("us", "UTC"))})


def in_sort_order(rows: list[dict]) -> bool:
    """name desc nulls first, then id asc."""
    keys = [(r["name"] is not None, _desc(r["name"]), r["id"]) for r in rows]
    return keys == sorted(keys)


def _desc(name: str | None) -> tuple:
    return tuple(-ord(c) for c in name) + (1,) if name is not None else ()


def check_files(config: CatalogConfig, table_id: str, expected: list[int]) -> list:
    """Every live file sorted within itself and claiming the table's order; every row once for both readers."""
    table = load_table(config, table_id, refresh=True)
    files = [task.file for task in table.scan().plan_files()]
    for f in files:
        assert f.sort_order_id == table.metadata.default_sort_order_id == 1
        with table.io.new_input(f.file_path).open() as stream:
            rows = pq.read_table(stream, columns=["name", "id"]).to_pylist()
        assert in_sort_order(rows), f.file_path
    assert sorted(read_iceberg(table).column("id").to_pylist()) == sorted(expected)
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == sorted(expected)
    return files


def commit_rows(config: CatalogConfig, table_id: str, first: int, count: int, batch: int,
                maintenance: MaintenanceConfig | None = None):
    table = load_table(config, table_id, refresh=True)
    result = TableResult(table_id, data_files=write_data_files(table, rows_for(first, count, batch)), rows=count,
                         offsets={"t/0": [first, first + count - 1]})
    outcome = commit_table(config, result, JOB, batch, maintenance=maintenance)
    assert outcome.status == "committed"
    return outcome


def test_compaction_of_a_sorted_table_writes_sorted_files(catalog_config, unique_name):
    table_id = f"{unique_name('s')}.t"
    create_table(catalog_config, table_id, SCHEMA, sort_by=SORT_BY)
    for batch in range(6):
        commit_rows(catalog_config, table_id, batch * 50, 50, batch)
    assert len(check_files(catalog_config, table_id, list(range(300)))) == 6
    table = load_table(catalog_config, table_id, refresh=True)
    result = compact(table, plan_compaction(table, 1 << 27), 1 << 27)
    assert (result.files_removed, result.files_added, result.rows) == (6, 1, 300)
    [merged] = check_files(catalog_config, table_id, list(range(300)))
    assert merged.record_count == 300  # one file, sorted as a whole (not six sorted runs)


def test_a_sorted_table_whose_files_roll_over_sorts_each_file(catalog_config, unique_name):
    table_id = f"{unique_name('r')}.t"
    create_table(catalog_config, table_id, SCHEMA, sort_by=SORT_BY)
    for batch in range(4):
        commit_rows(catalog_config, table_id, batch * 2000, 2000, batch)
    table = load_table(catalog_config, table_id, refresh=True)
    target = 40_000  # Arrow bytes of about a batch: the rewrite rolls over into several files
    result = compact(table, plan_compaction(table, 1 << 27), target)
    assert result.files_added > 1 and result.rows == 8000
    check_files(catalog_config, table_id, list(range(8000)))


def test_the_batch_merge_of_small_files_writes_a_sorted_file(catalog_config, unique_name):
    table_id = f"{unique_name('m')}.t"
    create_table(catalog_config, table_id, SCHEMA, sort_by=SORT_BY)
    rule = MaintenanceConfig(merge_small_files_at=4, expire_every_commits=1000)
    merged = sum(commit_rows(catalog_config, table_id, batch * 20, 20, batch, rule).merged for batch in range(8))
    assert merged > 0
    files = check_files(catalog_config, table_id, list(range(160)))
    assert any(f.record_count > 20 for f in files)  # a merged file among them, sorted like the others
