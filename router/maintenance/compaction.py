"""Compaction applied: the groups a plan chose rewritten, then one atomic `replace` commit.

The plan (bin-packing of small files per partition) is pure and lives in
router/maintenance/compaction_plan.py, so a dry run shows exactly what an
apply would do. Applying streams each group through a rolling writer (memory is
bounded by a batch read and a row group, whatever the group's size), then
commits ONE `replace` snapshot per table (old files out, new files in, same
rows) and re-validates against concurrent writers: an append landing meanwhile
is kept, a replaced file that is no longer live aborts the compaction and
leaves the table unchanged.

On a format v3 table the rewritten rows keep their row lineage: each row's
``_row_id`` and ``_last_updated_sequence_number`` (stored, else inherited from its
old file) are written into the new files (router/catalog/lineage.py), and the
deletion vectors of the rewritten files leave with them.

Tables with position deletes (upserts, change streams) are compacted too: the
rewritten files have the deletes applied, and the delete files left naming only
rewritten (or no longer live) data files leave in the same snapshot. A file
whose deletes remove at least DELETE_RATIO of its rows is rewritten even when
it is large or alone in its partition. Position deletes that land on a planned
file meanwhile abort the compaction (their rows would come back). Tables with
equality deletes are left alone: a rewritten file gets a newer sequence number,
which would undo them.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import (  # pinned pyiceberg 0.12: its scan's per-file rules
    ArrowScan, _combine_positional_deletes, _get_column_projection_values, _read_all_delete_files, _to_requested_schema,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, FileFormat, ManifestContent, ManifestFile
from pyiceberg.schema import prune_columns
from pyiceberg.table import FileScanTask, TableProperties
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _ManifestMergeManager
from pyiceberg.table.update.validate import _validate_data_files_exist, _validate_no_new_deletes_for_data_files
from pyiceberg.types import ListType, MapType
from pyiceberg.utils.properties import property_as_int

from router.catalog import backoff, delete_quietly
from router.catalog.reachable import drop_unlisted_manifests
from router.catalog.row_delta import FileChanges
from router.catalog.snapshot_files import SnapshotFiles, live_delete_files, snapshot_files
from router.catalog.format_v3 import first_row_id
from router.catalog.lineage import lineage_of, stored_lineage_columns, tracks_lineage, with_lineage
from router.catalog.rolling import ROW_GROUP_BUFFER_BYTES, RollingWriter
from router.catalog.sql import StagedTransaction
from router.exceptions import CompactionConflict, MaintenanceError, RowLevelError
from router.maintenance.compaction_plan import CompactionGroup
from router.progress import held_summaries

log = logging.getLogger("icerouter.maintenance")

COMMIT_ATTEMPTS = 4
READ_BATCH_ROWS = 16_384  # rows of an input file decoded at a time (a few MiB of Arrow for event rows)
COMPACTION_SUMMARY = {"icerouter.maintenance": "compaction"}
LOCAL_SCHEMES = ("", "file")


# ----------------------------------------------------------------------------- apply

class _ReplaceFiles(FileChanges):
    """Files out, files in, recorded as `replace` (same rows, other files; delete files applied and
    dropped); also merges the many one-batch manifests the job's appends leave behind."""

    def _summary(self, snapshot_properties=None) -> Summary:
        """Also the job offsets its parent holds (same rows, same offsets): a table rolled back to this
        snapshot reports them after its parents expired. Read from the staged base, whose head is the
        parent, also when pyiceberg's own retry rebuilds the snapshot on a newer one."""
        summary = super()._summary(snapshot_properties or {})
        carried = held_summaries(self._transaction.table_metadata)
        return Summary(Operation.REPLACE, **{**carried, **summary.additional_properties})

    def _validate_concurrency(self) -> None:
        """Used by pyiceberg's own retry: a rewrite conflicts with changes to its files, not with appends."""
        window = self._commit_window
        if window is None or window.is_empty() or window.head is None:
            return
        table = self._transaction._table
        _validate_data_files_exist(table, window.head, self._deleted_data_files, window.base)
        _validate_no_new_deletes_for_data_files(table, window.head, None, self._deleted_data_files, window.base)

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        target = property_as_int(self._transaction.table_metadata.properties,
                                 TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                                 TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT)
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        merged = _ManifestMergeManager(target, 2, True, self).merge_manifests(data)
        return merged + self._merge_deletes([m for m in manifests if m.content != ManifestContent.DATA], 2)


@dataclass
class CompactionResult:
    groups: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    bytes_added: int = 0
    rows: int = 0
    attempts: int = 0
    snapshot_id: int | None = None
    seconds: float = 0.0
    rows_deleted: int = 0  # rows the position deletes had removed, left out of the rewritten files
    removed_delete_files: list[str] = field(default_factory=list)  # position-delete files dropped


