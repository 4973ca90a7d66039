"""Position-delete files and locating keys, on the SQLite and PostgreSQL catalogs.

The delete files are opened with pyarrow (independent of the writer) and checked against the spec:
reserved field ids, required columns, rows sorted by path then position, one file per partition
carrying the partition and spec id of the files it names, full path bounds. Locating keys is
checked against a brute-force scan of the table, also after rows were deleted.
"""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.conversions import from_bytes
from pyiceberg.manifest import DataFileContent
from pyiceberg.types import LongType

import router.catalog.locate as locate_module
from router.catalog import get_catalog
from router.catalog.deletes import write_position_deletes
from router.catalog.locate import locate_keys
from router.catalog.row_delta import RowDelta
from router.catalog.snapshot_files import (
    FILE_PATH_ID, POS_ID, clear_caches, deleted_positions, live_delete_files, read_live_rows, snapshot_files,
)
from router.catalog.sql import StagedTransaction
from router.config import CatalogConfig
from router.exceptions import RowLevelError
from tests.router.catalog.rowlevel import append, make_table, rows_for, upsert


@pytest.fixture(params=["sqlite", "postgres"])
def catalog(request):
    return request.getfixturevalue(f"{request.param}_catalog")


def local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def brute_force(table, ids) -> list[dict]:
    """(file_path, pos, id) of every live row holding one of `ids`, read row by row with deletes applied."""
    files = snapshot_files(table)
    wanted, out = set(ids), []
    for path in sorted(files.data):
        gone = set()
        for d in files.delete_files_for(path):
            named = pq.read_table(local(d.file_path))
            gone |= {r["pos"] for r in named.to_pylist() if r["file_path"] == path}
        for pos, i in enumerate(pq.read_table(local(path)).column(0).to_pylist()):  # field 1, whatever its name
            if i in wanted and pos not in gone:
                out.append({"file_path": path, "pos": pos, "id": i})
    return out


@pytest.mark.parametrize("layout", ["unpartitioned", "identity", "bucket_day"])
def test_delete_files_follow_the_spec(catalog, unique_name, layout):
    table = make_table(catalog, unique_name("spec"), layout)
    for batch in range(3):
        append(table, rows_for(range(batch * 30, batch * 30 + 30), "v0"))
    files = snapshot_files(table.refresh())
    # every other row of every file, given unsorted and with a repeat
    positions = {path: list(range(f.record_count - 1, -1, -2)) + [0] for path, f in files.data.items()}

    deletes = write_position_deletes(table, positions)

    partitions = {(f.spec_id, f.partition) for f in files.data.values()}
    assert len(deletes) == len(partitions)  # one file per partition
    named_by_all = {}
    for d in deletes:
        assert d.content == DataFileContent.POSITION_DELETES and d.equality_ids is None
        data = pq.read_table(local(d.file_path))
        schema = pq.read_schema(local(d.file_path))
        assert schema.names == ["file_path", "pos"]
        assert [int(f.metadata[b"PARQUET:field_id"]) for f in schema] == [FILE_PATH_ID, POS_ID]
        assert schema.field("pos").type == pa.int64() and not any(f.nullable for f in schema)
        rows = [(r["file_path"], r["pos"]) for r in data.to_pylist()]
        assert rows == sorted(set(rows))  # sorted by path then position, each row once
        named = {p for p, _ in rows}
        assert {(files.data[p].spec_id, files.data[p].partition) for p in named} == {(d.spec_id, d.partition)}
        assert d.record_count == len(rows) and d.file_size_in_bytes == os.path.getsize(local(d.file_path))
        assert d.lower_bounds[FILE_PATH_ID].decode() == min(named)  # full paths, not truncated
        assert d.upper_bounds[FILE_PATH_ID].decode() == max(named)
        assert from_bytes(LongType(), d.lower_bounds[POS_ID]) == min(p for _, p in rows)
        assert os.path.dirname(local(d.file_path)) == os.path.dirname(local(min(named)))  # partition directory
        named_by_all.update({p: sorted(pos for q, pos in rows if q == p) for p in named})
    assert named_by_all == {p: sorted(set(v)) for p, v in positions.items()}


