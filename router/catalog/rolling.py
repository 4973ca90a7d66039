"""Rolling data-file writer for rewrites: compaction and small-file merges.

Why apart from router/catalog/datafiles.py: a rewrite streams many files' rows and
must not hold them at once, where an append writes one batch it already holds. Both
share datafiles' per-table plan (field ids, statistics, partition values, naming,
codec), so a rewritten file is described exactly as an appended one.

A sorted table (its default sort order is not unsorted) changes how rows are held:
a file must be sorted as a whole to carry the table's ``sort_order_id``, so each
partition's rows are buffered up to a whole file (``target_file_size`` bytes of
Arrow), sorted and written as one file, instead of going out a row group at a time.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionKey

from router.catalog.datafiles import (
    _data_file, _new_path, _parquet_writer, _plan_for, _projection, _split_partitions, _to_file_table, close_writer,
    open_stream,
)
from router.catalog.format_v3 import ROW_ID
from router.catalog.lineage import LINEAGE_STAT_COLUMNS, attach_lineage, split_lineage
from router.catalog.sorting import sort_rows

__all__ = ["RollingWriter", "ROW_GROUP_BUFFER_BYTES"]


#: In-memory Arrow bytes buffered per partition before they go out as one row group.
ROW_GROUP_BUFFER_BYTES = 64 * 1024 * 1024


@dataclass
class _Buffer:
    key: PartitionKey | None
    tables: list[pa.Table] = field(default_factory=list)
    nbytes: int = 0


@dataclass
class _OpenFile:
    path: str
    key: PartitionKey | None
    stream: Any
    writer: pq.ParquetWriter


class RollingWriter:
    """Streams record batches into data files that roll over at ``target_file_size`` bytes on disk.

    For rewrites of many files (compaction): memory holds at most one row group
    per partition, never the whole output. Sizes are real on-disk bytes (the
    spec's meaning of ``write.target-file-size-bytes``), where the one-shot
    writer above, like pyiceberg, sizes by in-memory Arrow bytes. Same field
    ids, statistics, partition values and file naming as ``write_data_files``. Files of a
    sorted table are sorted whole (see the module docstring). Batches of a v3 rewrite may end
    with the row lineage columns (router/catalog/lineage.py), written with their reserved field ids.
    """

    def __init__(self, table: Any, target_file_size: int | None = None,
                 buffer_bytes: int = ROW_GROUP_BUFFER_BYTES) -> None:
        self._io: FileIO = table.io
        self._plan = _plan_for(table.metadata)
        self.target_file_size = target_file_size or self._plan.target_file_size
        self.buffer_bytes = buffer_bytes
        self._uuid, self._counter = uuid.uuid4(), itertools.count(0)
        self._buffers: dict[str, _Buffer] = {}
        self._open: dict[str, _OpenFile] = {}
        self.files: list[DataFile] = []
        self.paths: list[str] = []  # every file started, described or not
        self.rows = 0
        self.sorted = not self._plan.sort_order.is_unsorted

    def write(self, batch: pa.RecordBatch | pa.Table) -> None:
        data = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
        if data.num_rows == 0:
            return
        self.rows += data.num_rows
        parts = [(None, data)] if self._plan.spec.is_unpartitioned() else _split_partitions(self._plan, data)
        for key, rows in parts:
            slot = key.to_path() if key is not None else ""
            buffered = self._buffers.get(slot)
            if buffered is not None and not buffered.tables[0].schema.equals(rows.schema):
                self._flush(slot)  # files of older schemas may come back with other Arrow types
                buffered = None
            if buffered is None:
                buffered = self._buffers[slot] = _Buffer(key)
            buffered.tables.append(rows)
            buffered.nbytes += rows.nbytes
            if buffered.nbytes >= (self.target_file_size if self.sorted else self.buffer_bytes):
                self._flush(slot)

    def close(self) -> list[DataFile]:
        """Write what is buffered, close every file; the DataFiles written, not yet committed."""
        for slot in list(self._buffers):
            self._flush(slot)
        for slot in list(self._open):
            self._finish(slot)
        return self.files

    def abort(self) -> list[str]:
        """Close whatever is open without describing it; every path written (for the caller to delete)."""
        for out in self._open.values():
            for closing in (out.writer.close, out.stream.close):
                try:
                    closing()
                except Exception:  # the file is deleted by the caller either way
                    pass
        self._open.clear()
        self._buffers.clear()
        return list(self.paths)

    def _flush(self, slot: str) -> None:
        buffered = self._buffers.pop(slot)
        key, rows = buffered.key, pa.concat_tables(buffered.tables)
        if self.sorted:  # the buffer is a whole file: sorted, written and closed
            rows = sort_rows(rows, self._plan.table_schema, self._plan.sort_order)
        rows, lineage = split_lineage(rows)  # a v3 rewrite's rows carry their lineage (catalog/lineage.py)
        proj = _projection(self._plan, rows.schema)
        data = _to_file_table(self._plan, proj, rows.to_batches(), rows.schema)
        if lineage is not None:
            data = attach_lineage(data, lineage)
        out = self._open.get(slot) or self._start(slot, key, data.schema)
        if not data.schema.equals(out.writer.schema):  # e.g. string in older files, large_string in newer
            data = data.cast(out.writer.schema)
        out.writer.write_table(data, row_group_size=self._plan.row_group_size)
        if self.sorted or out.stream.tell() >= self.target_file_size:
            self._finish(slot)

    def _start(self, slot: str, key: PartitionKey | None, schema: pa.Schema) -> _OpenFile:
        path = _new_path(self._plan, self._uuid, next(self._counter), key)
        stream = open_stream(self._plan, self._io, path)
        self.paths.append(path)
        out = self._open[slot] = _OpenFile(path, key, stream, _parquet_writer(self._plan, stream, schema))
        return out

    def _finish(self, slot: str) -> None:
        out = self._open.pop(slot)
        try:
            size = close_writer(out.writer, out.stream)
        finally:
            out.stream.close()
        lineage = ROW_ID in out.writer.schema.names
        self.files.append(_data_file(self._plan, out.path, size, out.writer.writer.metadata, out.key,
                                     {**self._plan.stat_columns, **LINEAGE_STAT_COLUMNS} if lineage else None))
