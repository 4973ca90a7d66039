"""One snapshot that adds data files and position-delete files together (Iceberg's RowDelta).

pyiceberg 0.12 cannot commit delete files: its manifest writers are hard-wired
to data manifests (``ManifestWriterV2.content()`` is DATA, its Avro metadata says
"content": "data"), so a delete file handed to an append is recorded as data and
read back as rows. `FileChanges` is a snapshot producer that writes each kind of
file into a manifest of its own content (data manifests, DELETES manifests, one
per partition spec), keeps the parent's manifests, removes files of either kind
when asked (compaction) and counts both kinds in the snapshot summary.

`RowDelta` is the upsert commit: new rows as data files and the old images as
position deletes in ONE snapshot: position-delete files on a v2 table, deletion
vectors on a v3 table (router/catalog/deletion_vectors.py), each replacing the
data file's previous vector, which leaves in the same snapshot (a data file has
at most one live vector). The scan rule makes that work: a position
delete applies to data files of a sequence number <= its own, so it applies to
the older files it names, and would to data of its own snapshot. Its operation
is "overwrite" when it deletes rows (as Iceberg's RowDelta records it) and
"append" otherwise. Like any producer it runs inside a transaction, with the
job's table property and ExpireSnapshots beside it (catalog/commit.py).

Positions are only valid for the files they were located in, so a row delta
checks that every data file its deletes name is live in the snapshot it commits
on, and refuses to be re-applied on a newer snapshot by pyiceberg's own retry
(keys located on an older snapshot may have moved since): the caller locates
again. Our catalogs already refuse a stale commit (the branch head is asserted).

pyiceberg 0.12 private names used: ``_SnapshotProducer`` (snapshot ids, manifest
list, branch update, retry hooks ``_commit_window`` / ``_validate_concurrency``,
``_written_manifests``), ``_ManifestMergeManager`` (data manifests merged as
``merge_append`` merges them) and ``ManifestWriterV2`` (subclassed for DELETES).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Iterable

from pyiceberg.exceptions import ValidationException
from pyiceberg.manifest import (
    DataFile, DataFileContent, ManifestContent, ManifestEntry, ManifestEntryStatus, ManifestFile, ManifestWriter,
    ManifestWriterV2,
)
from pyiceberg.table import TableProperties
from pyiceberg.table.refs import MAIN_BRANCH
from pyiceberg.table.snapshots import Operation, SnapshotSummaryCollector, Summary, update_snapshot_summaries
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _SnapshotProducer
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.utils.properties import property_as_bool, property_as_int

from router.catalog.deletes import require_row_level
from router.catalog.format_v3 import DeleteManifestWriterV3, delete_key, is_deletion_vector, referenced_data_file
from router.catalog.snapshot_files import read_position_deletes, snapshot_files
from router.exceptions import RowLevelError


class DeleteManifestWriter(ManifestWriterV2):
    """A v2 manifest of position-delete files: content DELETES in the manifest list and in its metadata."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


