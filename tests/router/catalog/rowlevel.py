"""Test helpers for row-level changes: tables in the layouts upserts meet, one upsert cycle the way the
job will run it (locate -> position deletes -> new rows -> one row delta), and checks that hold for
every manifest of every snapshot. The expected rows are kept in a plain dict by key."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from pyiceberg.manifest import DataFileContent, ManifestContent
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from router.catalog import DEFAULT_TABLE_PROPERTIES
from router.catalog.commit import delete_positions
from router.catalog.locate import locate_keys
from router.catalog.row_delta import row_delta
from router.catalog.sql import StagedTransaction
from router.catalog.datafiles import write_data_files
from tests.duckdb_reader import read_iceberg

BASE = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
SCHEMA = Schema(NestedField(1, "id", LongType(), required=False),
                NestedField(2, "region", StringType(), required=False),
                NestedField(3, "ts", TimestamptzType(), required=False),
                NestedField(4, "body", StringType(), required=False))
LAYOUTS = {
    "unpartitioned": PartitionSpec(),
    "identity": PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "region")),
    "bucket_day": PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"),
                                PartitionField(3, 1001, DayTransform(), "ts_day")),
}
REGIONS = ("eu", "us", "ap")


def make_table(catalog, namespace: str, layout: str = "unpartitioned", name: str = "t", **properties: str):
    catalog.create_namespace_if_not_exists(namespace)
    return catalog.create_table(f"{namespace}.{name}", schema=SCHEMA, partition_spec=LAYOUTS[layout],
                                properties={**DEFAULT_TABLE_PROPERTIES, **properties})


def rows_for(ids, tag: str) -> pa.Table:
    """Rows for `ids`; region and day follow the id (so a key keeps its partition), body carries `tag`."""
    ids = list(ids)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "region": pa.array([REGIONS[i % 3] for i in ids], pa.string()),
        "ts": pa.array([BASE + dt.timedelta(days=i % 2, seconds=i) for i in ids], pa.timestamp("us", tz="UTC")),
        "body": pa.array([f"{tag}:{i}" for i in ids], pa.string()),
    })


def append(table, data: pa.Table, expected: dict | None = None) -> None:
    """A plain insert as one row delta without deletes (an "append" snapshot)."""
    files = write_data_files(table, data)
    with StagedTransaction(table) as tx:
        row_delta(tx, files, ())
    if expected is not None:
        expected.update({r["id"]: r for r in data.to_pylist()})


def upsert(table, data: pa.Table, deleted_ids=(), expected: dict | None = None, summary: dict | None = None):
    """Replace the rows of `data`'s ids (inserting new ones) and delete `deleted_ids`, in one snapshot.
    Returns (located rows, delete files)."""
    keys = pa.table({"id": pa.concat_arrays([data.column("id").combine_chunks(),
                                             pa.array(list(deleted_ids), pa.int64())])})
    located = locate_keys(table, keys, ["id"])
    deletes = delete_positions(table, located.select(["file_path", "pos"]))  # vectors on v3
    files = write_data_files(table, data)
    with StagedTransaction(table) as tx:
        row_delta(tx, files, deletes, summary or {}, removed_delete_files=deletes.replaced)
    if expected is not None:
        expected.update({r["id"]: r for r in data.to_pylist()})
        for i in deleted_ids:
            expected.pop(i, None)
    return located, deletes


def pyiceberg_rows(table) -> list[dict]:
    return sorted(table.refresh().scan().to_arrow().to_pylist(), key=lambda r: r["id"])


def duckdb_rows(table) -> list[dict]:
    return read_iceberg(table.refresh(), order_by="id").to_pylist()


def expected_rows(expected: dict) -> list[dict]:
    return [expected[k] for k in sorted(expected)]


def assert_readers_agree(table, expected: dict) -> None:
    want = expected_rows(expected)
    assert pyiceberg_rows(table) == want
    assert duckdb_rows(table) == want


def check_manifests(table) -> dict:
    """Every manifest of every snapshot: data manifests hold data files, DELETES manifests position
    deletes, and no equality delete anywhere. Returns counts of the current snapshot's manifests
    ("live_deletes": DELETES manifests that still hold live delete files, not only removals)."""
    counts = {"data": 0, "deletes": 0, "live_deletes": 0}
    for snapshot in table.metadata.snapshots:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                content = entry.data_file.content
                assert content != DataFileContent.EQUALITY_DELETES, entry.data_file.file_path
                want = DataFileContent.DATA if manifest.content == ManifestContent.DATA \
                    else DataFileContent.POSITION_DELETES
                assert content == want, (manifest.manifest_path, content)
    for manifest in table.current_snapshot().manifests(table.io):
        counts["data" if manifest.content == ManifestContent.DATA else "deletes"] += 1
        if manifest.content == ManifestContent.DELETES and (manifest.added_files_count or
                                                              manifest.existing_files_count):
            counts["live_deletes"] += 1
    return counts