def test_delete_files_refuse_a_file_that_is_not_live(catalog, unique_name):
    table = make_table(catalog, unique_name("notlive"))
    append(table, rows_for(range(10), "v0"))
    with pytest.raises(RowLevelError, match="not a live data file"):
        write_position_deletes(table, {"file:///elsewhere/x.parquet": [1]})
    assert write_position_deletes(table, {}) == [] and write_position_deletes(table, pa.table(
        {"file_path": pa.array([], pa.string()), "pos": pa.array([], pa.int64())})) == []


@pytest.mark.parametrize("layout", ["unpartitioned", "identity", "bucket_day"])
def test_locate_keys_finds_the_live_rows_and_skips_deleted_ones(catalog, unique_name, layout):
    table = make_table(catalog, unique_name("locate"), layout)
    for batch in range(4):
        append(table, rows_for(range(batch * 25, batch * 25 + 25), "v0"))
    append(table, rows_for([3, 40, 77], "dup"))  # a key may be live twice (an append, not an upsert)
    keys = [3, 40, 77, 99, 500, 12]

    first = locate_keys(table.refresh(), pa.table({"id": keys + [3, None]}), ["id"])  # repeats and nulls are fine
    assert first.to_pylist() == brute_force(table, keys)
    assert sorted(first.column("id").to_pylist()) == [3, 3, 12, 40, 40, 77, 77, 99]

    upsert(table, rows_for([3, 40], "v1"), deleted_ids=[12, 77])  # deletes every live image of those keys
    again = locate_keys(table.refresh(), pa.table({"id": keys}), ["id"])
    assert again.to_pylist() == brute_force(table, keys)
    assert sorted(again.column("id").to_pylist()) == [3, 40, 99]  # the new images only
    before = {(r["file_path"], r["pos"]) for r in first.to_pylist()}
    assert [r["id"] for r in again.to_pylist() if (r["file_path"], r["pos"]) in before] == [99]  # untouched
    clear_caches()
    locate_module.clear_cache()
    assert locate_keys(table, pa.table({"id": keys}), ["id"]).equals(again)  # cold caches, same answer


def _count_reads(monkeypatch) -> list[str]:
    read = []
    real = locate_module._read_keys
    monkeypatch.setattr(locate_module, "_read_keys", lambda io, f, *a: read.append(f.file_path) or real(io, f, *a))
    locate_module.clear_cache()
    return read


def test_locate_keys_reads_only_files_that_can_hold_the_keys(catalog, unique_name, monkeypatch):
    table = make_table(catalog, unique_name("prune"), "identity")
    for batch in range(6):  # ids in ranges per batch: bounds prune; a region per file: partitions prune
        append(table, rows_for(range(batch * 100, batch * 100 + 100), "v0"))
    assert len(snapshot_files(table.refresh()).data) == 18
    read = _count_reads(monkeypatch)

    found = locate_keys(table, pa.table({"id": [3, 6]}), ["id"])
    assert found.column("id").to_pylist() == [3, 6]
    assert len(read) == 3  # the three region files of ids 0-99: the region is not part of this key

    read.clear()
    found = locate_keys(table, pa.table({"region": ["eu", "eu"], "id": [3, 6]}), ["region", "id"])
    assert found.column("id").to_pylist() == [3, 6]
    assert read == sorted(set(found.column("file_path").to_pylist()))  # one file of the 18

    read.clear()
    composite = locate_keys(table, pa.table({"region": ["us", "eu"], "id": [301, 301]}), ["region", "id"])
    assert composite.to_pylist() == [{"file_path": r["file_path"], "pos": r["pos"], "region": "us", "id": 301}
                                     for r in brute_force(table, [301])]
    # the "us" file of ids 300-399; and the "eu" one, whose bounds (300-399) cover 301 though it holds no 301
    assert len(read) == 2

    read.clear()
    by_text = locate_keys(table, pa.table({"body": ["v0:5", "v0:599", "none"]}), ["body"])  # a string key
    assert sorted(by_text.column("body").to_pylist()) == ["v0:5", "v0:599"]