class FileChanges(_SnapshotProducer["FileChanges"]):
    """A snapshot adding and removing data files and position-delete files (see the module docstring)."""

    def __init__(self, transaction, operation: Operation = Operation.OVERWRITE,
                 snapshot_properties: dict[str, str] = EMPTY_DICT, branch: str | None = MAIN_BRANCH,
                 io=None) -> None:
        super().__init__(operation, transaction, io or transaction._table.io,
                         snapshot_properties=snapshot_properties, branch=branch)
        self._added_delete_files: list[DataFile] = []
        self._removed_delete_files: list[DataFile] = []  # one per format_v3.delete_key

    # ------------------------------------------------------------------ what changes

    def append_data_file(self, data_file: DataFile) -> FileChanges:
        if data_file.content != DataFileContent.DATA:
            raise RowLevelError("a delete file was handed over as data", file=data_file.file_path)
        self._added_data_files.append(_with_spec_id(data_file, self._transaction.table_metadata.default_spec_id))
        return self

    add_data_file = append_data_file

    def add_delete_file(self, delete_file: DataFile) -> FileChanges:
        if delete_file.content != DataFileContent.POSITION_DELETES:
            raise RowLevelError("only position-delete files are committed as deletes (never equality deletes)",
                                file=delete_file.file_path, content=str(delete_file.content))
        v3 = self._transaction.table_metadata.format_version >= 3
        if v3 != is_deletion_vector(delete_file):
            raise RowLevelError("a v3 table takes deletion vectors and a v2 table position-delete files",
                                file=delete_file.file_path, format=str(delete_file.file_format))
        self._added_delete_files.append(_with_spec_id(delete_file, self._transaction.table_metadata.default_spec_id))
        return self

    def delete_data_file(self, data_file: DataFile) -> FileChanges:
        self._deleted_data_files.add(data_file)
        return self

    remove_data_file = delete_data_file

    def remove_delete_file(self, delete_file: DataFile) -> FileChanges:
        if delete_key(delete_file) not in {delete_key(f) for f in self._removed_delete_files}:
            self._removed_delete_files.append(delete_file)
        return self

    # ------------------------------------------------------------------ manifests

    def _writer(self, content: ManifestContent, spec_id: int) -> ManifestWriter:
        if content == ManifestContent.DATA:
            return self.new_manifest_writer(self.spec(spec_id))
        kind = DeleteManifestWriterV3 if self._transaction.table_metadata.format_version >= 3 else DeleteManifestWriter
        return kind(self.spec(spec_id), self.schema(), self.new_manifest_output(), self._snapshot_id,
                    self._compression)

    def _write(self, content: ManifestContent, spec_id: int, entries: Iterable[ManifestEntry]) -> ManifestFile:
        with self._writer(content, spec_id) as writer:
            for entry in entries:
                writer.add_entry(entry)
        return writer.to_manifest_file()

    def _added(self, content: ManifestContent, files: list[DataFile]) -> list[ManifestFile]:
        by_spec: dict[int, list[DataFile]] = defaultdict(list)
        for f in files:
            by_spec[f.spec_id].append(f)
        return [self._write(content, spec_id, (
            ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                    sequence_number=None, file_sequence_number=None, data_file=f) for f in group))
            for spec_id, group in sorted(by_spec.items())]

    def _parent_manifests(self) -> tuple[list[ManifestFile], list[ManifestFile]]:
        """(the parent's manifests to keep, rewritten without removed files; manifests of the removed entries)."""
        metadata = self._transaction.table_metadata
        parent = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        targets = {ManifestContent.DATA: {_key(f, ManifestContent.DATA) for f in self._deleted_data_files},
                   ManifestContent.DELETES: {delete_key(f) for f in self._removed_delete_files}}
        kept: list[ManifestFile] = []
        removed: dict[tuple[ManifestContent, int], list[ManifestEntry]] = defaultdict(list)
        found: set[str] = set()
        for manifest in parent.manifests(self._io) if parent is not None else ():
            wanted = targets[manifest.content]
            if not (manifest.has_added_files() or manifest.has_existing_files()):
                continue  # only entries of files removed earlier
            if not wanted:
                kept.append(manifest)
                continue
            entries = self._manifest_entries(manifest)
            hits = [e for e in entries if _key(e.data_file, manifest.content) in wanted]
            if not hits:
                kept.append(manifest)
                continue
            found.update(_key(e.data_file, manifest.content) for e in hits)
            removed[(manifest.content, manifest.partition_spec_id)] += [_copy(e, ManifestEntryStatus.DELETED,
                                                                               self._snapshot_id) for e in hits]
            rest = [_copy(e, ManifestEntryStatus.EXISTING, e.snapshot_id) for e in entries
                    if _key(e.data_file, manifest.content) not in wanted]
            if rest:
                kept.append(self._write(manifest.content, manifest.partition_spec_id, rest))
        missing = (targets[ManifestContent.DATA] | targets[ManifestContent.DELETES]) - found
        if missing:
            raise ValidationException(f"Missing required files to delete: {', '.join(sorted(map(str, missing)))}")
        gone = [self._write(content, spec_id, entries) for (content, spec_id), entries in sorted(removed.items())]
        return kept, gone

    def _manifest_entries(self, manifest: ManifestFile) -> list[ManifestEntry]:
        """The live entries of a parent manifest (a subclass may hand over ones it already read)."""
        return manifest.fetch_manifest_entry(self._io, discard_deleted=True)

    def _existing_manifests(self) -> list[ManifestFile]:
        return self._parent_manifests()[0]

    def _deleted_entries(self) -> list[ManifestEntry]:
        return []  # written by _parent_manifests, with the content of the manifest they came from

    def _manifests(self) -> list[ManifestFile]:
        kept, gone = self._parent_manifests()
        new = self._added(ManifestContent.DATA, self._added_data_files)
        new += self._added(ManifestContent.DELETES, self._added_delete_files)
        return self._process_manifests(new + gone + kept)

    def _merge_settings(self) -> tuple[bool, int, int]:
        props = self._transaction.table_metadata.properties
        return (property_as_bool(props, TableProperties.MANIFEST_MERGE_ENABLED,
                                 TableProperties.MANIFEST_MERGE_ENABLED_DEFAULT),
                property_as_int(props, TableProperties.MANIFEST_MIN_MERGE_COUNT,
                                TableProperties.MANIFEST_MIN_MERGE_COUNT_DEFAULT),
                property_as_int(props, TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                                TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT))

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        """Merge data manifests as `merge_append` does and delete manifests once as many pile up."""
        enabled, min_count, target = self._merge_settings()
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
        data = _ManifestMergeManager(target, min_count, enabled, self).merge_manifests(data)
        return data + self._merge_deletes(deletes, min_count if enabled else 0)

    def _merge_deletes(self, manifests: list[ManifestFile], min_count: int) -> list[ManifestFile]:
        """Every delete manifest of a spec rewritten into one once `min_count` of them are live
        (each row delta adds one); entries keep their sequence numbers, so the scan rule is unchanged."""
        if not min_count or len(manifests) < min_count:
            return manifests
        by_spec: dict[int, list[ManifestFile]] = defaultdict(list)
        for m in manifests:
            by_spec[m.partition_spec_id].append(m)
        out = []
        for spec_id, group in sorted(by_spec.items()):
            if len(group) < 2:
                out += group
                continue
            with self._writer(ManifestContent.DELETES, spec_id) as writer:
                for manifest in group:
                    for entry in self.fetch_manifest_entry(manifest, discard_deleted=False):
                        ours = entry.snapshot_id == self._snapshot_id
                        if entry.status == ManifestEntryStatus.DELETED:
                            if ours:
                                writer.delete(entry)
                        elif entry.status == ManifestEntryStatus.ADDED and ours:
                            writer.add(entry)
                        else:
                            writer.existing(entry)
            out.append(writer.to_manifest_file())
        return out

    # ------------------------------------------------------------------ summary

    def _summary(self, snapshot_properties: dict[str, str] = EMPTY_DICT) -> Summary:
        """pyiceberg's summary, with delete files counted and every file under its own partition spec."""
        metadata = self._transaction.table_metadata
        schema, specs = metadata.schema(), metadata.specs()
        limit = property_as_int(metadata.properties, TableProperties.WRITE_PARTITION_SUMMARY_LIMIT,
                                TableProperties.WRITE_PARTITION_SUMMARY_LIMIT_DEFAULT)
        collector = SnapshotSummaryCollector(partition_summary_limit=limit or 0)
        for f in itertools.chain(self._added_data_files, self._added_delete_files):
            collector.add_file(f, schema=schema, partition_spec=specs[f.spec_id])
        for f in itertools.chain(self._deleted_data_files, self._removed_delete_files):
            collector.remove_file(f, schema=schema, partition_spec=specs[f.spec_id])
        previous = metadata.snapshot_by_id(self._parent_snapshot_id) if self._parent_snapshot_id is not None else None
        return update_snapshot_summaries(
            summary=Summary(operation=self._operation, **collector.build(), **(snapshot_properties or {})),
            previous_summary=previous.summary if previous is not None else None)


