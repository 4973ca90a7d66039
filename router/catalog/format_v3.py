"""Iceberg format v3 manifests, manifest lists and snapshots, written where pyiceberg 0.12 cannot.

pyiceberg 0.12 reads v3 tables but writes none: its manifest and manifest-list
writers stop at v2, its metadata model refuses to serialise v3, and its readers
project manifests onto the v2 schema, which drops the v3 fields a commit must
carry forward (a data file's ``first_row_id``, a deletion vector's
``referenced_data_file``, ``content_offset`` and ``content_size_in_bytes``, a
manifest's ``first_row_id``). Row lineage (the spec's "Row Lineage") also needs
every commit to assign row ids:

- a snapshot's ``first-row-id`` is the table's ``next-row-id`` and its
  ``added-rows`` the ids it hands out; ``next-row-id`` moves on by that much;
- the manifest list gives every data manifest without a ``first_row_id`` one
  (new manifests, and the old manifests of a table upgraded from v2), counting
  its added and existing rows (the spec's simple, valid estimate);
- reading a data manifest, a file without ``first_row_id`` inherits the
  manifest's plus the rows of the files before it that inherit too, so a commit
  that rewrites an entry (existing or deleted) writes the inherited value.

`install` swaps these into pyiceberg's snapshot producer (the writers it picks by
format version, its manifest reads and the snapshot it builds), once per process
(router.catalog.get_catalog). v1 and v2 tables go through pyiceberg's code as before:
only the reads use the v3 schema, whose extra fields are optional and absent there.

pyiceberg 0.12 names used: ``_SnapshotProducer._commit`` (wrapped), the module-level
``write_manifest`` / ``write_manifest_list`` of ``pyiceberg.table.update.snapshot``,
``pyiceberg.manifest.read_manifest_list`` and ``ManifestFile.fetch_manifest_entry``.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pyiceberg.avro.file import AvroFile, AvroOutputFile
from pyiceberg.manifest import (
    MANIFEST_ENTRY_SCHEMAS, MANIFEST_LIST_FILE_SCHEMAS, UNASSIGNED_SEQ, DataFile, DataFileContent, FileFormat,
    ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, ManifestListWriter, ManifestWriterV2,
    PartitionFieldSummary, _inherit_from_manifest,
)
from pyiceberg import manifest as manifest_module
from pyiceberg.table.metadata import TableMetadataUtil
from pyiceberg.table.update import AddSnapshotUpdate, UpgradeFormatVersionUpdate, _apply_table_update
from pyiceberg.table.update import snapshot as snapshot_module
from pyiceberg.table.update.snapshot import _SnapshotProducer

#: Reserved field ids of the row lineage columns (spec: "Reserved Field IDs").
ROW_ID_FIELD = 2147483540
LAST_UPDATED_FIELD = 2147483539
ROW_ID = "_row_id"
LAST_UPDATED = "_last_updated_sequence_number"

#: Positions of the v3-only fields in pyiceberg's records (DATA_FILE_TYPE[3], MANIFEST_LIST_FILE_SCHEMAS[3]).
_FIRST_ROW_ID, _REFERENCED, _OFFSET, _SIZE = 16, 17, 18, 19
_DATA_FILE_FIELDS = 20
_MANIFEST_FIRST_ROW_ID, _MANIFEST_FIELDS = 15, 16

_pyiceberg = {
    "commit": _SnapshotProducer._commit,
    "write_manifest": snapshot_module.write_manifest,
    "write_manifest_list": snapshot_module.write_manifest_list,
    "read_manifest_list": manifest_module.read_manifest_list,
    "fetch": ManifestFile.fetch_manifest_entry,
}


# ----------------------------------------------------------------------------- v3 fields of pyiceberg records

def _field(record, position: int):
    data = record._data
    return data[position] if len(data) > position else None


def first_row_id(data_file: DataFile) -> int | None:
    return _field(data_file, _FIRST_ROW_ID)


def referenced_data_file(delete_file: DataFile) -> str | None:
    return _field(delete_file, _REFERENCED)


def content_offset(delete_file: DataFile) -> int | None:
    return _field(delete_file, _OFFSET)


def content_size(delete_file: DataFile) -> int | None:
    return _field(delete_file, _SIZE)


def manifest_first_row_id(manifest: ManifestFile) -> int | None:
    return _field(manifest, _MANIFEST_FIRST_ROW_ID)


def is_deletion_vector(delete_file: DataFile) -> bool:
    return delete_file.file_format == FileFormat.PUFFIN


def delete_key(delete_file: DataFile) -> tuple[str, int | None]:
    """What identifies a delete file's entry: deletion vectors share their Puffin file, one blob each."""
    return delete_file.file_path, content_offset(delete_file)


