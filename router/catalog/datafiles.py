"""Lean data-file writer: pyiceberg's data-file contract without its per-call setup.

``write_data_files(table, data)`` returns what
``list(pyiceberg.io.pyarrow._dataframe_to_data_files(table.metadata, data, table.io))``
returns, rows sorted by the table's sort order (router/catalog/sorting.py): Parquet
files with Iceberg field ids, the table's metrics modes and truncation, partition
values, the table's location provider and file naming,
codec, row-group and target-file-size properties. ``router.catalog.rolling.RollingWriter``
streams batches into files the same way, for rewrites (compaction, merges) whose input
must not be held in memory at once.

Why: at hundreds of tables most of pyiceberg's time per file goes to work that
depends only on the table's schema, spec and properties, redone on every call
(Arrow <-> Iceberg schema conversions, name sanitising, the statistics plan,
the Parquet path -> field id map, reading the pyiceberg config, loading the
location provider, a thread-pool hand-off per file). Here that work is done
once per (table, schema id, spec id, ``write.*`` properties) and kept in a
bounded LRU cache; the Parquet file is written with pyarrow directly and
described with pyiceberg's statistics plan (router/catalog/file_stats.py).

pyiceberg is pinned to 0.12. This module uses these private names of
``pyiceberg.io.pyarrow``: ``_to_requested_schema`` (projection onto the file
schema, run once per input Arrow schema), ``_get_field_from_arrow_table``
(partition source columns, nested ones too), ``_get_parquet_writer_kwargs`` (codec, page and dictionary sizes) and
``_dataframe_to_data_files`` (the fallback for formats other than Parquet).
A pyiceberg upgrade must re-run tests/router/catalog/test_datafiles.py, which compares
every field of the DataFiles written here with those pyiceberg writes.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any, Hashable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from cachetools import LRUCache
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    ParquetFormatModel,
    _dataframe_to_data_files,
    _get_field_from_arrow_table,
    _get_parquet_writer_kwargs,
    _to_requested_schema,
    bin_pack_arrow_table,
    compute_statistics_plan,
    parquet_path_to_id_mapping,
    pyarrow_to_schema,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema, sanitize_column_names
from pyiceberg.table import DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE, TableProperties
from pyiceberg.table.locations import LocationProvider, load_location_provider
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.typedef import Record
from pyiceberg.utils.config import Config
from pyiceberg.utils.properties import property_as_int

from evolution.variant_type import is_variant
from router.catalog.file_stats import StatColumn, file_statistics, stat_columns
from router.catalog.parquet_footer import AnnotatingStream
from router.catalog.sorting import sort_rows

__all__ = ["write_data_files", "clear_cache", "TRANSIENT_MAX_BYTES"]

# One entry per live (table, schema, spec, write.* properties): a few hundred tables per
# worker fit; an evolved table simply gets a new entry.
PLAN_CACHE_SIZE = 1024
# Distinct input Arrow schemas seen for one plan (normally one).
PROJECTION_CACHE_SIZE = 16
# A write under this many Arrow bytes may take the caller's `transient_codec` (a file that small-file
# merging rewrites soon); above it a codec's fixed cost per page is small against its work anyway.
TRANSIENT_MAX_BYTES = 1 << 20

_FORMAT = ParquetFormatModel()
_lock = threading.Lock()
_plans: LRUCache = LRUCache(maxsize=PLAN_CACHE_SIZE)


@dataclass(frozen=True)
class _Projection:
    """How an input Arrow schema becomes the file's Arrow schema (with field ids)."""

    file_arrow_schema: pa.Schema
    task_schema: Schema
    zero_copy: bool  # same columns, order and types: only the field metadata changes


@dataclass
class _Plan:
    """Everything about writing a table's files that does not depend on the rows."""

    table_schema: Schema
    file_schema: Schema
    spec: PartitionSpec
    spec_id: int
    sort_order: SortOrder
    sort_order_id: int | None  # what the files claim: the table's order, None while it is unsorted
    format_version: int
    location_provider: LocationProvider
    stat_columns: dict[str, StatColumn]  # pyiceberg's statistics plan per Parquet column path
    writer_kwargs: dict[str, Any]
    row_group_size: int | None
    target_file_size: int
    downcast_ns: bool
    variant_ids: frozenset = frozenset()  # field ids of variant columns: their groups are annotated (parquet_footer.py)
    projections: LRUCache = field(default_factory=lambda: LRUCache(maxsize=PROJECTION_CACHE_SIZE))


def clear_cache() -> None:
    """Forget every cached plan (tests; a long-lived worker never needs it)."""
    with _lock:
        _plans.clear()


def _writer_properties(metadata: TableMetadata) -> dict[str, str]:
    """The properties a write reads: ``write.*``.

    Not all of them: the job stores its offsets in a table property on every
    commit, which must not turn every batch into a cache miss. A custom
    location provider may read anything, so it gets (and is keyed on) all.
    """
    props = metadata.properties
    if TableProperties.WRITE_PY_LOCATION_PROVIDER_IMPL in props:
        return dict(props)
    return {k: v for k, v in props.items() if k.startswith("write.")}


