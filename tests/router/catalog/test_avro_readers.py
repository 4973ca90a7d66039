"""Manifest lists and manifests read through cached reader trees read exactly what pyiceberg's own
open reads, for tables whose manifests differ in schema (partition specs, evolved columns).

Runs on SQLite, PostgreSQL and the REST catalog (SeaweedFS, S3); DuckDB reads the table back.
"""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.manifest import _manifests
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.typedef import Record
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from router.catalog import avro_readers
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestamptzType(), required=False),
                NestedField(3, "kind", StringType(), required=False))


def _rows(first: int, count: int, with_note: bool = False) -> pa.Table:
    ids = list(range(first, first + count))
    cols = {"id": pa.array(ids, pa.int64()),
            "ts": pa.array([dt.datetime(2024, 3, 1 + i % 3, tzinfo=dt.timezone.utc) for i in ids], pa.timestamp("us", tz="UTC")),
            "kind": pa.array([f"k{i % 2}" for i in ids])}
    if with_note:
        cols["note"] = pa.array([f"n{i}" for i in ids])
    return pa.table(cols)


def _plain(value):
    """A value of a read manifest entry as something `==` compares by content."""
    if isinstance(value, Record):
        return [_plain(v) for v in value._data]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if hasattr(value, "items"):  # pyiceberg's LazyDict of column statistics
        return dict(value.items())
    return value


def _everything(table) -> list:
    """Every manifest list of the table and every entry of every manifest, as plain values."""
    out = []
    for snapshot in table.metadata.snapshots:
        for manifest in _manifests(table.io, snapshot.manifest_list):
            out.append(_plain(manifest))
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                out.append(_plain(entry))
    return out


@pytest.fixture
def mixed_table(catalog, unique_name):
    """Manifests of two partition specs and two schemas."""
    ns = unique_name("avro")
    catalog.create_namespace(ns)
    spec = PartitionSpec(PartitionField(source_id=2, field_id=1000, transform=DayTransform(), name="ts_day"))
    table = catalog.create_table(f"{ns}.t", schema=SCHEMA, partition_spec=spec,
                                 properties={"commit.manifest-merge.enabled": "false"})
    table.append(_rows(0, 9))
    with table.update_schema() as update:
        update.add_column("note", StringType())
    table.append(_rows(9, 9, with_note=True))
    with table.update_spec() as update:
        update.add_field("kind", IdentityTransform(), "kind")
    table.append(_rows(18, 9, with_note=True))
    table.delete("id < 3")
    yield table.refresh()
    avro_readers.install()  # the state every process that built a catalog is in


def test_cached_readers_read_what_pyiceberg_reads(mixed_table, monkeypatch):
    avro_readers.uninstall()
    expected = _everything(mixed_table)
    assert len(expected) > 10
    avro_readers.install()
    built = []
    real = avro_readers.resolve_reader
    monkeypatch.setattr(avro_readers, "resolve_reader", lambda *a: built.append(a) or real(*a))
    assert _everything(mixed_table) == expected
    trees = len(built)
    assert 2 <= trees <= 6  # one per distinct (file schema, read schema): list, and manifests per spec / delete
    assert _everything(mixed_table) == expected
    assert len(built) == trees  # read again: no tree built
    assert sorted(mixed_table.scan().to_arrow().column("id").to_pylist()) == list(range(3, 27))
    assert sorted(read_iceberg(mixed_table).column("id").to_pylist()) == list(range(3, 27))
