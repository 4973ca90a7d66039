"""Small data files merged inline, in the snapshot that appends a batch to the table.

At a trigger of seconds every commit adds a small data file to each table it
writes; a reader opens them all. The driver's compaction (router/maintenance)
fixes that with a scan and a commit of its own per table, which races the
tasks' appends and costs far more CPU than the appends themselves at hundreds
of tables. Here the committer of the batch does it: once the table's current
snapshot holds `merge_small_files_at` data files (its summary's
total-data-files tells; while a table is young the count is lowered by up to
half by a hash of its name, so that tables created together do not all merge
in one batch, then or later), files of one
partition are streamed a batch at a time (projected to the current schema:
older files may lack newer columns) into one file, and the batch's snapshot
adds the batch's files and the merged file and removes the files merged: one
snapshot, one compare-and-swap, the batch's offsets in its summary as in every
commit. Memory holds a batch and a row group, not the sources
(`_write_merged`; benchmarks/merge_memory.json). Which files, and when: router/catalog/merge_policy.py.

On a v3 table the merged rows keep their row lineage (router/catalog/lineage.py):
their ``_row_id`` and ``_last_updated_sequence_number`` are written into the merged file.

Tables with delete files (upserts, change streams) are left to compaction: the
rows of a file would need their deletes applied. So are files of an older
partition spec or another format.

A commit that loses its compare-and-swap is staged again by its caller
(catalog/commit.py): the merged file is reused when every file it merged is
still live in the refreshed table, else it is deleted and the batch's files are
appended alone (never the same rows twice: the merged file only ever enters a
snapshot that removes all its sources, which `FileChanges` checks are live).
A merged file that was not committed is deleted once the table's commit is
decided; one whose commit's outcome is unknown is left to orphan removal.
"""

from __future__ import annotations

import logging
import threading

import pyarrow as pa
import pyarrow.parquet as pq
from cachetools import LRUCache
from pyiceberg.exceptions import ValidationException
from pyiceberg.io.pyarrow import _to_requested_schema, pyarrow_to_schema
from pyiceberg.manifest import DataFile, FileFormat, ManifestContent, ManifestEntry
from pyiceberg.schema import Schema
from pyiceberg.table.snapshots import Operation

from router.catalog.format_v3 import first_row_id
from router.catalog.lineage import lineage_of, stored_lineage_columns, tracks_lineage, with_lineage
from router.catalog.merge_policy import (choose, look_due, merge_budget, merge_candidate_limit, merge_threshold,
                                         min_merge, threshold)
from router.catalog.rolling import RollingWriter
from router.catalog.row_delta import FileChanges
from router.catalog.tables import delete_quietly
from router.config.model import TRANSIENT_FILE_CODECS

log = logging.getLogger("icerouter.catalog")

SKIPS_KEPT = 4096  # tables whose last look found nothing due, per process
BUFFER_BYTES = 8 * 1024 * 1024  # Arrow bytes of the merged file's row group held before it is written
BATCH_BYTES = 4 * 1024 * 1024  # about this many Arrow bytes of a source read at a time ...
MIN_BATCH_ROWS, MAX_BATCH_ROWS = 1024, 65536  # ... within these rows
NEVER_ROLL = 1 << 62  # the merged file's target size: one file, the budget bounds it

#: table uuid -> (total-data-files, candidates) of the last look at its manifests that found no merge
#: due: the next look waits until enough files were added for one to be (SmallFileMerge._due)
_skips: LRUCache = LRUCache(maxsize=SKIPS_KEPT)
_skips_lock = threading.Lock()

class _MergeAppend(FileChanges):
    """The batch's files added and the merged file swapped for its sources, in one snapshot."""

    entries: dict[str, list[ManifestEntry]] = {}  # manifest path -> live entries, read when planning

    def _manifest_entries(self, manifest) -> list[ManifestEntry]:
        found = self.entries.get(manifest.manifest_path)
        return found if found is not None else super()._manifest_entries(manifest)

    def _validate_concurrency(self) -> None:
        """pyiceberg's own retry would re-apply the batch on a newer snapshot without the offset check:
        refuse; the caller refreshes, re-checks the offsets and stages again."""
        window = self._commit_window
        if window is not None and not window.is_empty():
            raise ValidationException("the table changed since the merge was staged; stage it again")