def _plan_key(metadata: TableMetadata, props: dict[str, str]) -> Hashable:
    return (str(metadata.table_uuid), metadata.current_schema_id, metadata.default_spec_id,
            metadata.default_sort_order_id, metadata.location, int(metadata.format_version),
            tuple(sorted(props.items())))


def _build_plan(metadata: TableMetadata, props: dict[str, str]) -> _Plan:
    """The per-table work pyiceberg repeats on every call, done once."""
    table_schema = metadata.schema()
    sanitized = sanitize_column_names(table_schema)
    file_schema = sanitized if sanitized != table_schema else table_schema
    return _Plan(
        table_schema=table_schema,
        file_schema=file_schema,
        spec=metadata.spec(),
        spec_id=metadata.default_spec_id,
        sort_order=metadata.sort_order(),
        sort_order_id=None if metadata.sort_order().is_unsorted else metadata.default_sort_order_id,
        format_version=metadata.format_version,
        location_provider=load_location_provider(table_location=metadata.location, table_properties=props),
        stat_columns=stat_columns(compute_statistics_plan(file_schema, props), parquet_path_to_id_mapping(file_schema)),
        writer_kwargs=_get_parquet_writer_kwargs(props),
        row_group_size=property_as_int(props, TableProperties.PARQUET_ROW_GROUP_LIMIT,
                                       TableProperties.PARQUET_ROW_GROUP_LIMIT_DEFAULT),
        target_file_size=property_as_int(props, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES,
                                         TableProperties.WRITE_TARGET_FILE_SIZE_BYTES_DEFAULT),
        downcast_ns=Config().get_bool(DOWNCAST_NS_TIMESTAMP_TO_US_ON_WRITE) or False,
        variant_ids=frozenset(f.field_id for f in file_schema._lazy_id_to_field.values() if is_variant(f.field_type)),
    )


def _plan_for(metadata: TableMetadata) -> _Plan:
    props = _writer_properties(metadata)
    key = _plan_key(metadata, props)
    with _lock:
        plan = _plans.get(key)
    if plan is None:
        plan = _build_plan(metadata, props)
        with _lock:
            plan = _plans.setdefault(key, plan)
    return plan


def _projection(plan: _Plan, schema: pa.Schema) -> _Projection:
    """Run pyiceberg's projection once on an empty batch to learn the file's Arrow schema."""
    with _lock:
        found = plan.projections.get(schema)
    if found is not None:
        return found
    task_schema = pyarrow_to_schema(schema, name_mapping=plan.table_schema.name_mapping,
                                    downcast_ns_timestamp_to_us=plan.downcast_ns,
                                    format_version=plan.format_version)
    empty = pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
    out = _to_requested_schema(plan.file_schema, task_schema, empty, downcast_ns_timestamp_to_us=plan.downcast_ns,
                               include_field_ids=True, format_model=_FORMAT).schema
    zero_copy = (schema.names == [f.name for f in plan.table_schema.fields] and len(out) == len(schema)
                 and all(out.field(i).type == schema.field(i).type for i in range(len(schema))))
    found = _Projection(out, task_schema, zero_copy)
    with _lock:
        plan.projections[schema] = found
    return found


