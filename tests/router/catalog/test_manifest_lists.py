"""Manifest lists kept in memory by path (router/catalog/manifest_lists.py): what a commit wrote is
what pyiceberg reads back from the file, field by field, through appends, manifest merges,
deletes and the project's own commits, on every catalog backend."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.expressions import EqualTo
from pyiceberg.manifest import ManifestContent

from router.catalog import DEFAULT_TABLE_PROPERTIES, manifest_lists
from router.catalog.datafiles import write_data_files
from tests.duckdb_reader import read_iceberg
from tests.router.catalog.test_avro_writers import SCHEMA, SPECS  # the same table layouts


def rows(start: int, count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(start, start + count), pa.int64()),
                     "ts": pa.array([dt.datetime(2024, 3, 1 + i % 3, tzinfo=dt.timezone.utc)
                                     for i in range(start, start + count)], pa.timestamp("us", tz="UTC")),
                     "kind": pa.array([f"k{i % 2}" for i in range(start, start + count)])})


def described(manifests) -> list[dict]:
    return [{name: getattr(m, name) for name in ("manifest_path", "manifest_length", "partition_spec_id", "content",
                                                  "sequence_number", "min_sequence_number", "added_snapshot_id",
                                                  "added_files_count", "existing_files_count", "deleted_files_count",
                                                  "added_rows_count", "existing_rows_count", "deleted_rows_count",
                                                  "partitions", "key_metadata")} for m in manifests]


@pytest.mark.parametrize("spec", list(SPECS))
def test_kept_manifests_equal_the_files(catalog, unique_name, spec):
    manifest_lists.install()
    ns = unique_name("ml")
    catalog.create_namespace(ns)
    table = catalog.create_table(f"{ns}.t", schema=SCHEMA, partition_spec=SPECS[spec],
                                 properties={**DEFAULT_TABLE_PROPERTIES, "commit.manifest.min-count-to-merge": "3",
                                             "commit.manifest-merge.enabled": "true"})
    for i in range(5):  # appends; from the third on, the manifests are merged
        with table.transaction() as tx:
            with tx.update_snapshot().merge_append() as append:
                for data_file in write_data_files(table, rows(10 * i, 10)):
                    append.append_data_file(data_file)
    table.delete(EqualTo("kind", "k1"))  # rewrites or drops files: deleted and existing entries
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            for data_file in write_data_files(table, rows(100, 4)):
                append.append_data_file(data_file)

    table = catalog.load_table(f"{ns}.t")
    kept = 0
    for snapshot in table.metadata.snapshots:
        from_file = manifest_lists._pyiceberg["manifests"](table.io, snapshot.manifest_list)
        with manifest_lists._lock:
            held = manifest_lists._lists.get(snapshot.manifest_list)
        if held is not None:
            kept += 1
            assert described(held) == described(from_file)
            assert all(m.content == ManifestContent.DATA for m in held)
        assert described(snapshot.manifests(table.io)) == described(from_file)
    assert kept == len(table.metadata.snapshots)  # every list was written by this process
    manifest_lists.clear()  # and read back from the files when not kept
    assert [described(s.manifests(table.io)) for s in table.metadata.snapshots] == \
        [described(manifest_lists._pyiceberg["manifests"](table.io, s.manifest_list)) for s in table.metadata.snapshots]
    expected = [i for i in range(50) if i % 2 == 0] + [100, 102]  # k1 rows deleted (101 and 103 added after as k1)
    expected = sorted(expected + [101, 103])
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == expected
    assert read_iceberg(table, "id").column("id").to_pylist() == expected
