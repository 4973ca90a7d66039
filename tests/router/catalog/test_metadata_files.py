"""Metadata files written with cached snapshot JSON and read reusing known snapshots
(router/catalog/metadata_files.py), on SQLite and PostgreSQL catalogs: the same metadata as
pyiceberg's own writer and reader, read back by pyiceberg and by DuckDB."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.serializers import FromInputFile
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, get_catalog, load_table
from router.catalog.commit import commit_table
from router.catalog.metadata_files import metadata_json, read_metadata
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from router.catalog.datafiles import write_data_files
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))
ROWS = 5


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def commit_batches(config: CatalogConfig, name: str, first: int, count: int, maintenance=None) -> None:
    """What the job's tasks do: one file per batch, offsets in the property and the snapshot summary."""
    for batch in range(first, first + count):
        ids = list(range(batch * ROWS, (batch + 1) * ROWS))
        data = pa.table({"id": pa.array(ids, pa.int64()), "body": pa.array([f"row {i}" for i in ids])})
        result = TableResult(name, data_files=write_data_files(load_table(config, name), data), rows=ROWS,
                             offsets={"orders/0": [ids[0], ids[-1]]})
        outcome = commit_table(config, result, "job", batch, maintenance=maintenance, where="task")
        assert outcome.status == "committed", outcome.error


def test_written_metadata_is_what_pyiceberg_writes_and_every_reader_reads_it(catalog_config, unique_name):
    name = f"{unique_name('n')}.events"
    create_table(catalog_config, name, SCHEMA)
    commit_batches(catalog_config, name, 0, 12, MaintenanceConfig(retain_last_snapshots=8, max_snapshot_age_seconds=0,
                                                                  expire_every_commits=1))
    table = load_table(catalog_config, name)
    metadata = table.metadata
    assert 8 <= len(metadata.snapshots) < 12  # expiry ran: the cache holds snapshots the file no longer has

    assert json.loads(metadata_json(metadata)) == json.loads(metadata.model_dump_json())
    with table.io.new_input(table.metadata_location).open() as stream:
        written = json.loads(stream.read())
    assert written == json.loads(metadata.model_dump_json())
    assert FromInputFile.table_metadata(table.io.new_input(table.metadata_location)) == metadata
    fresh = catalog_config.load().load_table(name)  # pyiceberg's own catalog and reader
    assert fresh.scan().to_arrow().num_rows == 12 * ROWS
    duck = read_iceberg(fresh, order_by="id")
    assert duck.column("id").to_pylist() == list(range(12 * ROWS))


def test_reading_reuses_the_snapshots_the_cached_metadata_holds(catalog_config, unique_name):
    name = f"{unique_name('n')}.events"
    create_table(catalog_config, name, SCHEMA)
    commit_batches(catalog_config, name, 0, 4)
    old = load_table(catalog_config, name)
    old_metadata, old_location = old.metadata, old.metadata_location
    other = catalog_config.load().load_table(name)  # another process's handle commits twice more
    for batch in (4, 5):
        other.append(pa.table({"id": pa.array([batch * ROWS], pa.int64()), "body": pa.array(["x"])}))

    metadata = read_metadata(old.io, other.metadata_location, old_metadata)

    assert metadata == FromInputFile.table_metadata(old.io.new_input(other.metadata_location))
    known = {s.snapshot_id: s for s in old_metadata.snapshots}
    reused = [s for s in metadata.snapshots if s.snapshot_id in known]
    assert len(reused) == 4 and all(s is known[s.snapshot_id] for s in reused)  # not parsed again
    assert len(metadata.snapshots) == 6
    assert metadata.snapshots[-1].summary["added-records"] == "1"

    assert get_catalog(catalog_config).refresh_table(old) is True  # in place, as Table.refresh
    assert old.metadata_location == other.metadata_location != old_location and old.metadata == metadata
    assert get_catalog(catalog_config).refresh_table(old) is False  # unchanged: nothing read
    assert load_table(catalog_config, name, refresh=True).scan().to_arrow().num_rows == 4 * ROWS + 2


def test_a_format_version_1_table_is_written_as_pyiceberg_writes_it(catalog_config, unique_name):
    name = f"{unique_name('n')}.v1"
    table = create_table(catalog_config, name, SCHEMA, properties={"format-version": "1"})
    table.append(pa.table({"id": pa.array([1, 2], pa.int64()), "body": pa.array(["a", "b"])}))
    table.append(pa.table({"id": pa.array([3], pa.int64()), "body": pa.array(["c"])}))
    metadata = table.refresh().metadata
    assert metadata.format_version == 1
    assert json.loads(metadata_json(metadata)) == json.loads(metadata.model_dump_json())
    assert all("sequence-number" not in s for s in json.loads(metadata_json(metadata))["snapshots"])
    assert catalog_config.load().load_table(name).scan().to_arrow().num_rows == 3


def test_a_snapshot_whose_parent_expired_is_read_as_the_file_now_has_it(catalog_config, unique_name):
    """pyiceberg's expiry drops the parent id of a snapshot whose parent it removed: the same
    snapshot then reads (and writes) differently, so the cached version must not be reused."""
    from router.catalog import expire_snapshots

    name = f"{unique_name('n')}.events"
    create_table(catalog_config, name, SCHEMA)
    commit_batches(catalog_config, name, 0, 3)
    cached = load_table(catalog_config, name)
    before = cached.metadata
    other = catalog_config.load().load_table(name)
    assert expire_snapshots(other, retain_last=2, max_age_seconds=0) == 1

    metadata = read_metadata(cached.io, other.metadata_location, before)

    assert metadata == FromInputFile.table_metadata(cached.io.new_input(other.metadata_location))
    assert metadata.snapshots[0].parent_snapshot_id is None and before.snapshots[1].parent_snapshot_id is not None
    assert metadata.snapshots[1] is before.snapshots[2]  # unchanged: reused
    assert json.loads(metadata_json(metadata)) == json.loads(metadata.model_dump_json())