def test_locate_keys_prunes_by_the_bucket_of_the_key(catalog, unique_name, monkeypatch):
    table = make_table(catalog, unique_name("bucket"), "bucket_day")
    for batch in range(3):
        append(table, rows_for(range(batch * 100, batch * 100 + 100), "v0"))
    files = snapshot_files(table.refresh())
    read = _count_reads(monkeypatch)

    found = locate_keys(table, pa.table({"id": [3, 150]}), ["id"])

    assert found.to_pylist() == brute_force(table, [3, 150])
    buckets = {files.data[p].partition[0] for p in found.column("file_path").to_pylist()}
    assert read and all(files.data[p].partition[0] in buckets for p in read)
    assert len(read) <= 4 < len(files.data)  # two days of one bucket per key, within their id bounds


def test_locate_keys_uses_field_ids_and_the_cache_answers_the_same(catalog, unique_name):
    table = make_table(catalog, unique_name("rename"))
    append(table, rows_for(range(50), "v0"))
    with table.update_schema() as update:
        update.rename_column("id", "key")
    append(table.refresh(), rows_for(range(50, 60), "v0").rename_columns(["key", "region", "ts", "body"]))
    locate_module.clear_cache()
    cold = locate_keys(table.refresh(), pa.table({"key": [7, 55]}), ["key"])
    warm = locate_keys(table, pa.table({"key": [7, 55]}), ["key"])
    assert cold.equals(warm) and sorted(cold.column("key").to_pylist()) == [7, 55]
    assert cold.to_pylist() == [{"file_path": r["file_path"], "pos": r["pos"], "key": r["id"]}
                                for r in brute_force(table, [7, 55])]
    with pytest.raises(RowLevelError, match="not in the table schema"):
        locate_keys(table, pa.table({"id": [7]}), ["id"])


def test_a_v1_table_is_refused_with_a_one_line_error(catalog, unique_name):
    ns = unique_name("v1")
    table = make_table(catalog, ns, **{"format-version": "1"})
    table.append(rows_for(range(5), "v0"))
    path = next(iter(snapshot_files(table).data))
    calls = [lambda: write_position_deletes(table, {path: [0]}),
             lambda: locate_keys(table, pa.table({"id": [1]}), ["id"]),
             lambda: RowDelta(StagedTransaction(table))]
    for call in calls:
        with pytest.raises(RowLevelError) as info:
            call()
        message = str(info.value)
        assert "format v2" in message and "v1" in message and "\n" not in message
        assert info.value.table == f"{ns}.t"


def test_live_delete_files_and_reading_a_file_with_its_deletes(catalog, unique_name):
    table = make_table(catalog, unique_name("live"), "identity")
    for batch in range(2):
        append(table, rows_for(range(batch * 30, batch * 30 + 30), "v0"))
    located, deletes = upsert(table, rows_for([4, 7], "v1"), deleted_ids=[10, 41])
    table.refresh()

    live = live_delete_files(table)
    assert sorted(d.delete_file.file_path for d in live) == sorted(d.file_path for d in deletes)
    named = {}
    for d in live:
        assert d.sequence_number == table.current_snapshot().sequence_number
        assert set(d.referenced) == {f.file_path for f in d.data_files}  # all still live
        named.update(d.referenced)
    by_file = located.group_by("file_path").aggregate([("pos", "count")]).to_pylist()
    assert named == {r["file_path"]: r["pos_count"] for r in by_file}

    files = snapshot_files(table)
    for path in set(located.column("file_path").to_pylist()):
        rows = pa.Table.from_batches(list(read_live_rows(table, [files.data[path]])))
        all_ids = pq.read_table(local(path)).column("id").to_pylist()
        gone = {r["pos"] for r in located.to_pylist() if r["file_path"] == path}
        assert rows.column("id").to_pylist() == [i for p, i in enumerate(all_ids) if p not in gone]
        assert rows.schema.names == ["id", "region", "ts", "body"]