def _stream_files(table, tasks: Sequence[FileScanTask],
                  sequences: Mapping[str, int] | None = None) -> Iterator[pa.RecordBatch]:
    """The tasks' rows a batch at a time, one file after the other, projected to the current schema
    with their position deletes applied: pyiceberg's scan rules (projection by field id, name
    mapping, identity-partition values of columns a file lacks, the positions to skip), another reader.

    ``ArrowScan`` reads every file of a call whole in a thread pool before the first batch, and its
    per-file scanner reads ahead of a slower consumer: compacting the fan-in table's 97 MiB files
    (5.2 million rows, ~3 GB in Arrow), a driver held 2.6 GB of Arrow. ``iter_batches`` holds
    one row group's pages and a batch of it (benchmarks/compaction_memory.json).

    `sequences` (data file path -> data sequence number): the table tracks row lineage (v3), and
    each batch ends with the rows' ``_row_id`` and ``_last_updated_sequence_number``.
    """
    metadata, schema = table.metadata, table.schema()
    downcast = metadata.format_version <= 2  # as a scan: v3 keeps nanosecond timestamps
    deletes = _read_all_delete_files(table.io, tasks)
    wanted = {i for i in schema.field_ids if not isinstance(schema.find_type(i), (MapType, ListType))}  # as ArrowScan
    for task in tasks:
        if task.file.file_format != FileFormat.PARQUET:  # ORC from other writers: pyiceberg reads it, a file at a time
            if sequences is not None:
                raise MaintenanceError("rewriting a v3 table's non-Parquet files would lose their row lineage",
                                       table=_name(table), file=task.file.file_path)
            yield from ArrowScan(metadata, table.io, schema, AlwaysTrue())._record_batches_from_scan_tasks_and_deletes(
                [task], deletes)
            continue
        with table.io.new_input(task.file.file_path).open() as stream:
            parquet = pq.ParquetFile(stream)
            file_schema = pyarrow_to_schema(parquet.schema_arrow, metadata.name_mapping(),
                                            downcast_ns_timestamp_to_us=downcast, format_version=metadata.format_version)
            missing = _get_column_projection_values(task.file, schema, schema, metadata.specs().get(task.file.spec_id),
                                                    file_schema.field_ids)
            projected = prune_columns(file_schema, wanted, select_full_types=False)
            positions = deletes.get(task.file.file_path)
            stored = stored_lineage_columns(parquet.schema_arrow) if sequences is not None else {}
            start = 0
            for batch in parquet.iter_batches(batch_size=READ_BATCH_ROWS, use_threads=False,
                                              columns=[c.name for c in projected.columns] + list(stored.values())):
                end = start + batch.num_rows
                lineage = None
                if sequences is not None:
                    lineage = lineage_of(batch, start, first_row_id(task.file), sequences[task.file.file_path],
                                         stored)
                    batch = batch.select([c.name for c in projected.columns])
                if positions:
                    keep = _combine_positional_deletes(positions, start, end)
                    batch = batch.take(keep)
                    lineage = tuple(a.take(keep) for a in lineage) if lineage is not None else None
                start = end
                if batch.num_rows:
                    rows = _to_requested_schema(schema, projected, batch, downcast_ns_timestamp_to_us=downcast,
                                                projected_missing_fields=missing, allow_timestamp_tz_mismatch=True)
                    yield rows if lineage is None else with_lineage(rows, *lineage)


def _write_group(table, group: CompactionGroup, target_file_size_bytes: int, buffer_bytes: int) -> RollingWriter:
    """Stream a group, projected to the current schema and its position deletes applied, into
    target-size file(s).

    Memory holds a batch of the file being read and a row group being written, whatever the
    group's size; the pool's freed pages go back to the system afterwards.
    """
    writer = RollingWriter(table, target_file_size_bytes, buffer_bytes=buffer_bytes)
    deletes = group.deletes or ((),) * len(group.files)
    tasks = [FileScanTask(f, delete_files=set(d)) for f, d in zip(group.files, deletes)]
    sequences = None
    if tracks_lineage(table.metadata):  # the rows keep their row lineage (catalog/lineage.py)
        live = snapshot_files(table).sequence
        if any(f.file_path not in live for f in group.files):
            raise CompactionConflict("a planned file is no longer live", table=_name(table))
        sequences = {f.file_path: live[f.file_path] for f in group.files}
    try:
        for batch in _stream_files(table, tasks, sequences):
            writer.write(batch)
        writer.close()
    except FileNotFoundError as exc:  # another maintenance run replaced and expired it meanwhile
        delete_quietly(table.io, writer.abort())
        raise CompactionConflict(f"a planned file vanished: {exc}", table=_name(table)) from None
    except BaseException:
        delete_quietly(table.io, writer.abort())
        raise
    finally:
        pa.default_memory_pool().release_unused()  # mimalloc keeps freed pages otherwise
    if writer.rows != group.output_rows:
        delete_quietly(table.io, writer.paths)
        raise MaintenanceError("rows read differ from the manifests and deletes", table=_name(table),
                               partition=group.partition_path, expected=group.output_rows, read=writer.rows)
    return writer


