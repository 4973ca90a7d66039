"""Small files merged in the batch's own commit (router/catalog/merge_small.py): the table's file count
stays bounded, its rows are each batch's rows once (DuckDB and pyiceberg agree), across a schema
evolution, a lost compare-and-swap whose merged files are gone, several committers of one table
(fan-in) and the one-transaction commit of a task's tables. SQLite and PostgreSQL catalogs. The
size-tiered choice (big files stay, the ratio, the skipped looks) in test_merge_policy.py.
"""

from __future__ import annotations

import multiprocessing
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, load_table
from router.catalog.batch_commit import commit_tables
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.catalog.merge_small import SmallFileMerge, transient_codec
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from router.progress import stored_progress
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))
JOB = "merge-test"
AT = 6
RULE = MaintenanceConfig(merge_small_files_at=AT, expire_every_commits=1000)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def result_for(config: CatalogConfig, table_id: str, key: str, first: int, count: int, codec: str | None = None,
               **extra) -> TableResult:
    """Files for rows first..first+count-1 of `key` ("topic/partition"), written (`codec`: the transient
    codec the job passes while merging) but not committed."""
    table = load_table(config, table_id, refresh=True)
    ids = pa.array(range(first, first + count), pa.int64())
    columns = {"id": ids, "body": pa.array([f"{key}:{i}" for i in ids.to_pylist()])}
    columns.update({name: pa.array([fn(i) for i in ids.to_pylist()]) for name, fn in extra.items()})
    return TableResult(table_id, data_files=write_data_files(table, pa.table(columns), transient_codec=codec),
                       rows=count, offsets={key: [first, first + count - 1]})


def live_files(config: CatalogConfig, table_id: str) -> list:
    return list(load_table(config, table_id, refresh=True).scan().plan_files())


def check_rows(config: CatalogConfig, table_id: str, expected: list[int]) -> pa.Table:
    """DuckDB and pyiceberg read the same rows: `expected` ids once each, same checksum."""
    table = load_table(config, table_id, refresh=True)
    duck, ours = read_iceberg(table), table.scan().to_arrow()
    assert sorted(duck.column("id").to_pylist()) == sorted(ours.column("id").to_pylist()) == sorted(expected)
    for name in ours.column_names:  # a checksum of every column, null-aware
        def digest(t):
            return sorted(map(str, t.column(name).to_pylist()))
        assert digest(duck) == digest(ours), name
    summary = table.current_snapshot().summary
    assert int(summary["total-records"]) == len(expected)
    assert int(summary["total-data-files"]) == len(live_files(config, table_id))
    return ours


def test_files_stay_bounded_and_rows_are_written_once(catalog_config, unique_name):
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    counts, merged = [], 0
    for batch in range(40):
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 7, 7), JOB,
                               batch, maintenance=RULE)
        assert outcome.status == "committed"
        merged += outcome.merged
        counts.append(len(live_files(catalog_config, table_id)))
    assert max(counts) <= AT and merged > 0
    table = load_table(catalog_config, table_id, refresh=True)
    assert stored_progress(table, JOB)["offsets"] == {"t/0": 280}
    check_rows(catalog_config, table_id, list(range(280)))
    merges = [s for s in table.metadata.snapshots if s.summary.operation.value == "overwrite"]
    assert merges and all(int(s.summary["deleted-data-files"]) >= 2 for s in merges)
    assert len(table.metadata.snapshots) == 40  # no commit of its own


def test_uncompressed_appends_are_merged_into_a_file_of_the_tables_codec(catalog_config, unique_name):
    """While merging, the job writes its small appends uncompressed (transient_codec): the merged file
    has the table's codec (zstd), the rows are each batch's once."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    codec = transient_codec(RULE)
    assert codec == "none"
    table = load_table(catalog_config, table_id)

    def codecs(path: str) -> set[str]:
        with table.io.new_input(path).open() as stream:
            meta = pq.ParquetFile(stream).metadata
        return {meta.row_group(g).column(c).compression for g in range(meta.num_row_groups)
                for c in range(meta.num_columns)}

    merged = 0
    for batch in range(AT + 4):
        result = result_for(catalog_config, table_id, "t/0", batch * 5, 5, codec)
        assert [codecs(f.file_path) for f in result.data_files] == [{"UNCOMPRESSED"}]
        merged += commit_table(catalog_config, result, JOB, batch, maintenance=RULE).merged
    assert merged > 0
    live = live_files(catalog_config, table_id)
    merged_files = [t.file for t in live if t.file.record_count > 5]
    assert merged_files and all(codecs(f.file_path) == {"ZSTD"} for f in merged_files)
    check_rows(catalog_config, table_id, list(range((AT + 4) * 5)))


def test_transient_codec_only_while_merging():
    assert transient_codec(MaintenanceConfig(merge_small_files_at=16)) == "none"
    assert transient_codec(MaintenanceConfig(merge_small_files_at=16, transient_file_codec="lz4")) == "lz4"
    assert transient_codec(MaintenanceConfig(merge_small_files_at=16, transient_file_codec="table")) is None
    assert transient_codec(MaintenanceConfig(merge_small_files_at=0)) is None
    assert transient_codec(None) is None


def test_off_leaves_every_file(catalog_config, unique_name):
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    off = MaintenanceConfig(merge_small_files_at=0)
    for batch in range(AT + 3):
        assert commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch, 1), JOB, batch,
                            maintenance=off).merged == 0
    assert len(live_files(catalog_config, table_id)) == AT + 3


def test_merge_across_a_schema_evolution(catalog_config, unique_name):
    """Files written before a column was added merge with later ones: the old rows read null there."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    for batch in range(3):
        commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 2, 2), JOB, batch,
                     maintenance=RULE)
    table = load_table(catalog_config, table_id, refresh=True)
    with table.update_schema() as update:
        update.add_column("score", LongType())
    for batch in range(3, 12):
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 2, 2, score=lambda i: i * 10),
                               JOB, batch, maintenance=RULE)
        assert outcome.status == "committed"
    assert len(live_files(catalog_config, table_id)) <= AT
    rows = check_rows(catalog_config, table_id, list(range(24))).to_pylist()
    assert {r["id"]: r["score"] for r in rows} == {i: (i * 10 if i >= 6 else None) for i in range(24)}


