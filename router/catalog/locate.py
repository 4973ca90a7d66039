"""Find the live rows that hold given keys: the old images an upsert or a change stream replaces.

`locate_keys(table, keys, key_columns)` answers with (file_path, pos, key
columns...) of the current snapshot, reading as little as it can: files are
pruned by partition value where the key determines it (identity, bucket,
truncate... of key columns), then by the lower/upper bounds of the key columns
in the manifests; only the key columns of the remaining files are read, and the
positions the snapshot's position deletes already remove are skipped (a row
replaced twice is deleted once). Files are read in parallel on pyiceberg's
thread pool (Parquet decoding releases the GIL).

Key columns are top-level primitive columns, found in each file by field id
(renamed columns still match; a file older than a key column holds no key).

What a file's key columns hold is kept once read (files never change), in a
bounded LRU (KEY_CACHE_BYTES): for one integer key, the sorted values with
their row positions, so a lookup is a binary search; for other keys the
columns as read, matched by hash (`is_in`) or a join. The job locates every
batch's keys in mostly the same files, so it pays (numbers at KEY_CACHE_BYTES).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from cachetools import LRUCache
from pyiceberg.conversions import from_bytes
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import partition_record_value
from pyiceberg.types import PrimitiveType
from pyiceberg.utils.concurrent import ExecutorFactory

from router.catalog.deletes import require_row_level
from router.catalog.snapshot_files import SnapshotFiles, deleted_positions, snapshot_files
from router.exceptions import RowLevelError

FIELD_ID = b"PARQUET:field_id"

#: Bytes of data-file key lookups kept in memory: a long key costs 16 bytes a row (value and position),
#: so 256 MiB holds the keys of ~16M rows. Measured on 2M rows in 20 files (benchmarks/upsert_commit.json,
#: medians of 3 batches on a loaded 2-core machine): locating 2,000 keys 133 ms with empty caches, 28 ms
#: with this cache warm; 20,000 keys 191 ms and 43 ms.
KEY_CACHE_BYTES = 256 * 1024 * 1024

_lock = threading.Lock()
_file_key_cache: LRUCache = LRUCache(maxsize=KEY_CACHE_BYTES, getsizeof=lambda v: 256 + v.nbytes)


def _key_fields(table, key_columns: Sequence[str]):
    schema = table.schema()
    fields = []
    for name in key_columns:
        try:
            f = schema.find_field(name)
        except ValueError:
            raise RowLevelError("key column is not in the table schema", table=_name(table), column=name) from None
        if not isinstance(f.field_type, PrimitiveType) or schema.find_column_name(f.field_id) != f.name:
            raise RowLevelError("key columns must be top-level primitive columns", table=_name(table), column=name)
        fields.append(f)
    return schema, fields


def _distinct_keys(keys: pa.Table, key_columns: Sequence[str], arrow_types: list[pa.DataType]) -> pa.Table:
    """The keys cast to the table's types, without nulls (they match nothing) and duplicates."""
    try:
        columns = [keys.column(c).cast(t) for c, t in zip(key_columns, arrow_types)]
    except KeyError as exc:
        raise RowLevelError("the keys lack a key column", column=str(exc)) from None
    table = pa.table(dict(zip(key_columns, columns))).drop_null()
    if len(key_columns) == 1:
        return pa.table({key_columns[0]: pc.unique(table.column(0))}) if table.num_rows else table
    return table.group_by(list(key_columns), use_threads=False).aggregate([])


# ----------------------------------------------------------------------------- pruning

def _partition_candidates(table, schema, fields, keys: pa.Table,
                          files: list[DataFile]) -> list[tuple[DataFile, np.ndarray | None]]:
    """(file, indices of the keys it may hold; None = all) for files whose partition a key can have."""
    by_source = {f.field_id: f.name for f in fields}
    specs = table.metadata.specs()
    out: list[tuple[DataFile, np.ndarray | None]] = []
    plans: dict[int, dict | None] = {}
    for f in files:
        spec_id = f.spec_id
        if spec_id not in plans:
            plans[spec_id] = _key_partitions(specs[spec_id], schema, by_source, keys)
        plan = plans[spec_id]
        if plan is None:
            out.append((f, None))
            continue
        positions, groups = plan
        rows = groups.get(tuple(f.partition[i] for i in positions))
        if rows is not None:
            out.append((f, rows))
    return out