def compact(table, groups: Sequence[CompactionGroup], target_file_size_bytes: int | None = None,
            attempts: int = COMMIT_ATTEMPTS, buffer_bytes: int = ROW_GROUP_BUFFER_BYTES) -> CompactionResult:
    """Rewrite the groups and commit them as one atomic replace snapshot (refresh + retry on conflicts).

    ``buffer_bytes`` (the row group held in memory) bounds the memory a rewrite takes, with one batch read.
    """
    started = time.perf_counter()
    result = CompactionResult(groups=len(groups))
    if not groups:
        return result
    target = target_file_size_bytes or max(g.input_bytes for g in groups)
    spec_id = table.metadata.default_spec_id
    old, new = [f for g in groups for f in g.files], []
    planned = {f.file_path: frozenset(d.file_path for d in ds)
               for g in groups for f, ds in zip(g.files, g.deletes or ((),) * len(g.files))}
    expected = sum(g.output_rows for g in groups)
    try:
        for group in groups:
            new += _write_group(table, group, target, buffer_bytes).files
        if sum(f.record_count for f in new) != expected:
            raise MaintenanceError("rewritten files do not hold the rows left after deletes", table=_name(table))
    except BaseException:
        delete_quietly(table.io, [f.file_path for f in new])
        raise
    try:
        producer, result.attempts = _commit_replace(table, old, new, spec_id, attempts, planned)
    except MaintenanceError:  # the commit did not land, so the new files are referenced by nothing
        delete_quietly(table.io, [f.file_path for f in new])
        raise
    result.snapshot_id = producer.snapshot_id
    result.removed_delete_files = sorted({f.file_path for f in producer._removed_delete_files})
    result.files_removed, result.files_added = len(old), len(new)
    result.bytes_removed = sum(f.file_size_in_bytes for f in old)
    result.bytes_added = sum(f.file_size_in_bytes for f in new)
    result.rows = sum(f.record_count for f in new)
    result.rows_deleted = sum(g.deleted_rows for g in groups)
    result.seconds = time.perf_counter() - started
    return result


def _obsolete_deletes(table, files: SnapshotFiles, rewritten: set[str]) -> list[DataFile]:
    """Position-delete files naming only data files being rewritten (or no longer live)."""
    return [d.delete_file for d in live_delete_files(table, files)
            if any(p in rewritten for p in d.referenced)
            and all(p in rewritten or p not in files.data for p in d.referenced)]


def _check_unchanged(table, old: list[DataFile], planned: dict[str, frozenset]) -> SnapshotFiles:
    """The planned files are still live, with the same position deletes as when they were read."""
    try:
        files = snapshot_files(table)
    except RowLevelError as exc:
        raise CompactionConflict(f"the table changed during compaction: {exc.message}", table=_name(table)) from None
    if any(f.file_path not in files.data for f in old):
        raise CompactionConflict("replaced files are no longer live", table=_name(table))
    for f in old:
        if {d.file_path for d in files.delete_files_for(f.file_path)} != planned.get(f.file_path, frozenset()):
            # rows deleted meanwhile would come back in the rewritten file
            raise CompactionConflict("rows of a compacted file were deleted during compaction", table=_name(table),
                                     file=f.file_path)
    return files


def _commit_replace(table, old: list[DataFile], new: list[DataFile], spec_id: int, attempts: int,
                    planned: dict[str, frozenset]) -> tuple[_ReplaceFiles, int]:
    """Commit old -> new; on a conflict refresh and retry, re-checking that every old file is still live
    and has the position deletes it was read with; delete files left naming only old files go too."""
    rewritten = {f.file_path for f in old}
    for attempt in range(attempts):
        if attempt:
            table.refresh()
        if table.metadata.default_spec_id != spec_id:
            raise CompactionConflict("the partition spec changed during compaction", table=_name(table))
        tx, producer, staged = StagedTransaction(table), None, False
        try:
            files = _check_unchanged(table, old, planned)
            producer = _ReplaceFiles(operation=Operation.OVERWRITE, transaction=tx, io=table.io,
                                     snapshot_properties=dict(COMPACTION_SUMMARY))
            for f in old:
                producer.delete_data_file(f)
            for f in new:
                producer.append_data_file(f)
            for d in _obsolete_deletes(table, files, rewritten):
                producer.remove_delete_file(d)
            producer.commit()
            staged = True
            tx.commit_transaction()
        except ValidationException as exc:
            raise CompactionConflict(f"replaced files are no longer live: {exc}", table=_name(table)) from None
        except CommitFailedException as exc:
            log.info("compaction of %s conflicted (attempt %d): %s", _name(table), attempt + 1, exc)
            backoff(attempt, base=0.05, cap=2.0)
            continue
        except FileNotFoundError as exc:
            if staged:  # raised by the commit itself: its outcome is not known
                raise
            # the job's commits expired the snapshot just read and deleted its manifests: read it again
            log.info("compaction of %s read a snapshot expired meanwhile (attempt %d): %s", _name(table),
                     attempt + 1, exc)
            if producer is not None:
                producer._clean_all_uncommitted()
            continue
        table.refresh()
        drop_unlisted_manifests(table, [producer])  # rewritten without the replaced files, then merged
        return producer, attempt + 1
    raise CompactionConflict("the commit kept conflicting", table=_name(table), attempts=attempts)


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)


