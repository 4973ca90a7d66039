"""Position-delete files: which rows of which data files are gone, written the way readers expect.

Upserts and change streams replace rows by deleting their old images by
position (file path + row number) and appending the new ones; never by
equality deletes, which pyiceberg cannot read and which make every later read
slow. A delete file here follows the spec and what Java Iceberg writes:
columns ``file_path`` (field id 2147483546) and ``pos`` (2147483545), rows
sorted by path then position, the partition and spec id of the data files it
references (one file per partition), and full (untruncated) lower/upper bounds
of ``file_path``, so a reader matches it to the few data files it names
without opening it (pyiceberg indexes a file whose bounds are equal by path).

The files are written through the table's FileIO, location provider and
Parquet settings; committing them is the row delta's job (catalog/row_delta.py).
pyiceberg 0.12 private name used: ``pyiceberg.io.pyarrow._get_parquet_writer_kwargs``
(the table's codec, page and dictionary settings).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Iterable, Mapping, Union

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import to_bytes
from pyiceberg.io.pyarrow import _get_parquet_writer_kwargs
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record
from pyiceberg.types import LongType

from router.catalog.snapshot_files import (
    FILE_PATH_ID, POS_ID, SnapshotFiles, remember_positions, snapshot_files, split_by_path,
)
from router.catalog.tables import delete_quietly
from router.exceptions import RowLevelError

#: Arrow schema of a position-delete file (required columns with their reserved field ids).
DELETE_FILE_SCHEMA = pa.schema([
    pa.field("file_path", pa.string(), nullable=False, metadata={b"PARQUET:field_id": str(FILE_PATH_ID).encode()}),
    pa.field("pos", pa.int64(), nullable=False, metadata={b"PARQUET:field_id": str(POS_ID).encode()}),
])

Positions = Union[Mapping[str, "np.ndarray | pa.Array | list[int]"], pa.Table]


def require_v2(table) -> None:
    """Position-delete files need table format v2 (v1 has none; v3 replaces them with deletion vectors)."""
    version = int(table.metadata.format_version)
    if version != 2:
        raise RowLevelError(f"position-delete files need an Iceberg format v2 table; this one is v{version}"
                            + (" (it takes deletion vectors)" if version >= 3 else ""), table=_name(table))


def require_row_level(table) -> None:
    """Row-level deletes need table format v2 (position-delete files) or v3 (deletion vectors)."""
    version = int(table.metadata.format_version)
    if version not in (2, 3):
        raise RowLevelError(f"row-level deletes need an Iceberg format v2 or v3 table; this one is v{version}",
                            table=_name(table))


def _normalise(positions: Positions) -> dict[str, np.ndarray]:
    """path -> sorted unique int64 positions, from a mapping or an Arrow table (file_path, pos)."""
    if isinstance(positions, pa.Table):
        if positions.num_rows == 0:
            return {}
        return split_by_path(positions.column("file_path"), positions.column("pos"))
    out = {}
    for path, pos in positions.items():
        array = np.asarray(pos.to_numpy(zero_copy_only=False) if isinstance(pos, (pa.Array, pa.ChunkedArray))
                           else pos, dtype=np.int64)
        if len(array):
            out[path] = np.unique(array)  # sorted, and a row deleted twice is named once
    return out


@dataclass(frozen=True)
class _PartitionPath:
    """What a location provider asks of a partition key (its path), for a partition value already known."""

    partition: Record
    partition_spec: PartitionSpec
    schema: Schema

    def to_path(self) -> str:
        return self.partition_spec.partition_to_path(self.partition, self.schema)


def write_position_deletes(table, positions: Positions, files: SnapshotFiles | None = None,
                           new_data_files: Iterable[DataFile] = ()) -> list[DataFile]:
    """Write Parquet position-delete files for `positions` (not committed); one file per partition.

    `positions` maps live data file path -> row positions (any order, int64), or is
    an Arrow table with columns file_path and pos. Every path must be a live data
    file of the table's current snapshot (or of `files`, the snapshot the positions
    were located in), or one of `new_data_files`, written to be committed in the same
    row delta. Returns DataFiles with content POSITION_DELETES, the spec id and
    partition of the files they reference, counts, size and bounds.
    """
    require_v2(table)
    wanted = _normalise(positions)
    if not wanted:
        return []
    files = files or snapshot_files(table)
    new = {f.file_path: f for f in new_data_files}
    default_spec = table.metadata.default_spec_id
    groups: dict[tuple[int, Record], list[str]] = {}
    for path in wanted:
        data_file = files.data.get(path) or new.get(path)
        if data_file is None:
            raise RowLevelError("position deletes name a file that is not a live data file of the snapshot",
                                table=_name(table), path=path, snapshot_id=files.snapshot_id)
        groups.setdefault((_spec_id(data_file, default_spec), data_file.partition), []).append(path)
    metadata = table.metadata
    specs, schema = metadata.specs(), metadata.schema()
    provider = table.location_provider()
    writer_kwargs = _get_parquet_writer_kwargs(metadata.properties)
    write_id = uuid.uuid4()
    written: list[DataFile] = []
    try:
        for index, ((spec_id, partition), paths) in enumerate(sorted(groups.items(), key=lambda g: min(g[1]))):
            paths.sort()  # the spec wants rows sorted by file_path, then pos
            spec = specs[spec_id]
            key = _PartitionPath(partition, spec, schema) if spec.fields else None
            location = provider.new_data_location(f"00000-{index}-{write_id}-deletes.parquet", key)
            written.append(_write_one(table.io, location, {p: wanted[p] for p in paths}, spec_id, partition,
                                      writer_kwargs))
    except BaseException:
        delete_quietly(table.io, [f.file_path for f in written])
        raise
    return written


def _write_one(io, location: str, positions: dict[str, np.ndarray], spec_id: int, partition: Record,
               writer_kwargs: dict) -> DataFile:
    paths = list(positions)
    counts = np.fromiter((len(positions[p]) for p in paths), dtype=np.int64, count=len(paths))
    pos = np.concatenate([positions[p] for p in paths])
    codes = np.repeat(np.arange(len(paths), dtype=np.int32), counts)
    path_column = pa.DictionaryArray.from_arrays(pa.array(codes), pa.array(paths, pa.string())).cast(pa.string())
    data = pa.Table.from_arrays([path_column, pa.array(pos, pa.int64())], schema=DELETE_FILE_SCHEMA)
    stream = io.new_output(location).create(overwrite=True)
    try:
        writer = pq.ParquetWriter(stream, schema=DELETE_FILE_SCHEMA, **writer_kwargs)
        writer.write_table(data)
        writer.close()
        size = stream.tell()
    except BaseException:
        stream.close()
        delete_quietly(io, [location])
        raise
    stream.close()
    meta = writer.writer.metadata
    column_sizes = {FILE_PATH_ID: 0, POS_ID: 0}
    split_offsets = []
    for g in range(meta.num_row_groups):
        row_group = meta.row_group(g)
        split_offsets.append(row_group.column(0).file_offset if row_group.column(0).dictionary_page_offset is None
                             else row_group.column(0).dictionary_page_offset)
        column_sizes[FILE_PATH_ID] += row_group.column(0).total_compressed_size
        column_sizes[POS_ID] += row_group.column(1).total_compressed_size
    remember_positions((location, None), positions)
    rows = int(len(pos))
    delete_file = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES,
        file_path=location,
        file_format=FileFormat.PARQUET,
        partition=partition,
        record_count=rows,
        file_size_in_bytes=size,
        column_sizes=column_sizes,
        value_counts={FILE_PATH_ID: rows, POS_ID: rows},
        null_value_counts={FILE_PATH_ID: 0, POS_ID: 0},
        nan_value_counts={},
        # full paths, never truncated: readers match delete files to data files by these bounds
        lower_bounds={FILE_PATH_ID: paths[0].encode(), POS_ID: to_bytes(LongType(), int(pos.min()))},
        upper_bounds={FILE_PATH_ID: paths[-1].encode(), POS_ID: to_bytes(LongType(), int(pos.max()))},
        key_metadata=None,
        split_offsets=sorted(split_offsets),
        equality_ids=None,
        sort_order_id=None,
    )
    delete_file.spec_id = spec_id  # not a field: from_args would drop it
    return delete_file


def _spec_id(f: DataFile, default: int) -> int:
    """A file read from a manifest knows its spec; one just written is in the default spec."""
    try:
        return f.spec_id
    except AttributeError:
        return default


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)