def _padded(record, size: int) -> None:
    """Give a record read or made with a v2 struct the v3 fields (null), in place: the v2 fields keep
    their positions, so a v2 writer still writes the record as before."""
    missing = size - len(record._data)
    if missing > 0:
        record._data.extend([None] * missing)


# ----------------------------------------------------------------------------- writers

class ManifestWriterV3(ManifestWriterV2):
    """A v3 data manifest: v2's rules with the v3 data file struct (row lineage, deletion vector fields)."""

    @property
    def version(self):
        return 3

    def new_writer(self) -> AvroOutputFile[ManifestEntry]:
        return AvroOutputFile[ManifestEntry](output_file=self._output_file, file_schema=self._with_partition(3),
                                             record_schema=self._with_partition(3), schema_name="manifest_entry",
                                             metadata=self._meta)

    def prepare_entry(self, entry: ManifestEntry) -> ManifestEntry:
        _padded(entry.data_file, _DATA_FILE_FIELDS)
        if entry.data_file.content != DataFileContent.DATA and first_row_id(entry.data_file) is not None:
            entry.data_file._data[_FIRST_ROW_ID] = None  # the spec: always null for delete files
        return super().prepare_entry(entry)


class DeleteManifestWriterV3(ManifestWriterV3):
    """A v3 manifest of delete files (deletion vectors, and the position-delete files of an upgraded table)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


@dataclass
class _RowIds:
    """The row ids one snapshot hands out: from the table's next-row-id, as its manifest list assigns them."""

    first: int
    assigned: int = 0


_row_ids: contextvars.ContextVar[_RowIds | None] = contextvars.ContextVar("icerouter_row_ids", default=None)


class ManifestListWriterV3(ManifestListWriter):
    """A v3 manifest list: sequence numbers as v2, and a first_row_id for every data manifest lacking one."""

    def __init__(self, output_file, snapshot_id: int, parent_snapshot_id: int | None, sequence_number: int,
                 compression, row_ids: _RowIds) -> None:
        super().__init__(format_version=3, output_file=output_file, meta={
            "snapshot-id": str(snapshot_id),
            "parent-snapshot-id": str(parent_snapshot_id) if parent_snapshot_id is not None else "null",
            "sequence-number": str(sequence_number),
            "first-row-id": str(row_ids.first),
            "format-version": "3",
            "avro.codec": compression,
        })
        self._commit_snapshot_id, self._sequence_number, self._row_ids = snapshot_id, sequence_number, row_ids

    def __enter__(self) -> ManifestListWriterV3:
        self._writer = AvroOutputFile[ManifestFile](output_file=self._output_file,
                                                    record_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
                                                    file_schema=MANIFEST_LIST_FILE_SCHEMAS[3],
                                                    schema_name="manifest_file", metadata=self._meta)
        self._writer.__enter__()
        return self

    def prepare_manifest(self, manifest_file: ManifestFile) -> ManifestFile:
        """A copy (the manifest objects are shared through caches) with its sequence numbers and row ids."""
        out = ManifestFile(*manifest_file._data)
        _padded(out, _MANIFEST_FIELDS)
        ours = out.added_snapshot_id == self._commit_snapshot_id
        for name in ("sequence_number", "min_sequence_number"):
            if getattr(out, name) == UNASSIGNED_SEQ:
                if not ours:
                    raise ValueError(f"unassigned {name} for a manifest of snapshot {out.added_snapshot_id}")
                setattr(out, name, self._sequence_number)
        if out.content == ManifestContent.DATA and manifest_first_row_id(out) is None:
            out._data[_MANIFEST_FIRST_ROW_ID] = self._row_ids.first + self._row_ids.assigned
            self._row_ids.assigned += (out.added_rows_count or 0) + (out.existing_rows_count or 0)
        return out


def _write_manifest(format_version, spec, schema, output_file, snapshot_id, avro_compression):
    if format_version == 3:
        return ManifestWriterV3(spec, schema, output_file, snapshot_id, avro_compression)
    return _pyiceberg["write_manifest"](format_version, spec, schema, output_file, snapshot_id, avro_compression)


def _write_manifest_list(format_version, output_file, snapshot_id, parent_snapshot_id, sequence_number,
                         avro_compression):
    if format_version == 3:
        row_ids = _row_ids.get()
        if row_ids is None:
            raise ValueError("a v3 manifest list is written only within a snapshot commit (it assigns row ids)")
        return ManifestListWriterV3(output_file, snapshot_id, parent_snapshot_id, sequence_number, avro_compression,
                                    row_ids)
    return _pyiceberg["write_manifest_list"](format_version, output_file, snapshot_id, parent_snapshot_id,
                                             sequence_number, avro_compression)