def _to_file_table(plan: _Plan, proj: _Projection, batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """The rows as the file stores them: field ids on every field, casts where pyiceberg casts."""
    if proj.zero_copy:
        return pa.Table.from_arrays(pa.Table.from_batches(batches, schema=schema).columns,
                                    schema=proj.file_arrow_schema)
    return pa.Table.from_batches([
        _to_requested_schema(plan.file_schema, proj.task_schema, batch, downcast_ns_timestamp_to_us=plan.downcast_ns,
                             include_field_ids=True, format_model=_FORMAT)
        for batch in batches
    ], schema=proj.file_arrow_schema)


def _split_partitions(plan: _Plan, data: pa.Table) -> list[tuple[PartitionKey, pa.Table]]:
    """One table per partition value, rows in input order: pyiceberg's split in one pass.

    pyiceberg's ``_determine_partitions`` filters the whole input once per
    partition value (measured ~0.6 ms per file at three days per write); here a
    single group-by collects each value's row indices and one ``take`` per
    value cuts them out. Same transforms (pyiceberg's own), same keys, same rows
    in the same order, so the same files and statistics.
    """
    schema, fields = plan.table_schema, plan.spec.fields
    keys = {}
    for i, pf in enumerate(fields):
        source = schema.find_field(pf.source_id)
        column = _get_field_from_arrow_table(data, schema.find_column_name(pf.source_id))
        keys[f"_p{i}"] = pf.transform.pyarrow_transform(source.field_type)(column)
    names = list(keys)
    keys["_row"] = pa.array(np.arange(data.num_rows, dtype=np.int64))
    groups = pa.table(keys).group_by(names, use_threads=False).aggregate([("_row", "list")])
    rows = groups.column("_row_list").combine_chunks()
    parts = []
    for g, values in enumerate(groups.select(names).to_pylist()):
        field_values = [PartitionFieldValue(field=pf, value=values[n]) for pf, n in zip(fields, names)]
        key = PartitionKey(field_values=field_values, partition_spec=plan.spec, schema=schema)
        parts.append((key, data.take(rows[g].values)))
    return parts


def _new_path(plan: _Plan, write_uuid: uuid.UUID, index: int, partition_key: PartitionKey | None) -> str:
    """pyiceberg's data file naming and the table's location provider."""
    name = f"00000-{index}-{write_uuid}.{_FORMAT.file_extension()}"
    return plan.location_provider.new_data_location(data_file_name=name, partition_key=partition_key)


def _parquet_writer(plan: _Plan, stream: Any, schema: pa.Schema, codec: str | None = None) -> pq.ParquetWriter:
    """The table's writer settings; `codec` (a transient file's) replaces its codec and level."""
    kwargs = plan.writer_kwargs if codec is None else {**plan.writer_kwargs, "compression": codec,
                                                       "compression_level": None}
    return pq.ParquetWriter(stream, schema=schema, store_decimal_as_integer=True, **kwargs)


def open_stream(plan: _Plan, io: FileIO, path: str) -> Any:
    """A new data file's output stream; a table with variant columns gets the stream that annotates them."""
    stream = io.new_output(path).create(overwrite=True)
    return AnnotatingStream(stream, set(plan.variant_ids)) if plan.variant_ids else stream


def close_writer(writer: pq.ParquetWriter, stream: Any) -> int:
    """Close the writer (its footer annotated where the stream annotates) -> the file's size in bytes."""
    if isinstance(stream, AnnotatingStream):
        stream.hold()
        writer.close()
        stream.finish()
    else:
        writer.close()
    return stream.tell()  # bytes written: saves the stat (an object-store HEAD) pyiceberg makes


def _write_one(plan: _Plan, io: FileIO, table: pa.Table, path: str, partition_key: PartitionKey | None,
               codec: str | None = None) -> DataFile:
    stream = open_stream(plan, io, path)
    try:
        writer = _parquet_writer(plan, stream, table.schema, codec)
        writer.write_table(table, row_group_size=plan.row_group_size)
        size = close_writer(writer, stream)
    finally:
        stream.close()
    return _data_file(plan, path, size, writer.writer.metadata, partition_key)


def _data_file(plan: _Plan, path: str, size: int, parquet_metadata: Any, partition_key: PartitionKey | None,
               stat_columns: dict[str, StatColumn] | None = None) -> DataFile:
    data_file = DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=path,
        file_format=FileFormat.PARQUET,
        partition=partition_key.partition if partition_key else Record(),
        file_size_in_bytes=size,
        sort_order_id=plan.sort_order_id,
        spec_id=plan.spec_id,
        equality_ids=None,
        key_metadata=None,
        **file_statistics(parquet_metadata, stat_columns or plan.stat_columns),
    )
    data_file.spec_id = plan.spec_id  # from_args drops it; row deltas and compaction group files by spec
    return data_file


def write_data_files(table: Any, data: pa.Table, transient_codec: str | None = None) -> list[DataFile]:
    """Write ``data`` into ``table``'s location as Parquet data files, not yet committed.

    Same files, statistics and partition values as pyiceberg's
    ``_dataframe_to_data_files(table.metadata, data, table.io)``: one file per
    partition value, split further at ``write.target-file-size-bytes``. An
    empty table writes nothing.

    ``transient_codec`` (a pyarrow codec name) replaces the table's codec when
    ``data`` is under TRANSIENT_MAX_BYTES: for files that small-file merging
    rewrites with the table's codec within a few commits. zstd's fixed cost per
    page is most of a small file's CPU: for 100 rows of 19 columns, writing
    took 1.41 ms with zstd and 0.51 uncompressed, reading 1.41 and 0.73.
    """
    metadata: TableMetadata = table.metadata
    if data.num_rows == 0:
        return []
    file_format = metadata.properties.get(TableProperties.WRITE_FILE_FORMAT, TableProperties.WRITE_FILE_FORMAT_DEFAULT)
    if FileFormat(file_format) != FileFormat.PARQUET:
        return list(_dataframe_to_data_files(metadata, data, table.io))
    plan = _plan_for(metadata)
    proj = _projection(plan, data.schema)
    codec = transient_codec if transient_codec is not None and data.nbytes < TRANSIENT_MAX_BYTES else None
    write_uuid, counter = uuid.uuid4(), itertools.count(0)
    data = sort_rows(data, plan.table_schema, plan.sort_order)  # a partition's rows keep this order
    if plan.spec.is_unpartitioned():
        parts: Any = [(None, data)]
    else:
        parts = _split_partitions(plan, data)
    files = []
    for key, rows in parts:
        for batches in bin_pack_arrow_table(rows, plan.target_file_size):
            path = _new_path(plan, write_uuid, next(counter), key)
            files.append(_write_one(plan, table.io, _to_file_table(plan, proj, batches, rows.schema), path, key,
                                    codec))
    return files
