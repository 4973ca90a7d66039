"""Compaction of tables with position deletes (upserts), on the SQLite and PostgreSQL catalogs.

Rewritten files hold the rows left after the deletes, the delete files that named only rewritten
files leave in the same replace snapshot, and pyiceberg and DuckDB read the same rows before and
after. Every manifest is checked (no equality deletes, DELETES manifests hold position deletes).
"""

from __future__ import annotations

import pytest
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.typedef import Record

from router.catalog.snapshot_files import deleted_counts, live_delete_files, snapshot_files
from router.exceptions import CompactionConflict
from router.maintenance import compact, plan_compaction, plan_groups
from router.maintenance.compaction_plan import DELETE_RATIO
from tests.router.catalog.rowlevel import (
    append, assert_readers_agree, check_manifests, make_table, pyiceberg_rows, rows_for, upsert,
)

MiB = 1 << 20


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request):
    return request.getfixturevalue(f"{request.param}_catalog")


def _file(path: str, size: int, rows: int = 100, day: int = 1) -> DataFile:
    f = DataFile.from_args(content=DataFileContent.DATA, file_path=path, file_format=FileFormat.PARQUET,
                           partition=Record(day), record_count=rows, file_size_in_bytes=size)
    f.spec_id = 0
    return f


def test_plan_groups_takes_a_mostly_deleted_file_even_alone_and_large():
    target = 100
    files = [_file("big-dead", 90), _file("big-alive", 90), _file("small", 10, rows=10),
             _file("lonely", 10, rows=10, day=2), _file("gone", 80, day=3)]
    deleted = {"big-dead": 30, "big-alive": 29, "small": 1, "lonely": 2, "gone": 100}

    groups = plan_groups(files, target, deleted=deleted)

    assert DELETE_RATIO == 0.3
    assert [sorted(f.file_path for f in g.files) for g in groups] == [["big-dead", "small"], ["gone"]]
    assert [(g.deleted_rows, g.output_rows) for g in groups] == [(31, 79), (100, 0)]
    # 29% deleted and large: left as it is; a small file alone in its partition waits for a partner
    assert plan_groups(files, target) == []  # without deletes nothing is worth a rewrite


@pytest.mark.parametrize("layout", ["unpartitioned", "identity", "bucket_day"])
def test_compaction_applies_position_deletes_and_drops_their_files(catalog, unique_name, layout):
    table = make_table(catalog, unique_name("compact"), layout)
    expected: dict = {}
    for batch in range(4):
        append(table, rows_for(range(batch * 30, batch * 30 + 30), "v0"), expected)
    for version in range(1, 4):
        upsert(table, rows_for(range(version, 120, 9), f"v{version}"), [100 + version, 50 + version], expected)
    assert_readers_agree(table, expected)
    deleted_before = sum(deleted_counts(table).values())
    assert deleted_before and int(table.current_snapshot().summary["total-delete-files"]) > 0

    groups = plan_compaction(table, MiB)
    result = compact(table, groups, MiB)

    assert_readers_agree(table, expected)
    rewritten = {f.file_path for g in groups for f in g.files}
    assert result.rows_deleted == deleted_before == sum(g.deleted_rows for g in groups)
    assert result.rows == len(expected) == int(table.current_snapshot().summary["total-records"])
    summary = table.current_snapshot().summary
    assert summary.operation.value == "replace"
    assert summary["removed-position-delete-files"] == str(len(result.removed_delete_files)) != "0"
    assert summary["total-delete-files"] == summary["total-position-deletes"] == "0"
    assert not live_delete_files(table)
    assert not rewritten & set(snapshot_files(table).data)
    assert check_manifests(table)["live_deletes"] == 0  # one DELETES manifest left: it records the removals
    # upserts go on against the compacted table
    upsert(table, rows_for([5, 6], "v9"), [7], expected)
    assert_readers_agree(table, expected)
    check_manifests(table)