def _commit(self: _SnapshotProducer):
    """pyiceberg's snapshot, and on a v3 table the row ids its manifest list assigned as `added-rows`."""
    metadata = self._transaction.table_metadata
    if metadata.format_version < 3:
        return _pyiceberg["commit"](self)
    if metadata.next_row_id is None:
        raise ValueError("a v3 table without next-row-id: its metadata was not written by a v3 writer")
    row_ids = _RowIds(metadata.next_row_id)
    token = _row_ids.set(row_ids)
    try:
        updates, requirements = _pyiceberg["commit"](self)
    finally:
        _row_ids.reset(token)
    out = []
    for update in updates:
        if isinstance(update, AddSnapshotUpdate):
            update = AddSnapshotUpdate(snapshot=update.snapshot.model_copy(
                update={"first_row_id": row_ids.first, "added_rows": row_ids.assigned}))
        out.append(update)
    return tuple(out), requirements


# ----------------------------------------------------------------------------- upgrade

class UpgradeToV3(UpgradeFormatVersionUpdate):
    """`upgrade-format-version` to 3, which pyiceberg 0.12 refuses to apply (it supports up to v2).

    A REST catalog applies it itself; ours (router/catalog/sql.py) apply it here: the metadata becomes
    v3 with ``next-row-id`` 0 (the spec's "Row Lineage for Upgraded Tables"); snapshots, manifests and
    position-delete files stay as they are and valid. The next snapshot assigns row ids to every data file.
    """

    format_version: int = Field(alias="format-version", default=3)


@_apply_table_update.register(UpgradeToV3)
def _upgrade(update: UpgradeToV3, base_metadata, context):
    if base_metadata.format_version >= 3:
        return base_metadata
    if base_metadata.format_version < 2:
        raise ValueError("only a format v2 table is upgraded to v3")
    upgraded = TableMetadataUtil._construct_without_validation(base_metadata.model_copy(update={"format_version": 3}))
    context.add_update(update)
    return upgraded.model_copy(update={"next_row_id": 0})


# ----------------------------------------------------------------------------- readers

def _read_manifest_list(input_file):
    """The manifests of a list with the v3 fields (a v1/v2 list reads them as null)."""
    with AvroFile[ManifestFile](input_file, MANIFEST_LIST_FILE_SCHEMAS[3],
                                read_types={-1: ManifestFile, 508: PartitionFieldSummary},
                                read_enums={517: ManifestContent}) as reader:
        yield from reader


def _fetch_manifest_entry(self: ManifestFile, io: Any, discard_deleted: bool = True) -> list[ManifestEntry]:
    """The entries with the v3 data file fields, data files' first_row_id inherited (spec: "First Row ID
    Inheritance"), then sequence numbers and spec id as pyiceberg inherits them."""
    with AvroFile[ManifestEntry](io.new_input(self.manifest_path), MANIFEST_ENTRY_SCHEMAS[3],
                                 read_types={-1: ManifestEntry, 2: DataFile},
                                 read_enums={0: ManifestEntryStatus, 101: FileFormat, 134: DataFileContent}) as reader:
        entries = list(reader)
    next_id = manifest_first_row_id(self)
    if next_id is not None and self.content == ManifestContent.DATA:
        for entry in entries:
            f = entry.data_file
            if first_row_id(f) is None:
                _padded(f, _DATA_FILE_FIELDS)
                f._data[_FIRST_ROW_ID] = next_id
                next_id += f.record_count
    return [_inherit_from_manifest(e, self) for e in entries
            if not discard_deleted or e.status != ManifestEntryStatus.DELETED]


def install() -> None:
    _SnapshotProducer._commit = _commit
    snapshot_module.write_manifest = _write_manifest
    snapshot_module.write_manifest_list = _write_manifest_list
    manifest_module.read_manifest_list = _read_manifest_list
    ManifestFile.fetch_manifest_entry = _fetch_manifest_entry


def uninstall() -> None:
    """pyiceberg's own writers and readers again (tests)."""
    _SnapshotProducer._commit = _pyiceberg["commit"]
    snapshot_module.write_manifest = _pyiceberg["write_manifest"]
    snapshot_module.write_manifest_list = _pyiceberg["write_manifest_list"]
    manifest_module.read_manifest_list = _pyiceberg["read_manifest_list"]
    ManifestFile.fetch_manifest_entry = _pyiceberg["fetch"]