class SmallFileMerge:
    """One table's merge over the attempts of one commit (see the module docstring)."""

    def __init__(self, at: int, target_file_size_bytes: int, young_at: int | None = None) -> None:
        self.at = at
        self.young_at = at if young_at is None else young_at  # the threshold while the table is young
        self.min_files = min_merge(at)
        self.budget = merge_budget(target_file_size_bytes)
        self.small = merge_candidate_limit(target_file_size_bytes)
        self.sources: tuple[DataFile, ...] = ()
        self.written: list[DataFile] = []
        self.staged = False  # the last staged attempt carries the merge
        self.given_up = False  # a lost swap removed a source: the batch goes alone from then on
        self.io = None
        self.entries: dict[str, list[ManifestEntry]] = {}  # manifests never change: read once a commit

    @property
    def merged_files(self) -> int:
        return len(self.sources) if self.staged else 0

    def stage(self, tx, table, data_files: list[DataFile], summary: dict[str, str]) -> bool:
        """Stage the batch's append with a merge in `tx` when one is due; False leaves the append to the
        caller (nothing due, or the merge gave up). A merge that fails (a source unreadable) gives up:
        it never keeps the batch from committing."""
        self.staged = False
        if self.given_up or not data_files or not self._due(tx.table_metadata):
            return False
        try:
            return self._stage(tx, table, data_files, summary)
        except Exception as exc:  # noqa: BLE001 - merging is an optimisation; the append goes alone
            log.warning("small-file merge of %s given up: %s: %s", ".".join(table.name()), type(exc).__name__, exc)
            self.discard()
            self.given_up = True
            return False

    def _stage(self, tx, table, data_files: list[DataFile], summary: dict[str, str]) -> bool:
        live = self._live(table, tx.table_metadata)
        if live is None:
            return False
        if self.written and not all(f.file_path in live for f in self.sources):
            self.discard()  # another committer moved a source: the batch's rows go alone
            self.given_up = True
            return False
        if not self.written:
            self.sources, candidates = self._pick(tx.table_metadata, live)
            uuid = tx.table_metadata.table_uuid
            if not self.sources:  # no run of min_files files
                with _skips_lock:
                    _skips[uuid] = (_totals(tx.table_metadata)[0], candidates)
                return False
            with _skips_lock:
                _skips.pop(uuid, None)
            self.io = table.io
            self.written = _write_merged(table, self.sources)
        producer = _MergeAppend(tx, Operation.OVERWRITE, snapshot_properties=summary)
        producer.entries = self.entries
        for f in [*data_files, *self.written]:
            producer.append_data_file(f)
        for f in self.sources:
            producer.delete_data_file(f)
        producer.commit()
        self.staged = True
        return True

    def finish(self, committed: bool) -> None:
        """The table's commit is decided: a merged file its committed snapshot does not hold goes.
        Not committed (failed, skipped): its outcome may be unknown, so the file stays for orphan removal."""
        if committed and not self.staged:
            self.discard()

    def discard(self) -> None:
        if self.written and self.io is not None:
            delete_quietly(self.io, [f.file_path for f in self.written])
        self.written, self.sources, self.staged = [], (), False

    def _due(self, metadata) -> bool:
        """The summary holds `at` data files and no delete files, and `look_due`: no manifests are read
        for a table whose last look found too few candidates until enough files were added. Guessing
        wrong costs one read of the manifests for nothing, or a merge a few commits late."""
        total, deletes = _totals(metadata)
        if total < threshold(self.at, self.young_at, getattr(metadata, "last_sequence_number", 0)) or deletes:
            return False
        with _skips_lock:
            skip = _skips.get(metadata.table_uuid)
        return look_due(total, skip, self.min_files)

    def _live(self, table, metadata) -> dict[str, tuple[DataFile, int]] | None:
        """path -> (data file, data sequence number) of the snapshot's live files; None when it has
        delete files. Each manifest is read once per commit, and its entries are handed to the snapshot
        producer, which reads the same manifests to rewrite them without the merged files."""
        snapshot, io = metadata.current_snapshot(), table.io
        manifests = snapshot.manifests(io)
        if any(m.content != ManifestContent.DATA for m in manifests):
            return None
        live = {}
        for m in manifests:
            if not (m.has_added_files() or m.has_existing_files()):
                continue
            entries = self.entries.get(m.manifest_path)
            if entries is None:
                entries = self.entries[m.manifest_path] = m.fetch_manifest_entry(io, discard_deleted=True)
            for e in entries:
                live[e.data_file.file_path] = (e.data_file, e.sequence_number or 0)
        return live

    def _pick(self, metadata, live: dict[str, tuple[DataFile, int]]) -> tuple[tuple[DataFile, ...], int]:
        """The files `choose` takes from the partition with the most candidates, and how many
        candidates it has: Parquet files of the current spec under `small` bytes."""
        spec_id = metadata.default_spec_id
        groups: dict = {}
        for f, seq in live.values():
            if f.file_size_in_bytes < self.small and f.spec_id == spec_id and f.file_format == FileFormat.PARQUET:
                groups.setdefault(f.partition, {})[f.file_path] = (f, seq)
        if not groups:
            return (), 0
        group = max(groups.values(), key=len)
        picked = choose(((f.file_size_in_bytes, seq, path) for path, (f, seq) in group.items()), self.min_files,
                        max_bytes=self.budget)
        return tuple(group[path][0] for _, _, path in picked), len(group)


