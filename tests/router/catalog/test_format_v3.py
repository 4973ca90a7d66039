"""Format v3 tables on icerouter's SQLite and PostgreSQL catalogs: row ids assigned by every commit,
deletion vectors (one live vector per data file, merged, never position-delete files), the upgrade of
a v2 table, the manifests' v3 fields as written on disk (read with fastavro, apart from pyiceberg).
On a REST catalog (SeaweedFS's, tables in S3): row ids, and an upsert its store refuses."""

from __future__ import annotations

import io
import json
import random

import fastavro
import pyarrow as pa
import pytest
from pyiceberg.manifest import DataFileContent, FileFormat
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table, replaced_rows
from router.catalog.datafiles import write_data_files
from router.catalog.deletes import write_position_deletes
from router.catalog.format_v3 import first_row_id, referenced_data_file
from router.catalog.locate import locate_keys
from router.catalog.row_delta import row_delta
from router.catalog.snapshot_files import deleted_positions, snapshot_files
from router.catalog.sql import StagedTransaction
from router.config import CatalogConfig
from router.descriptors import TableResult, UpsertWork
from router.devstack.catalog import postgres_catalog_properties, sqlite_catalog_properties
from router.exceptions import RowLevelError
from router.maintenance.run import upgrade_format
from tests.duckdb_reader import read_iceberg, read_iceberg_rows

SCHEMA = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "body", StringType(), required=False),
                identifier_field_ids=[1])


def _config(request, tmp_path, unique_name) -> CatalogConfig:
    if request.param == "rest":
        return CatalogConfig(unique_name("v3"), request.getfixturevalue("object_store").rest_catalog_properties())
    if request.param == "sqlite":
        props = sqlite_catalog_properties(str(tmp_path))
    else:
        props = postgres_catalog_properties(request.getfixturevalue("postgres_uri"), str(tmp_path))
    return CatalogConfig(unique_name("v3"), props)


@pytest.fixture(params=["sqlite", "postgres"])
def config(request, tmp_path, unique_name) -> CatalogConfig:
    """icerouter's SQL catalogs, which write v3 metadata themselves (router/catalog/format_v3.py)."""
    return _config(request, tmp_path, unique_name)


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def any_config(request, tmp_path, unique_name) -> CatalogConfig:
    """The SQL catalogs and a REST catalog (SeaweedFS's, tables in S3), which writes v3 metadata on its side."""
    return _config(request, tmp_path, unique_name)


def rows(ids, tag: str) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": pa.array(ids, pa.int64()), "body": [f"{tag}:{i}" for i in ids]},
                    schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("body", pa.string())]))


def append(table, data: pa.Table) -> None:
    files = write_data_files(table, data)
    with StagedTransaction(table) as tx:
        with tx.update_snapshot().merge_append() as app:
            for f in files:
                app.append_data_file(f)


def upsert(table, data: pa.Table, deleted=()) -> list:
    """The job's upsert commit (catalog/commit.py replaced_rows + one row delta)."""
    keys = pa.table({"id": pa.concat_arrays([data.column("id").combine_chunks(), pa.array(list(deleted), pa.int64())])})
    files = write_data_files(table, data)
    deletes = replaced_rows(table, UpsertWork(("id",), keys), files)
    with StagedTransaction(table) as tx:
        row_delta(tx, files, deletes, removed_delete_files=deletes.replaced)
    return deletes


def avro(file_io, path: str) -> tuple[dict, list[dict]]:
    """A manifest or manifest list as written, read with fastavro through the table's FileIO (local or S3)."""
    with file_io.new_input(path).open() as f:
        reader = fastavro.reader(io.BytesIO(f.read()))
        return dict(reader.metadata), list(reader)


def duckdb_lineage(table, columns: str) -> list[tuple]:
    """`columns` of every row as DuckDB reads the table (row lineage columns included), by id and row id."""
    got = read_iceberg(table, order_by="id, _row_id", columns=columns)
    return list(zip(*(got.column(i).to_pylist() for i in range(got.num_columns))))


