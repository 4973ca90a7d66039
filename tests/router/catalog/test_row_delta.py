"""Row deltas (new rows + position deletes of the old images in one snapshot) on the SQLite and
PostgreSQL catalogs, read back by pyiceberg AND DuckDB, every manifest of every snapshot checked."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.table.update.snapshot import ExpireSnapshots

from router.catalog import load_table
from router.catalog.deletes import write_position_deletes
from router.catalog.locate import locate_keys
from router.catalog.row_delta import RowDelta, row_delta
from router.catalog.snapshot_files import snapshot_files
from router.catalog.sql import StagedTransaction
from router.config import CatalogConfig
from router.exceptions import RowLevelError
from router.catalog.datafiles import write_data_files
from router.maintenance import compact, plan_compaction
from router.progress import property_name
from tests.router.catalog.rowlevel import (
    append, assert_readers_agree, check_manifests, duckdb_rows, make_table, pyiceberg_rows, rows_for, upsert,
)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request):
    return request.getfixturevalue(f"{request.param}_catalog")


def summary_of(table) -> dict:
    return dict(table.current_snapshot().summary.additional_properties)


@pytest.mark.parametrize("layout", ["unpartitioned", "identity", "bucket_day"])
def test_a_row_delta_replaces_old_images_for_both_readers(catalog, unique_name, layout):
    table = make_table(catalog, unique_name("delta"), layout)
    expected: dict = {}
    for batch in range(3):
        append(table, rows_for(range(batch * 40, batch * 40 + 40), "v0"), expected)
    assert table.current_snapshot().summary.operation.value == "append"
    before = summary_of(table)

    updated, inserted, deleted = list(range(0, 120, 7)), [500, 501, 502], [1, 2, 40, 118]
    located, deletes = upsert(table, rows_for(updated + inserted, "v1"), deleted, expected,
                              summary={"icerouter.batch-id": "7"})

    assert_readers_agree(table, expected)
    assert located.num_rows == len(updated) + len(deleted)
    summary = summary_of(table)
    assert table.current_snapshot().summary.operation.value == "overwrite"
    assert summary["icerouter.batch-id"] == "7"
    assert summary["added-delete-files"] == summary["added-position-delete-files"] == str(len(deletes))
    assert summary["added-position-deletes"] == summary["total-position-deletes"] == str(located.num_rows)
    assert summary["total-delete-files"] == str(len(deletes))
    assert summary["added-records"] == str(len(updated) + len(inserted))
    assert int(summary["total-records"]) == int(before["total-records"]) + len(updated) + len(inserted)
    counts = check_manifests(table)
    assert counts["deletes"] == 1 and counts["data"] >= 1
    # one snapshot: both kinds of files share its sequence number
    snapshot = table.current_snapshot()
    new = [m for m in snapshot.manifests(table.io) if m.added_snapshot_id == snapshot.snapshot_id]
    assert {m.content.name for m in new} == {"DATA", "DELETES"}
    assert {m.sequence_number for m in new} == {snapshot.sequence_number}


def test_data_and_its_deletes_in_one_snapshot(catalog, unique_name):
    table = make_table(catalog, unique_name("same"), "identity")
    expected: dict = {}
    append(table, rows_for(range(30), "v0"), expected)
    fresh = rows_for(range(100, 110), "new")
    new_files = write_data_files(table, fresh)
    # delete rows of the new files (ids 100 and 103) and old ones (ids 0 and 5), all in one snapshot
    new_positions = {}
    for f in new_files:
        ids = pq.read_table(f.file_path[len("file://"):]).column("id").to_pylist()
        new_positions[f.file_path] = [i for i, v in enumerate(ids) if v in (100, 103)]
    old = locate_keys(table, pa.table({"id": [0, 5]}), ["id"])
    positions = {**{p: v for p, v in new_positions.items() if v},
                 **{r["file_path"]: [r["pos"]] for r in old.to_pylist()}}
    deletes = write_position_deletes(table, positions, new_data_files=new_files)
    with StagedTransaction(table) as tx:
        row_delta(tx, new_files, deletes)

    expected.update({r["id"]: r for r in fresh.to_pylist()})
    for i in (100, 103, 0, 5):
        expected.pop(i)
    assert_readers_agree(table, expected)
    assert summary_of(table)["total-position-deletes"] == "4"
    check_manifests(table)


def test_a_key_updated_in_every_snapshot_keeps_only_its_last_image(catalog, unique_name):
    table = make_table(catalog, unique_name("repeat"), "bucket_day")
    expected: dict = {}
    append(table, rows_for(range(60), "v0"), expected)
    hot = [3, 17, 42]
    total = 0
    for version in range(1, 6):
        located, _ = upsert(table, rows_for(hot + [100 + version], f"v{version}"), (), expected)
        assert sorted(located.column("id").to_pylist()) == hot  # exactly one live image each time
        total += located.num_rows
        assert summary_of(table)["total-position-deletes"] == str(total)
        assert_readers_agree(table, expected)
    assert {r["body"] for r in pyiceberg_rows(table) if r["id"] in hot} == {"v5:3", "v5:17", "v5:42"}
    assert len(table.metadata.snapshots) == 6
    check_manifests(table)


def test_delete_manifests_are_merged_and_keep_their_sequence_numbers(catalog, unique_name):
    table = make_table(catalog, unique_name("merge"), "identity", **{"commit.manifest.min-count-to-merge": "3"})
    expected: dict = {}
    append(table, rows_for(range(30), "v0"), expected)
    for version in range(1, 6):
        upsert(table, rows_for([version, version + 10], f"v{version}"), [20 + version], expected)
        assert check_manifests(table)["deletes"] <= 2
    # older deletes do not reach newer data: every key updated once is still there in its new image
    assert_readers_agree(table, expected)
    sequences = sorted(seq for _, seq in snapshot_files(table).deletes)
    # each delete file kept the sequence number of its own snapshot (three regions, a file each, per upsert)
    assert sequences == sorted([2, 3, 4, 5, 6] * 3)


def test_a_row_delta_composes_with_the_offsets_property_and_expiry(tmp_path, request, unique_name):
    """As the job commits (catalog/commit.py): our catalog class, offsets as property and summary, expiry."""
    for backend in ("sqlite", "postgres"):
        uri = f"sqlite:///{tmp_path / 'c.db'}" if backend == "sqlite" else request.getfixturevalue("postgres_uri")
        config = CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri,
                                                  "warehouse": (tmp_path / backend).as_uri()})
        from router.catalog import get_catalog

        ns = unique_name("job")
        make_table(get_catalog(config), ns, "identity")
        table = load_table(config, f"{ns}.t")
        expected: dict = {}
        for batch in range(3):
            append(table, rows_for(range(batch * 10, batch * 10 + 10), "v0"), expected)
        *old_snapshots, parent = [s.snapshot_id for s in table.metadata.snapshots]
        located = locate_keys(table, pa.table({"id": [1, 12, 25]}), ["id"])
        deletes = write_position_deletes(table, located.select(["file_path", "pos"]))
        data = rows_for([1, 12, 25], "v1")
        files = write_data_files(table, data)
        prop, doc = property_name("job"), json.dumps({"batch_id": 3, "offsets": {"t/0": 33}})
        with StagedTransaction(table) as tx:
            tx.set_properties({prop: doc})
            row_delta(tx, files, deletes, {"icerouter.job": "job", prop: doc})
            ExpireSnapshots(tx).by_ids(old_snapshots).commit()
        expected.update({r["id"]: r for r in data.to_pylist()})

        fresh = load_table(config, f"{ns}.t", refresh=True)
        assert fresh.properties[prop] == doc and summary_of(fresh)[prop] == doc
        assert [s.snapshot_id for s in fresh.metadata.snapshots] == [parent, fresh.current_snapshot().snapshot_id]
        assert fresh.current_snapshot().parent_snapshot_id == parent
        assert_readers_agree(fresh, expected)
        check_manifests(fresh)


def test_an_insert_only_row_delta_is_an_append_and_nothing_commits_nothing(catalog, unique_name):
    table = make_table(catalog, unique_name("append"))
    expected: dict = {}
    append(table, rows_for(range(5), "v0"), expected)
    with StagedTransaction(table) as tx:
        assert row_delta(tx, (), ()) is None
    assert len(table.metadata.snapshots) == 1 and table.current_snapshot().summary.operation.value == "append"
    assert "total-delete-files" in summary_of(table) and summary_of(table)["total-delete-files"] == "0"
    assert duckdb_rows(table) == pyiceberg_rows(table) == [expected[k] for k in sorted(expected)]
    delta = RowDelta(StagedTransaction(table))
    with pytest.raises(RowLevelError, match="never equality deletes"):
        delta.add_delete_file(write_data_files(table, rows_for([9], "x"))[0])
    with pytest.raises(RowLevelError, match="handed over as data"):
        located = locate_keys(table, pa.table({"id": [1]}), ["id"])
        delta.add_data_file(write_position_deletes(table, located.select(["file_path", "pos"]))[0])


def test_deletes_for_files_that_left_the_table_are_refused(catalog, unique_name):
    ns = unique_name("stale")
    table = make_table(catalog, ns, "identity")
    expected: dict = {}
    for batch in range(2):
        append(table, rows_for(range(batch * 10, batch * 10 + 10), "v0"), expected)
    located = locate_keys(table, pa.table({"id": [1, 2]}), ["id"])
    deletes = write_position_deletes(table, located.select(["file_path", "pos"]))
    files = write_data_files(table, rows_for([1, 2], "v1"))

    other = catalog.load_table(f"{ns}.t")  # another writer replaces the rows' file meanwhile
    upsert(other, rows_for([3], "other"))
    with pytest.raises(CommitFailedException):  # our stale handle: the catalog refuses the branch update
        with StagedTransaction(table) as tx:
            row_delta(tx, files, deletes)

    compacted = catalog.load_table(f"{ns}.t")  # the rows' files leave the table in a compaction
    compact(compacted, plan_compaction(compacted, 1 << 30), 1 << 30)
    assert not set(located.column("file_path").to_pylist()) & set(snapshot_files(compacted).data)
    with pytest.raises(ValidationException, match="not live"):
        with StagedTransaction(table.refresh()) as tx:
            row_delta(tx, files, deletes)
    assert pyiceberg_rows(table)[:3] == duckdb_rows(table)[:3]


def test_pyiceberg_retry_does_not_reapply_located_deletes(catalog, unique_name):
    ns = unique_name("retry")
    table = make_table(catalog, ns, **{"commit.retry.num-retries": "3"})
    expected: dict = {}
    append(table, rows_for(range(10), "v0"), expected)
    located = locate_keys(table, pa.table({"id": [4]}), ["id"])
    deletes = write_position_deletes(table, located.select(["file_path", "pos"]))
    files = write_data_files(table, rows_for([4], "v1"))
    upsert(catalog.load_table(f"{ns}.t"), rows_for([4], "other"), (), expected)  # lands first
    with pytest.raises(ValidationException, match="locate the keys again"):
        with table.transaction() as tx:  # pyiceberg's own transaction and retry loop
            row_delta(tx, files, deletes)
    assert_readers_agree(table, expected)
