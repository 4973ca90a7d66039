"""Manifests and manifest lists written through the cached writers (router/catalog/avro_writers.py)
are byte for byte what pyiceberg's own writers write (the random sync marker aside), across
partition specs, format versions and a schema that evolves between two files."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest
from pyiceberg.avro.file import AvroFile
from pyiceberg.manifest import ManifestEntry, ManifestEntryStatus, ManifestFile, write_manifest, write_manifest_list
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform, IdentityTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from router.catalog import avro_writers
from router.catalog.datafiles import write_data_files

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "ts", TimestamptzType(), required=False),
                NestedField(3, "kind", StringType(), required=False))
SPECS = {
    "unpartitioned": PartitionSpec(),
    "day_and_kind": PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"),
                                  PartitionField(3, 1001, IdentityTransform(), "kind")),
}


def _rows(count: int) -> pa.Table:
    return pa.table({"id": pa.array(range(count), pa.int64()),
                     "ts": pa.array([dt.datetime(2024, 3, 1 + i % 3, tzinfo=dt.timezone.utc) for i in range(count)],
                                    pa.timestamp("us", tz="UTC")),
                     "kind": pa.array([f"k{i % 2}" for i in range(count)])})


def _bytes(path: str, io, folder: str) -> bytes:
    """The file's bytes with its random sync marker and its round's folder made neutral."""
    with AvroFile(io.new_input(path)) as f:
        sync = f.header.sync
    with io.new_input(path).open() as stream:
        return stream.read().replace(sync, b"S" * len(sync)).replace(folder.encode(), b"FOLDER")


def _write_both(table, files: list, version: int, folder: str) -> tuple[bytes, bytes]:
    """One manifest over `files` and one manifest list, written by the writers in place (no
    compression, so a difference shows as bytes)."""
    manifest_path, list_path = f"{folder}/m0.avro", f"{folder}/snap.avro"
    with write_manifest(format_version=version, spec=table.spec(), schema=table.schema(),
                        output_file=table.io.new_output(manifest_path), snapshot_id=7,
                        avro_compression="null") as writer:
        for data_file in files:
            writer.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=7, data_file=data_file))
    manifest: ManifestFile = writer.to_manifest_file()
    with write_manifest_list(format_version=version, output_file=table.io.new_output(list_path), snapshot_id=7,
                             parent_snapshot_id=5, sequence_number=3, avro_compression="null") as lister:
        lister.add_manifests([manifest])
    return _bytes(manifest_path, table.io, folder), _bytes(list_path, table.io, folder)


@pytest.mark.parametrize("spec_name", sorted(SPECS))
@pytest.mark.parametrize("version", [1, 2])
def test_cached_writers_write_what_pyiceberg_writes(sqlite_catalog, unique_name, tmp_path, spec_name, version):
    ns = unique_name("n")
    sqlite_catalog.create_namespace(ns)
    table = sqlite_catalog.create_table(f"{ns}.t", schema=SCHEMA, partition_spec=SPECS[spec_name],
                                        properties={"format-version": str(version)})
    files = write_data_files(table, _rows(12))
    written = {}
    try:
        for i, round_ in enumerate(("theirs", "ours", "ours again", "theirs evolved", "ours evolved")):
            if round_ == "theirs evolved":
                with table.update_schema() as update:
                    update.add_column("note", StringType())
            (avro_writers.install if round_.startswith("ours") else avro_writers.uninstall)()
            folder = tmp_path / f"round{i}"
            folder.mkdir()
            written[round_] = _write_both(table, files, version, str(folder))
    finally:
        avro_writers.install()
    assert written["ours"] == written["ours again"] == written["theirs"]
    assert written["ours evolved"] == written["theirs evolved"]
    assert b"note" in written["ours evolved"][0] and b"note" not in written["ours"][0]