def live(table) -> dict[int, str]:
    got = {r["id"]: r["body"] for r in table.scan().to_arrow().to_pylist()}
    assert len(got) == table.scan().to_arrow().num_rows, "a key holds two live rows"
    return got


def test_every_commit_assigns_row_ids(any_config, unique_name):
    config = any_config
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "3"})
    assert table.metadata.format_version == 3 and table.metadata.next_row_id == 0
    for batch in range(3):
        append(table, rows(range(batch * 10, batch * 10 + 10 + batch), "a"))
    table = load_table(config, ".".join(table.name()), refresh=True)
    snapshots = table.metadata.snapshots
    assert [(s.first_row_id, s.added_rows) for s in snapshots] == [(0, 10), (10, 11), (21, 12)]
    assert table.metadata.next_row_id == 33
    with table.io.new_input(table.metadata_location).open() as f:
        written = json.loads(f.read())
    assert written["format-version"] == 3 and written["next-row-id"] == 33
    assert [(s["first-row-id"], s["added-rows"]) for s in written["snapshots"]] == [(0, 10), (10, 11), (21, 12)]
    meta, manifests = avro(table.io, snapshots[-1].manifest_list)
    assert meta["format-version"] == "3" and meta["first-row-id"] == "21"
    # the new manifest got the snapshot's first row id; the earlier ones keep theirs
    assert sorted(m["first_row_id"] for m in manifests) == [0, 10, 21]
    # data files inherit theirs (null on disk, assigned on read), delete files never have one
    files = snapshot_files(table)
    assert sorted(first_row_id(f) for f in files.data.values()) == [0, 10, 21]
    for m in manifests:
        meta, entries = avro(table.io, m["manifest_path"])
        assert meta["format-version"] == "3"
        assert all(e["data_file"]["first_row_id"] is None for e in entries)
    # DuckDB reads each row's id as its file's first row id plus its position
    got = duckdb_lineage(table, "id, _row_id")
    batches = [list(range(0, 10)), list(range(10, 21)), list(range(20, 32))]  # key 20 is in two batches
    assert got == sorted((key, first + i) for first, ids in zip((0, 10, 21), batches) for i, key in enumerate(ids))


def test_an_upsert_writes_one_deletion_vector_per_file_merged_with_the_last(config, unique_name):
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "3"})
    append(table, rows(range(0, 50), "v0"))
    append(table, rows(range(50, 100), "v0"))
    first = upsert(table, rows([1, 2, 60], "v1"), deleted=[3])
    assert first.rows == 4 and not first.replaced
    assert all(d.file_format == FileFormat.PUFFIN and d.content == DataFileContent.POSITION_DELETES for d in first)
    assert len({d.file_path for d in first}) == 1 and len(first) == 2  # one Puffin file, a vector per data file
    second = upsert(table, rows([4, 1], "v2"))
    table.refresh()
    files = snapshot_files(table)
    vectors = [d for d, _ in files.deletes]
    assert {d.file_format for d in vectors} == {FileFormat.PUFFIN}
    # the old data file's vector was replaced by one holding its old and new positions
    old_file = next(p for p, f in files.data.items() if f.record_count == 50 and first_row_id(f) == 0)
    assert [d for d in vectors if referenced_data_file(d) == old_file] == [second[0]] and second.replaced
    assert list(deleted_positions(table, old_file, files)) == [1, 2, 3, 4]
    counts: dict[str, int] = {}
    for d in vectors:
        counts[referenced_data_file(d)] = counts.get(referenced_data_file(d), 0) + 1
    assert set(counts.values()) == {1}, "a data file has more than one live deletion vector"
    # the v3 fields of the entries as written (fastavro, not pyiceberg)
    entries = [e for m in table.current_snapshot().manifests(table.io) if m.content == 1
               for e in avro(table.io, m.manifest_path)[1] if e["status"] != 2]
    for e in entries:
        df = e["data_file"]
        assert df["file_format"] == "PUFFIN" and df["content"] == 1 and df["referenced_data_file"]
        with table.io.new_input(df["file_path"]).open() as f:
            f.seek(df["content_offset"])
            blob = f.read(df["content_size_in_bytes"])
        assert blob[4:8] == bytes.fromhex("D1D33964") and df["first_row_id"] is None
    expected = {i: "v0:" + str(i) for i in range(100) if i != 3}
    expected.update({1: "v2:1", 2: "v1:2", 60: "v1:60", 4: "v2:4"})
    assert live(table) == expected
    summary = table.current_snapshot().summary
    assert summary["total-position-deletes"] == str(sum(d.record_count for d in vectors))