def test_a_delete_file_naming_a_file_left_alone_stays(catalog, unique_name):
    table = make_table(catalog, unique_name("partial"))
    expected: dict = {}
    append(table, rows_for(range(2000), "v0" * 40), expected)  # large: left alone by the size rule
    for batch in range(3):
        append(table, rows_for(range(5000 + batch * 10, 5010 + batch * 10), "v0"), expected)
    upsert(table, rows_for([], "v1"), [1, 2, 5000, 5015], expected)  # one delete file naming big and small files
    big = next(p for p, f in snapshot_files(table).data.items() if f.record_count == 2000)

    groups = plan_compaction(table, snapshot_files(table).data[big].file_size_in_bytes + 1)
    assert big not in {f.file_path for g in groups for f in g.files}
    result = compact(table, groups)

    assert_readers_agree(table, expected)
    assert result.removed_delete_files == [] and result.rows_deleted == 2
    [kept] = live_delete_files(table)
    assert [f.file_path for f in kept.data_files] == [big]  # still needed for the big file's rows 1 and 2
    assert sum(deleted_counts(table).values()) == 2
    check_manifests(table)


def test_a_mostly_deleted_large_file_is_rewritten_alone(catalog, unique_name):
    table = make_table(catalog, unique_name("dead"))
    expected: dict = {}
    append(table, rows_for(range(1000), "v0" * 40), expected)
    target = snapshot_files(table).data[next(iter(snapshot_files(table).data))].file_size_in_bytes
    upsert(table, rows_for([], "x"), range(0, 1000, 4), expected)  # 25%: below the ratio
    assert plan_compaction(table.refresh(), target) == []
    upsert(table, rows_for([], "x"), range(1, 1000, 8), expected)  # 37.5%
    [group] = plan_compaction(table.refresh(), target)
    assert len(group.files) == 1 and group.deleted_rows == 375

    result = compact(table, [group], target)

    assert result.files_removed == 1 and result.rows == 625 and len(result.removed_delete_files) == 2
    assert_readers_agree(table, expected)
    assert table.current_snapshot().summary["total-delete-files"] == "0"
    check_manifests(table)


def test_rows_deleted_during_compaction_abort_it(catalog, unique_name):
    ns = unique_name("race")
    table = make_table(catalog, ns, "identity")
    expected: dict = {}
    for batch in range(3):
        append(table, rows_for(range(batch * 20, batch * 20 + 20), "v0"), expected)
    upsert(table, rows_for([1], "v1"), [2], expected)
    groups = plan_compaction(table, MiB)
    location = table.metadata_location

    writer = catalog.load_table(f"{ns}.t")
    upsert(writer, rows_for([4, 25], "v2"), [30], expected)  # deletes rows of planned files meanwhile

    with pytest.raises(CompactionConflict, match="deleted during compaction"):
        compact(table, groups, MiB)
    assert table.refresh().metadata_location != location  # only the writer's snapshot landed
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert_readers_agree(table, expected)
    assert pyiceberg_rows(table) == [expected[k] for k in sorted(expected)]
    # planned again, it goes through
    compact(table, plan_compaction(table, MiB), MiB)
    assert_readers_agree(table, expected)
    assert not live_delete_files(table)
    check_manifests(table)


def test_a_table_with_only_deletes_in_a_snapshot_is_read_the_same(catalog, unique_name):
    """A delete-only row delta (no new rows) is an overwrite with one DELETES manifest; compaction after."""
    table = make_table(catalog, unique_name("only"), "bucket_day")
    expected: dict = {}
    for batch in range(2):
        append(table, rows_for(range(batch * 50, batch * 50 + 50), "v0"), expected)
    upsert(table, rows_for([], "x"), range(0, 100, 3), expected)
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert "added-data-files" not in table.current_snapshot().summary.additional_properties
    assert_readers_agree(table, expected)
    compact(table, plan_compaction(table, MiB), MiB)
    assert_readers_agree(table, expected)
    assert table.current_snapshot().summary["total-delete-files"] == "0"
    check_manifests(table)