def _key_partitions(spec, schema, by_source: dict[int, str], keys: pa.Table):
    """(positions of the spec's fields derived from key columns, partition values -> key indices), or None."""
    derived = [(i, pf) for i, pf in enumerate(spec.fields) if pf.source_id in by_source]
    if not derived or keys.num_rows == 0:
        return None
    codes = np.zeros(keys.num_rows, dtype=np.int64)
    values: list[list] = []
    for i, pf in derived:
        source = schema.find_field(pf.source_id)
        try:
            transformed = pf.transform.pyarrow_transform(source.field_type)(keys.column(by_source[pf.source_id]))
        except (NotImplementedError, ImportError, ValueError, TypeError, pa.ArrowException):
            return None  # a transform pyiceberg cannot apply to Arrow here (e.g. void): no pruning by partition
        unique = pc.unique(transformed)
        index = pc.index_in(transformed, value_set=unique).to_numpy(zero_copy_only=False).astype(np.int64)
        codes = codes * len(unique) + index
        values.append([partition_record_value(pf, v, schema) for v in unique.to_pylist()])
    groups = {}
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.diff(sorted_codes, prepend=-1))
    ends = np.append(starts[1:], len(order))
    for s, e in zip(starts, ends):
        code, parts = int(sorted_codes[s]), []
        for vals in reversed(values):
            code, k = divmod(code, len(vals))
            parts.append(vals[k])
        groups[tuple(reversed(parts))] = order[s:e]
    return [i for i, _ in derived], groups


def _in_bounds(f: DataFile, fields, keys: pa.Table, rows: np.ndarray | None) -> np.ndarray | None:
    """Indices of the keys (of `rows`) within the file's lower/upper bounds of every key column;
    None when the bounds do not narrow them; an empty array when no key can be in the file."""
    lower, upper = f.lower_bounds or {}, f.upper_bounds or {}
    subset = keys if rows is None else keys.take(rows)
    mask = None
    for field in fields:
        lo, hi = lower.get(field.field_id), upper.get(field.field_id)
        if lo is None or hi is None:
            continue
        column = subset.column(field.name)
        try:
            low = pa.scalar(from_bytes(field.field_type, lo), column.type)
            high = pa.scalar(from_bytes(field.field_type, hi), column.type)
            inside = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        except Exception:  # bounds Arrow cannot compare, or of a narrower type (int widened to long): keep all
            continue
        mask = inside if mask is None else pc.and_(mask, inside)
    if mask is None:
        return rows
    picked = np.flatnonzero(mask.to_numpy(zero_copy_only=False) if isinstance(mask, pa.Array)
                            else mask.combine_chunks().to_numpy(zero_copy_only=False))
    return picked if rows is None else rows[picked]


# ----------------------------------------------------------------------------- reading

def _read_keys(io, f: DataFile, fields, arrow_types) -> pa.Table | None:
    """The key columns of one data file, by field id, cast to the table's types (None: a key column is missing)."""
    with io.new_input(f.file_path).open() as stream:
        parquet = pq.ParquetFile(stream)
        by_id = {}
        for name, fld in zip(parquet.schema_arrow.names, parquet.schema_arrow):
            if fld.metadata and FIELD_ID in fld.metadata:
                by_id[int(fld.metadata[FIELD_ID])] = name
        names = [by_id.get(field.field_id) for field in fields]
        if any(n is None for n in names):
            return None
        data = parquet.read(columns=names, use_threads=False)
    return pa.table({field.name: data.column(n).cast(t) for field, n, t in zip(fields, names, arrow_types)})


@dataclass(frozen=True)
class _FileKeys:
    """One data file's key column(s), ready for lookups: for one integer key the non-null values sorted
    with their row positions (a lookup is a binary search), else the key columns as read."""

    sorted_values: np.ndarray | None = None
    order: np.ndarray | None = None
    columns: pa.Table | None = None

    @property
    def nbytes(self) -> int:
        if self.columns is not None:
            return self.columns.nbytes
        return self.sorted_values.nbytes + self.order.nbytes


def _file_keys(io, f: DataFile, fields, arrow_types) -> _FileKeys | None:
    """The lookup structure of a data file's keys, cached: files never change (see KEY_CACHE_BYTES)."""
    cache_key = (f.file_path, tuple(field.field_id for field in fields), tuple(str(t) for t in arrow_types))
    with _lock:
        found = _file_key_cache.get(cache_key)
    if found is not None:
        return found
    columns = _read_keys(io, f, fields, arrow_types)
    if columns is None:
        return None
    if len(fields) == 1 and pa.types.is_integer(arrow_types[0]):
        column = columns.column(0).combine_chunks()
        valid = np.flatnonzero(column.is_valid().to_numpy(zero_copy_only=False))
        values = column.drop_null().to_numpy().astype(np.int64, copy=False)
        order = np.argsort(values, kind="stable")
        found = _FileKeys(sorted_values=values[order], order=valid[order])
    else:
        found = _FileKeys(columns=columns)
    with _lock:
        with contextlib.suppress(ValueError):  # larger than the whole cache: used once, not kept
            _file_key_cache[cache_key] = found
    return found