def fill(config: CatalogConfig, table_id: str, batches: int) -> None:
    for batch in range(batches):
        commit_table(config, result_for(config, table_id, "t/0", batch * 3, 3), JOB, batch,
                     maintenance=MaintenanceConfig(merge_small_files_at=0))


def staged_merge(catalog_config, unique_name):
    """A table holding AT small files and a batch ("u/0", 4 rows) whose merge is staged (its merged
    file written) but not committed: (table id, table, merge, batch result)."""
    from router.catalog.sql import StagedTransaction

    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    fill(catalog_config, table_id, AT)
    table = load_table(catalog_config, table_id, refresh=True)
    merge = SmallFileMerge(AT, RULE.target_file_size_bytes)
    ours = result_for(catalog_config, table_id, "u/0", 0, 4)
    assert merge.stage(StagedTransaction(table), table, ours.data_files, {})  # wrote the merged file
    return table_id, table, merge, ours


def test_lost_swap_with_merged_files_gone_commits_the_new_rows_once(catalog_config, unique_name):
    """A merge staged on a snapshot whose sources another committer then removed: the retry commits
    the batch's rows alone (once), and the merged file it wrote is deleted."""
    table_id, table, merge, ours = staged_merge(catalog_config, unique_name)
    written = [f.file_path for f in merge.written]
    assert len(merge.sources) == AT and all(table.io.new_input(p).exists() for p in written)
    # another committer merges the same files first (a fan-in task of the same batch)
    other = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", AT * 3, 3), JOB, AT,
                         maintenance=RULE)
    assert other.merged == AT
    outcome = commit_table(catalog_config, ours, JOB, 0, maintenance=RULE, merge=merge)
    assert outcome.status == "committed" and outcome.merged == 0
    assert not any(table.io.new_input(p).exists() for p in written)
    check_rows(catalog_config, table_id, list(range(AT * 3 + 3)) + list(range(4)))
    assert stored_progress(load_table(catalog_config, table_id, refresh=True), JOB)["offsets"] == \
        {"t/0": AT * 3 + 3, "u/0": 4}


def test_lost_swap_with_merged_files_live_stages_the_same_merge(catalog_config, unique_name):
    """Another committer appended meanwhile (the sources stay live): the same merged file is committed."""
    table_id, table, merge, ours = staged_merge(catalog_config, unique_name)
    written = [f.file_path for f in merge.written]
    fill_more = result_for(catalog_config, table_id, "t/0", AT * 3, 3)
    assert commit_table(catalog_config, fill_more, JOB, AT, maintenance=MaintenanceConfig(merge_small_files_at=0)
                        ).status == "committed"
    outcome = commit_table(catalog_config, ours, JOB, 0, maintenance=RULE, merge=merge)
    assert outcome.status == "committed" and outcome.merged == AT
    paths = {t.file.file_path for t in live_files(catalog_config, table_id)}
    assert set(written) <= paths and len(paths) == 3  # merged, the other committer's, ours
    check_rows(catalog_config, table_id, list(range(AT * 3 + 3)) + list(range(4)))


def _commit_part(config: CatalogConfig, table_id: str, key: str, batches: int, barrier) -> list:
    barrier.wait()
    outcomes = []
    for batch in range(batches):
        outcome = commit_table(config, result_for(config, table_id, key, batch * 5, 5), JOB, batch, retries=30,
                               maintenance=RULE, where="task")
        outcomes.append((outcome.status, outcome.merged, outcome.attempts))
    return outcomes