def test_position_delete_files_are_refused_on_v3_and_vectors_on_v2(config, unique_name):
    v3 = create_table(config, f"{unique_name('ns')}.t3", SCHEMA, properties={"format-version": "3"})
    append(v3, rows(range(10), "a"))
    located = locate_keys(v3, pa.table({"id": pa.array([1], pa.int64())}), ["id"])
    with pytest.raises(RowLevelError, match="v2 table"):
        write_position_deletes(v3, located.select(["file_path", "pos"]))
    v2 = create_table(config, f"{unique_name('ns')}.t2", SCHEMA, properties={"format-version": "2"})
    append(v2, rows(range(10), "a"))
    vectors = upsert(v3, rows([1], "b"))
    with pytest.raises(RowLevelError, match="v3 table takes deletion vectors"):
        with StagedTransaction(v2) as tx:
            row_delta(tx, (), vectors)


def test_an_upgraded_table_gives_its_old_rows_ids_with_the_next_commit(any_config, unique_name):
    """The upgrade is a metadata commit on every catalog (the REST server applies it on its side): the
    next append assigns ids to the rows written before it and to its own, each once."""
    config = any_config
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "2"})
    append(table, rows(range(0, 5), "a"))
    upgrade_format(table, 3)
    table = load_table(config, ".".join(table.name()), refresh=True)
    assert table.metadata.format_version == 3 and table.metadata.next_row_id == 0
    append(table, rows(range(5, 8), "b"))
    table = load_table(config, ".".join(table.name()), refresh=True)
    assert table.metadata.next_row_id == 8 and table.current_snapshot().first_row_id == 0
    got = duckdb_lineage(table, "id, _row_id")
    assert sorted(key for key, _ in got) == list(range(8))
    assert sorted(row_id for _, row_id in got) == list(range(8)), "every row an id, none twice"


def test_a_v2_table_upgraded_keeps_its_position_deletes_and_then_writes_vectors(config, unique_name):
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "2"})
    append(table, rows(range(0, 40), "v0"))
    v2_deletes = upsert(table, rows([1, 2], "v1"), deleted=[5])
    assert {d.file_format for d in v2_deletes} == {FileFormat.PARQUET}
    before = live(table)
    history = [(s.snapshot_id, s.manifest_list) for s in table.metadata.snapshots]

    upgrade_format(table, 3)
    table = load_table(config, ".".join(table.name()), refresh=True)
    assert table.metadata.format_version == 3 and table.metadata.next_row_id == 0
    assert [(s.snapshot_id, s.manifest_list) for s in table.metadata.snapshots] == history
    assert all(s.first_row_id is None for s in table.metadata.snapshots)
    assert live(table) == before  # the position deletes still apply
    assert sorted(read_iceberg(table).column("id").to_pylist()) == sorted(before)

    third = upsert(table, rows([1, 7], "v2"))
    assert {d.file_format for d in third} == {FileFormat.PUFFIN}
    table.refresh()
    files = snapshot_files(table)
    old = next(p for p, f in files.data.items() if f.record_count == 40)
    # the vector holds the upgraded file's old position deletes too (the spec: it replaces them)
    vector = next(d for d in files.delete_files_for(old) if d.file_format == FileFormat.PUFFIN)
    from router.catalog.snapshot_files import read_position_deletes
    assert list(read_position_deletes(table.io, vector)[old]) == [1, 2, 5, 7]
    # the first commit after the upgrade gave every data file row ids, existing ones included
    snapshot = table.current_snapshot()
    assert snapshot.first_row_id == 0 and snapshot.added_rows >= sum(f.record_count for f in files.data.values())
    assert all(first_row_id(f) is not None for f in files.data.values())
    ids = sorted((first_row_id(f), f.record_count) for f in files.data.values())
    assert all(a + n <= b for (a, n), (b, _) in zip(ids, ids[1:])), "row id ranges overlap"
    assert live(table) == {**before, 1: "v2:1", 7: "v2:7"}
    # the vectors merged the old position-delete file's rows, which named only the old file: it left the
    # table with that commit, so the summary counts each deleted row once
    assert {d.file_format for d, _ in files.deletes} == {FileFormat.PUFFIN}
    assert snapshot.summary["total-position-deletes"] == str(sum(d.record_count for d, _ in files.deletes)) == "5"