def _match(file_keys: _FileKeys, keys: pa.Table, key_columns: Sequence[str]) -> tuple[np.ndarray, pa.Table]:
    """(sorted row positions of the file whose key is one of `keys`, their key columns)."""
    if file_keys.sorted_values is not None:
        wanted = keys.column(0).to_numpy().astype(np.int64, copy=False)
        lo = np.searchsorted(file_keys.sorted_values, wanted, "left")
        hi = np.searchsorted(file_keys.sorted_values, wanted, "right")
        hit = hi > lo
        lo, counts = lo[hit], (hi - lo)[hit]
        if not len(lo):
            return np.empty(0, np.int64), keys.slice(0, 0)
        # every sorted index in [lo, hi) of each hit: a key may be in the file more than once
        starts = np.repeat(lo - np.cumsum(counts) + counts, counts) + np.arange(counts.sum())
        positions, values = file_keys.order[starts], file_keys.sorted_values[starts]
        by_position = np.argsort(positions)
        column = pa.array(values[by_position]).cast(keys.schema.field(0).type)
        return positions[by_position], pa.table({key_columns[0]: column})
    columns = file_keys.columns
    if len(key_columns) == 1:
        mask = pc.is_in(columns.column(0), value_set=keys.column(0).combine_chunks())
        positions = np.flatnonzero(mask.combine_chunks().to_numpy(zero_copy_only=False))
    else:
        indexed = columns.append_column("__pos", pa.array(np.arange(columns.num_rows, dtype=np.int64)))
        joined = indexed.join(keys, keys=list(key_columns), join_type="inner", use_threads=False)
        positions = np.sort(joined.column("__pos").to_numpy())
    return positions, columns.take(positions)


def _locate_in_file(table, f: DataFile, fields, arrow_types, keys: pa.Table, key_columns, files: SnapshotFiles):
    file_keys = _file_keys(table.io, f, fields, arrow_types)
    if file_keys is None:
        return None
    positions, found = _match(file_keys, keys, key_columns)
    if len(positions):
        gone = deleted_positions(table, f.file_path, files)
        if len(gone):
            keep = ~np.isin(positions, gone, assume_unique=True)
            positions, found = positions[keep], found.filter(pa.array(keep))
    if not len(positions):
        return None
    return pa.table({"file_path": pa.array([f.file_path] * len(positions), pa.string()),
                     "pos": pa.array(positions, pa.int64()), **{c: found.column(c) for c in key_columns}})


def clear_cache() -> None:
    """Forget the cached key lookups of data files (tests, benchmarks)."""
    with _lock:
        _file_key_cache.clear()


def locate_keys(table, keys: pa.Table, key_columns: Sequence[str], files: SnapshotFiles | None = None) -> pa.Table:
    """Live rows of the current snapshot (or of `files`) holding any of `keys`: (file_path, pos, key columns...),
    sorted by file and position. See the module docstring for what is read."""
    require_row_level(table)
    key_columns = list(key_columns)
    if not key_columns:
        raise RowLevelError("no key columns given", table=_name(table))
    schema, fields = _key_fields(table, key_columns)
    arrow_types = [schema_to_pyarrow(f.field_type) for f in fields]
    out_schema = pa.schema([pa.field("file_path", pa.string()), pa.field("pos", pa.int64()),
                            *[pa.field(c, t) for c, t in zip(key_columns, arrow_types)]])
    files = files or snapshot_files(table)
    wanted = _distinct_keys(keys, key_columns, arrow_types)
    if wanted.num_rows == 0 or not files.data:
        return out_schema.empty_table()
    work = []
    for f, rows in _partition_candidates(table, schema, fields, wanted, list(files.data.values())):
        rows = _in_bounds(f, fields, wanted, rows)
        if rows is not None and len(rows) == 0:
            continue
        work.append((f, wanted if rows is None else wanted.take(rows)))
    results = ExecutorFactory.get_or_create().map(
        lambda job: _locate_in_file(table, job[0], fields, arrow_types, job[1], key_columns, files), work)
    found = [r for r in results if r is not None]
    if not found:
        return out_schema.empty_table()
    return pa.concat_tables(found).cast(out_schema).sort_by([("file_path", "ascending"), ("pos", "ascending")])


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)