@pytest.mark.parametrize("layout", ["unpartitioned", "bucket_day"])
@pytest.mark.parametrize("format_version", ["2", "3"])
def test_the_snapshot_index_matches_pyiceberg_scan_planning_snapshot_after_snapshot(catalog, unique_name, layout,
                                                                                   format_version, monkeypatch):
    """Built from its parent's index commit after commit (on v3, minus the vectors each upsert
    replaced), it must say what pyiceberg's planner says."""
    import router.catalog.snapshot_files as module
    from router.maintenance import compact, plan_compaction

    whole_reads = []
    real_build = module._build
    monkeypatch.setattr(module, "_build", lambda t, s: whole_reads.append(s.snapshot_id) or real_build(t, s))
    if format_version == "3":  # pyiceberg's catalog refuses v3 tables: icerouter's catalog commits them
        catalog = get_catalog(CatalogConfig(unique_name("v3idx"), dict(catalog.properties)))
    table = make_table(catalog, unique_name("index"), layout, **{"format-version": format_version})
    clear_caches()
    append(table, rows_for(range(40), "v0"))
    steps = [lambda v: upsert(table, rows_for([1, 2, 30 + v], f"v{v}"), [10 + v]) for _ in range(3)]
    steps += [lambda v: compact(table.refresh(), plan_compaction(table.refresh(), 1 << 30), 1 << 30)]
    steps += [lambda v: upsert(table, rows_for([1, 5], f"v{v}"), [20 + v]) for _ in range(2)]
    for version, step in enumerate(steps, start=1):
        step(version)
        table.refresh()
        files = snapshot_files(table)
        planned = {t.file.file_path: {d.file_path for d in t.delete_files} for t in table.scan().plan_files()}
        assert set(files.data) == set(planned)
        assert {p: {d.file_path for d in files.delete_files_for(p)} for p in files.data} == planned
        assert {p: f.record_count for p, f in files.data.items()} == \
            {t.file.file_path: t.file.record_count for t in table.scan().plan_files()}
    # read whole: the first snapshot, and the compaction's (it removed files); every upsert extended its parent's
    assert len(whole_reads) == 2
    clear_caches()
    whole = snapshot_files(table)  # read whole, not from a parent's index
    assert whole.sequence == files.sequence and whole.data.keys() == files.data.keys()
    assert sorted((d.file_path, s) for d, s in whole.deletes) == sorted((d.file_path, s) for d, s in files.deletes)


def test_locate_keys_in_files_written_before_the_key_was_widened(catalog, unique_name):
    from pyiceberg.schema import Schema
    from pyiceberg.types import IntegerType, NestedField, StringType

    from router.catalog import DEFAULT_TABLE_PROPERTIES

    ns = unique_name("widen")
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", Schema(NestedField(1, "id", IntegerType(), required=False),
                                                   NestedField(2, "body", StringType(), required=False)),
                                 properties=DEFAULT_TABLE_PROPERTIES)
    table.append(pa.table({"id": pa.array(range(10), pa.int32()), "body": [f"old{i}" for i in range(10)]}))
    with table.update_schema() as update:
        update.update_column("id", LongType())
    table.append(pa.table({"id": pa.array([2**40, 5], pa.int64()), "body": ["new", "new5"]}))
    locate_module.clear_cache()

    found = locate_keys(table.refresh(), pa.table({"id": [5, 2**40, 11]}), ["id"])

    assert sorted(found.column("id").to_pylist()) == [5, 5, 2**40]  # in the int file and in the long one
    assert found.schema.field("id").type == pa.int64()


def test_deleted_positions_merge_new_delete_files_onto_the_last_answer(catalog, unique_name):
    """Each snapshot adds a delete file naming rows of the same data file: the merged answer of one
    snapshot goes on from the previous one's, and an older snapshot still gets only its own deletes."""
    table = make_table(catalog, unique_name("merge"))
    append(table, rows_for(range(50), "v0"))
    path = next(iter(snapshot_files(table.refresh()).data))
    clear_caches()
    answers = {}
    for version, ids in enumerate(([3, 9], [9, 20], [41], [0, 49]), start=1):  # 9 twice: its new image's row
        upsert(table, rows_for([i for i in ids if i != 41], f"v{version}"), deleted_ids=[41] if 41 in ids else [])
        files = snapshot_files(table.refresh())
        got = deleted_positions(table, path, files)
        named = set()
        for d in files.delete_files_for(path):
            named |= {r["pos"] for r in pq.read_table(local(d.file_path)).to_pylist() if r["file_path"] == path}
        assert got.tolist() == sorted(named)
        answers[table.metadata.current_snapshot_id] = got.tolist()
    assert answers[table.metadata.current_snapshot_id] == [0, 3, 9, 20, 41, 49]
    for snapshot_id, want in [*answers.items()][:2] + [*answers.items()][-1:]:  # back in time, then forward
        assert deleted_positions(table, path, snapshot_files(table, snapshot_id)).tolist() == want