def test_an_upgraded_tables_position_delete_file_leaves_once_every_file_it_names_has_a_vector(config, unique_name):
    """A v2 upsert's position-delete file names two data files; after the upgrade, the first vector
    covers one of them and the file stays (the other's rows are deleted by it alone), the second
    covers the other and the file leaves in that commit."""
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "2"})
    append(table, rows(range(0, 40), "v0"))
    append(table, rows(range(40, 80), "v0"))
    (v2_file,) = upsert(table, rows([1, 41], "v1"))
    upgrade_format(table, 3)
    table = load_table(config, ".".join(table.name()), refresh=True)

    def deletes_and_total():
        table.refresh()
        files = snapshot_files(table)
        return ({d.file_path for d, _ in files.deletes},
                int(table.current_snapshot().summary["total-position-deletes"]), files)

    upsert(table, rows([2], "v2"))
    paths, total, files = deletes_and_total()
    assert v2_file.file_path in paths  # it still deletes key 41's old row, which no vector covers
    assert total == sum(d.record_count for d, _ in files.deletes) == 2 + 2  # the v2 file's 2 and the vector's 2
    expected = {i: "v0:" + str(i) for i in range(80)} | {1: "v1:1", 41: "v1:41", 2: "v2:2"}
    assert live(table) == expected and sorted(read_iceberg(table).column("id").to_pylist()) == sorted(expected)

    upsert(table, rows([42], "v3"))
    paths, total, files = deletes_and_total()
    assert v2_file.file_path not in paths and {d.file_format for d, _ in files.deletes} == {FileFormat.PUFFIN}
    assert total == sum(d.record_count for d, _ in files.deletes) == 4  # keys 1, 2, 41, 42's old rows, once each
    expected[42] = "v3:42"
    assert live(table) == expected
    assert sorted(read_iceberg_rows(table, "id"), key=lambda r: r["id"]) == [
        {"id": k, "body": v} for k, v in sorted(expected.items())]


def test_the_catalogs_reject_a_v3_table_without_our_writers():
    """pyiceberg's own metadata writer refuses v3: the tables must be made through icerouter's catalog."""
    from pyiceberg.table.metadata import new_table_metadata
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table.sorting import SortOrder

    metadata = new_table_metadata(SCHEMA, PartitionSpec(), SortOrder(), "file:///x", {"format-version": "3"})
    with pytest.raises(NotImplementedError):
        metadata.model_dump_json()
    from router.catalog.metadata_files import metadata_json

    assert json.loads(metadata_json(metadata.model_copy(update={"next_row_id": 0})))["next-row-id"] == 0


def test_pyiceberg_has_no_row_lineage_columns_where_duckdb_reads_them(config, unique_name):
    """The reader table of docs/v3.md: pyiceberg 0.12 refuses `_row_id` (it has no metadata columns),
    while DuckDB reads the row ids of the same metadata file: the limit is pyiceberg's, not the table's."""
    table = create_table(config, f"{unique_name('ns')}.t", SCHEMA, properties={"format-version": "3"})
    append(table, rows(range(0, 5), "a"))
    append(table, rows(range(5, 8), "b"))
    upsert(table, rows([1], "c"))
    table = load_table(config, ".".join(table.name()), refresh=True)
    got = duckdb_lineage(table, "id, _row_id, _last_updated_sequence_number")
    # the first batch's rows are ids 0-4 of sequence 1, the second's 5-7 of sequence 2; key 1's new image is a
    # new row of the upsert's snapshot (sequence 3), with the id after them
    assert got == [(0, 0, 1), (1, 8, 3), (2, 2, 1), (3, 3, 1), (4, 4, 1), (5, 5, 2), (6, 6, 2), (7, 7, 2)]
    with pytest.raises(ValueError, match="_row_id"):
        table.scan(selected_fields=("id", "_row_id")).to_arrow()
    assert sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()) == list(range(8))