def _key(f: DataFile, content: ManifestContent):
    """A manifest entry's identity: a data file's path; a delete file's format_v3.delete_key."""
    return f.file_path if content == ManifestContent.DATA else delete_key(f)


def _with_spec_id(f: DataFile, default: int) -> DataFile:
    """pyiceberg's `DataFile.from_args` drops a `spec_id` argument: a new file without one is in the default spec."""
    try:
        f.spec_id
    except AttributeError:
        f.spec_id = default
    return f


def _copy(entry: ManifestEntry, status: ManifestEntryStatus, snapshot_id: int | None) -> ManifestEntry:
    return ManifestEntry.from_args(status=status, snapshot_id=snapshot_id, sequence_number=entry.sequence_number,
                                   file_sequence_number=entry.file_sequence_number, data_file=entry.data_file)


class RowDelta(FileChanges):
    """New data files and the position deletes of the rows they replace, in one snapshot."""

    def __init__(self, transaction, snapshot_properties: dict[str, str] = EMPTY_DICT,
                 branch: str | None = MAIN_BRANCH) -> None:
        require_row_level(transaction._table)
        super().__init__(transaction, Operation.APPEND, snapshot_properties, branch)

    def _commit(self):
        self._operation = Operation.OVERWRITE if self._added_delete_files else Operation.APPEND
        self._check_targets_live()
        return super()._commit()

    def _check_targets_live(self) -> None:
        """Every data file the new deletes name must be live in the snapshot this one builds on (or be
        added by this one); a deletion vector must be its file's only one, its previous vector removed."""
        if not self._added_delete_files:
            return
        table = self._transaction._table
        parent = self._parent_snapshot_id
        files = snapshot_files(table, parent, self._transaction.table_metadata) if parent is not None else None
        live = files.data if files is not None else {}
        ours = {f.file_path for f in self._added_data_files}  # same sequence number: deletes apply to them too
        for delete_file in self._added_delete_files:
            gone = [p for p in read_position_deletes(self._io, delete_file) if p not in live and p not in ours]
            if gone:
                raise ValidationException(f"Position deletes name data files that are not live in snapshot "
                                          f"{parent}: {', '.join(sorted(gone)[:3])}")
        vectors = [referenced_data_file(f) for f in self._added_delete_files if is_deletion_vector(f)]
        if len(vectors) != len(set(vectors)):
            raise RowLevelError("two deletion vectors for one data file in one snapshot",
                                file=sorted(p for p in vectors if vectors.count(p) > 1)[0])
        removed = {delete_key(f) for f in self._removed_delete_files}
        for path in vectors:
            kept = [d for d in (files.delete_files_for(path) if files is not None else ())
                    if is_deletion_vector(d) and delete_key(d) not in removed]
            if kept:
                raise ValidationException(f"a deletion vector for {path} leaves its previous one live")

    def _validate_concurrency(self) -> None:
        """pyiceberg's retry re-applies a commit on a newer snapshot: refuse, the keys must be located again."""
        window = self._commit_window
        if window is None or window.is_empty():
            return
        raise ValidationException("the table changed since its rows were located; locate the keys again")


def row_delta(transaction, data_files: Iterable[DataFile] = (), delete_files: Iterable[DataFile] = (),
              snapshot_properties: dict[str, str] | None = None, branch: str | None = MAIN_BRANCH,
              removed_delete_files: Iterable[DataFile] = ()) -> RowDelta | None:
    """Stage one row delta in `transaction` (committed with it); None when there is nothing to commit.
    `removed_delete_files`: the delete files the new vectors replace (merged into them)."""
    data_files, delete_files = list(data_files), list(delete_files)
    if not data_files and not delete_files:
        return None
    delta = RowDelta(transaction, snapshot_properties=dict(snapshot_properties or {}), branch=branch)
    for f in data_files:
        delta.add_data_file(f)
    for f in delete_files:
        delta.add_delete_file(f)
    for f in removed_delete_files:
        delta.remove_delete_file(f)
    delta.commit()
    return delta