def _totals(metadata) -> tuple[int, int]:
    """(total-data-files, total-delete-files) of the current snapshot's summary; (0, 0) without one."""
    snapshot = metadata.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None
    if summary is None:
        return 0, 0
    get = summary.additional_properties.get
    return int(get("total-data-files") or 0), int(get("total-delete-files") or 0)


def _write_merged(table, files) -> list[DataFile]:
    """The files' rows, projected to the table's current schema by field id (older files may lack
    newer columns, or hold a narrower type), streamed into one data file, not yet committed.

    Memory holds a batch of one source and a row group of the output (BUFFER_BYTES), never the
    sources at once: read whole, a merge of compressed Parquet took several times its bytes on disk.
    The sources are of one partition and never rolled over: one file, with the statistics
    `write_data_files` gives. A failure deletes what was written; a row count that differs from the
    sources' is a failure.
    """
    schema, metadata = table.schema(), table.metadata
    projections: dict[pa.Schema, Schema] = {}
    unchanged: dict[pa.Schema, bool] = {}  # file schema -> its batches already are the table's rows as they are
    per_row = 0.0  # the most Arrow bytes per row a batch read so far took
    writer = RollingWriter(table, NEVER_ROLL, buffer_bytes=BUFFER_BYTES)
    sequences = _sequences(table, files) if tracks_lineage(metadata) else None
    try:
        for f in files:
            with table.io.new_input(f.file_path).open() as stream:
                parquet = pq.ParquetFile(stream)
                arrow = parquet.schema_arrow
                if sequences is not None:
                    _merge_lineage(writer, f, parquet, schema, metadata, sequences[f.file_path])
                    continue
                file_schema = projections.get(arrow)
                if file_schema is None:
                    file_schema = projections[arrow] = pyarrow_to_schema(
                        arrow, metadata.name_mapping(), downcast_ns_timestamp_to_us=True,
                        format_version=metadata.format_version)
                rows = _batch_rows(per_row or _encoded_per_row(parquet.metadata))
                for batch in parquet.iter_batches(batch_size=rows, use_threads=False):
                    per_row = max(per_row, batch.nbytes / max(1, batch.num_rows))
                    if unchanged.get(arrow):
                        writer.write(batch)
                        continue
                    projected = _to_requested_schema(schema, file_schema, batch, downcast_ns_timestamp_to_us=True)
                    # a projection that changes no name, type, order or column (the same writer schema as the
                    # table's) is skipped for the file's other batches and files: ~0.5 ms a small file (a merge
                    # of 16 files of 100 rows, 16 columns: 44 -> 37 ms, benchmarks/task_merge_projection.json)
                    unchanged[arrow] = projected.schema.equals(batch.schema)
                    writer.write(projected)
        written = writer.close()
        expected = sum(f.record_count for f in files)
        if writer.rows != expected or sum(f.record_count for f in written) != expected:
            raise ValueError(f"merged {writer.rows} rows from sources holding {expected}")
    except BaseException:
        delete_quietly(table.io, writer.abort())
        raise
    finally:
        _release_memory()
    return written