def test_duckdb_reads_each_vector_of_a_puffin_file_holding_several(tmp_path, unique_name):
    """Upserts committed as the job commits them: each Puffin file holds a vector per touched data
    file, the first one of the file the batch before added among them. DuckDB, as icerouter connects
    it (external file cache off: on, DuckDB 1.5.5 can hand one vector's bytes to another here), reads
    every batch exactly."""
    config = CatalogConfig(unique_name("v3dv"), sqlite_catalog_properties(str(tmp_path)))
    name = f"{unique_name('ns')}.t"
    table = create_table(config, name, SCHEMA, properties={"format-version": "3"})
    expected: dict[int, str] = {}
    size, offset = 50_000, 0
    rng = random.Random(7)
    for batch in range(9):
        if batch < 4:  # the snapshot: four files of new keys
            changed, deleted = list(range(batch * size, (batch + 1) * size)), []
        else:
            new = range(4 * size + batch * 1000, 4 * size + batch * 1000 + 400)
            changed = sorted(rng.sample(sorted(expected), 1400)) + list(new)
            deleted = sorted(rng.sample(sorted(set(expected) - set(changed)), 200))
        images = rows(changed, f"v{batch}")
        keys = pa.table({"id": pa.array(changed + deleted, pa.int64())})
        touched = len(changed) + len(deleted)
        result = TableResult(name, write_data_files(load_table(config, name), images), images.num_rows,
                             offsets={"t/0": [offset, offset + touched - 1]},
                             upsert=UpsertWork(("id",), keys, len(deleted)))
        assert commit_table(config, result, "job", batch).status == "committed"
        offset += touched
        expected.update({i: f"v{batch}:{i}" for i in changed})
        for i in deleted:
            del expected[i]
        table = load_table(config, name, refresh=True)
        got = read_iceberg(table)
        assert got.num_rows == len(expected), f"batch {batch}: DuckDB read {got.num_rows} rows, {len(expected)} live"
        assert dict(zip(got.column("id").to_pylist(), got.column("body").to_pylist())) == expected == live(table)


def test_a_v3_upsert_into_a_store_that_refuses_puffin_files_fails_and_changes_nothing(object_store, unique_name):
    """SeaweedFS's table buckets take only Parquet, ORC and Avro files under a table's data directory, so
    they refuse a deletion vector's Puffin file: the job's commit of the upsert fails with that reason
    (terminal: no retry makes the store take it), its data files are not committed, and readers see the
    rows the table had."""
    config = CatalogConfig(unique_name("v3"), object_store.rest_catalog_properties())
    name = f"{unique_name('ns')}.t"
    append(create_table(config, name, SCHEMA, properties={"format-version": "3"}), rows(range(10), "v0"))
    before = load_table(config, name, refresh=True).current_snapshot().snapshot_id
    images = rows([1, 2], "v1")
    result = TableResult(name, write_data_files(load_table(config, name), images), images.num_rows,
                         offsets={"t/0": [0, 1]}, upsert=UpsertWork(("id",), images.select(["id"])))
    outcome = commit_table(config, result, "job", 0)
    assert outcome.status == "failed" and not outcome.transient and outcome.attempts == 1
    assert "RowLevelError: the object store refused the deletion vectors' Puffin file" in outcome.error
    assert f"table={name}" in outcome.error and ".puffin" in outcome.error
    table = load_table(config, name, refresh=True)
    assert table.current_snapshot().snapshot_id == before
    assert sorted(read_iceberg(table).column("body").to_pylist()) == sorted(f"v0:{i}" for i in range(10))