def test_fan_in_table_committed_by_several_processes(catalog_config, unique_name):
    """Three processes commit parts of one table every batch, each merging when due: every row once."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Manager().Barrier(3)
    with ctx.Pool(3) as pool:
        parts = pool.starmap(_commit_part, [(catalog_config, table_id, f"t/{p}", 15, barrier) for p in range(3)])
    assert all(status == "committed" for part in parts for status, _, _ in part)
    assert sum(merged for part in parts for _, merged, _ in part) > 0
    assert len(live_files(catalog_config, table_id)) <= AT + 2  # three committers may each add one past AT
    expected = [i for _ in range(3) for i in range(75)]
    check_rows(catalog_config, table_id, expected)
    offsets = stored_progress(load_table(catalog_config, table_id, refresh=True), JOB)["offsets"]
    assert offsets == {"t/0": 75, "t/1": 75, "t/2": 75}


def test_one_transaction_for_a_tasks_tables_merges_each(catalog_config, unique_name):
    ns = unique_name("n")
    tables = [f"{ns}.t{i}" for i in range(3)]
    for t in tables:
        create_table(catalog_config, t, SCHEMA)
    counts = []
    for batch in range(20):
        results = [result_for(catalog_config, t, "t/0", batch * 2, 2) for t in tables]
        outcomes = commit_tables(catalog_config, results, JOB, batch, maintenance=RULE, where="task")
        assert [o.status for o in outcomes] == ["committed"] * 3 and {o.attempts for o in outcomes} == {1}
        counts.append(max(len(live_files(catalog_config, t)) for t in tables))
    assert max(counts) <= AT
    for t in tables:
        check_rows(catalog_config, t, list(range(40)))


def test_tables_with_deletes_are_left_to_compaction(catalog_config, unique_name):
    """An upsert result never merges (its rows carry position deletes)."""
    from router.catalog.merge_small import merge_for
    result = TableResult("n.t", data_files=[object()], rows=1, offsets={"t/0": [0, 0]})
    assert isinstance(merge_for(result, RULE), SmallFileMerge)
    assert merge_for(result, MaintenanceConfig(merge_small_files_at=0)) is None
    assert merge_for(result, None) is None
    result.upsert = object()
    assert merge_for(result, RULE) is None


def test_a_merge_that_fails_never_keeps_the_batch_from_committing(catalog_config, unique_name):
    """A source that cannot be read (here: its bytes replaced while the commit runs): the batch's rows
    are appended alone, once, and the next commit merges."""
    from urllib.parse import urlparse

    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    fill(catalog_config, table_id, AT)
    victim = urlparse(live_files(catalog_config, table_id)[0].file.file_path).path
    with open(victim, "rb") as fh:
        saved = fh.read()
    with open(victim, "wb") as fh:
        fh.write(b"not parquet" * 10)
    try:
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "u/0", 0, 4), JOB, AT,
                               maintenance=MaintenanceConfig(merge_small_files_at=AT))
    finally:
        with open(victim, "wb") as fh:
            fh.write(saved)
    assert outcome.status == "committed" and outcome.merged == 0 and outcome.attempts == 1
    assert len(live_files(catalog_config, table_id)) == AT + 1
    outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "u/0", 4, 4), JOB, AT + 1,
                           maintenance=MaintenanceConfig(merge_small_files_at=AT))
    assert outcome.status == "committed" and outcome.merged >= 2
    check_rows(catalog_config, table_id, list(range(AT * 3)) + list(range(8)))


def test_a_merge_failing_mid_write_deletes_its_partial_file(catalog_config, unique_name, monkeypatch):
    """The merged file is streamed: a failure once it was started (here the write of its second row
    group) deletes it, and the batch's rows are appended alone, once."""
    from urllib.parse import urlparse

    from router.catalog import merge_small

    started: list[str] = []
    real = merge_small.RollingWriter

    class FailingWriter(merge_small.RollingWriter):
        def write(self, batch):
            if self.paths:
                started.extend(self.paths)
                raise OSError("no space left on device")
            super().write(batch)

    monkeypatch.setattr(merge_small, "BUFFER_BYTES", 1)  # every batch read goes out as a row group
    monkeypatch.setattr(merge_small, "MAX_BATCH_ROWS", 1)  # and every row is a batch
    monkeypatch.setattr(merge_small, "MIN_BATCH_ROWS", 1)
    monkeypatch.setattr(merge_small, "RollingWriter", FailingWriter)
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    fill(catalog_config, table_id, AT)
    outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "u/0", 0, 4), JOB, AT, maintenance=RULE)
    assert outcome.status == "committed" and outcome.merged == 0
    assert len(started) == 1 and not load_table(catalog_config, table_id).io.new_input(started[0]).exists()
    files = live_files(catalog_config, table_id)
    data_dir = os.path.dirname(urlparse(files[0].file.file_path).path)
    assert len(os.listdir(data_dir)) == len(files) == AT + 1  # nothing else was left behind
    monkeypatch.setattr(merge_small, "RollingWriter", real)
    outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "u/0", 4, 4), JOB, AT + 1,
                           maintenance=RULE)
    assert outcome.status == "committed" and outcome.merged >= 2
    check_rows(catalog_config, table_id, list(range(AT * 3)) + list(range(8)))