def _sequences(table, files) -> dict[str, int]:
    """data file path -> data sequence number of the sources, from the snapshot the merge builds on."""
    from router.catalog.snapshot_files import snapshot_files

    live = snapshot_files(table).sequence
    missing = [f.file_path for f in files if f.file_path not in live]
    if missing:
        raise ValueError(f"a source of the merge is not live: {missing[0]}")
    return {f.file_path: live[f.file_path] for f in files}


def _merge_lineage(writer: RollingWriter, f: DataFile, parquet, schema: Schema, metadata, sequence: int) -> None:
    """One source of a v3 table's merge: its rows projected to the current schema, each with its row
    lineage (stored, else inherited from the source file)."""
    stored = stored_lineage_columns(parquet.schema_arrow)
    file_schema = pyarrow_to_schema(parquet.schema_arrow, metadata.name_mapping(), downcast_ns_timestamp_to_us=True,
                                    format_version=metadata.format_version)
    start = 0
    for batch in parquet.iter_batches(batch_size=_batch_rows(_encoded_per_row(parquet.metadata)), use_threads=False):
        row_ids, sequences = lineage_of(batch, start, first_row_id(f), sequence, stored)
        start += batch.num_rows
        projected = _to_requested_schema(schema, file_schema, batch, downcast_ns_timestamp_to_us=True)
        writer.write(with_lineage(projected, row_ids, sequences))


def _batch_rows(per_row: float) -> int:
    """Rows per batch read: about BATCH_BYTES at `per_row` bytes a row, within the row limits."""
    return int(max(MIN_BATCH_ROWS, min(MAX_BATCH_ROWS, BATCH_BYTES // max(per_row, 1.0))))


def _encoded_per_row(parquet_metadata) -> float:
    """The first file's guess at Arrow bytes per row, before a batch told: its uncompressed size per
    row (less than Arrow's where dictionaries decode; later files go by the batches read)."""
    groups = [parquet_metadata.row_group(i) for i in range(parquet_metadata.num_row_groups)]
    return sum(g.total_byte_size for g in groups) / max(1, sum(g.num_rows for g in groups))


def _release_memory() -> None:
    """Hand the pool's freed pages back to the system: a worker merges now and then, and mimalloc
    (pyarrow's pool on Linux) otherwise keeps them (~60 MiB after a 30 MiB merge, ~10 MiB released,
    for ~1 ms: benchmarks/merge_memory.json)."""
    pa.default_memory_pool().release_unused()


def transient_codec(maintenance) -> str | None:
    """The codec of an append's small files while they are merged inline (they are rewritten with the
    table's codec within a few commits), or None: the table's."""
    if maintenance is None or not getattr(maintenance, "merge_small_files_at", 0):
        return None
    return TRANSIENT_FILE_CODECS[maintenance.transient_file_codec]


def merge_for(result, maintenance) -> SmallFileMerge | None:
    """The merge of an append result's commit, or None (off, an upsert, nothing written)."""
    at = getattr(maintenance, "merge_small_files_at", 0) if maintenance is not None else 0
    if not at or result.upsert is not None or result.later or not result.data_files:
        return None
    return SmallFileMerge(at, maintenance.target_file_size_bytes, young_at=merge_threshold(result.table, at))
