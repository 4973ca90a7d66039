"""What one snapshot holds, for row-level work: live data files, their position deletes, deleted rows.

Locating keys, writing position deletes, validating a row delta and compacting
a table with deletes all ask the same questions of a snapshot: which data files
are live (with their sequence numbers), which position-delete files apply to
each (Iceberg's scan rule: a position delete applies to data files of its own
partition and a sequence number <= its own, and only to the paths it names),
and which rows of a file they delete. Snapshots, manifests and delete files
never change once written, so the answers are cached: the file index per
(table, snapshot id) and the positions per delete file, both in bounded LRUs.

pyiceberg 0.12 names used: ``ExecutorFactory`` (its shared thread pool) and
``ArrowScan`` / ``FileScanTask``, which apply position deletes when they read a
data file. Equality deletes are refused: pyiceberg cannot read them.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from cachetools import LRUCache
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.manifest import (
    INITIAL_SEQUENCE_NUMBER, DataFile, DataFileContent, FileFormat, ManifestEntry, ManifestEntryStatus,
)
from pyiceberg.table import FileScanTask
from pyiceberg.utils.concurrent import ExecutorFactory

from router.catalog.format_v3 import delete_key, is_deletion_vector, referenced_data_file
from router.catalog.puffin import read_vector
from router.exceptions import RowLevelError

#: Field ids of a position-delete file's columns (Iceberg spec, reserved ids).
FILE_PATH_ID = 2147483546
POS_ID = 2147483545

#: Files (data and delete) of the snapshot indexes kept, over all tables (~1-2 KB each with their
#: statistics); the job asks about a table's last snapshot or two, maintenance about the current one.
SNAPSHOT_CACHE_FILES = 200_000
#: Bytes of deleted positions kept in memory, over all delete files (8 bytes a position plus paths).
DELETES_CACHE_BYTES = 256 * 1024 * 1024

_lock = threading.Lock()
_snapshots: LRUCache = LRUCache(maxsize=SNAPSHOT_CACHE_FILES, getsizeof=lambda v: 1 + len(v.data) + len(v.deletes))
_positions: LRUCache = LRUCache(maxsize=DELETES_CACHE_BYTES,  # by format_v3.delete_key
                                getsizeof=lambda v: 64 + sum(len(p) + a.nbytes for p, a in v.items()))
#: Per live data file, the delete files merged last and the sorted union of what they delete: a file's
#: deletes only accumulate, so the next snapshot merges only the delete files added since. Merging every
#: delete file again cost a commit 1.3 ms per data file at 100 delete files (~160 ms at 123 files).
_merged: LRUCache = LRUCache(maxsize=DELETES_CACHE_BYTES // 4,
                             getsizeof=lambda v: 64 + 100 * len(v[0]) + v[1].nbytes)


@dataclass(frozen=True)
class SnapshotFiles:
    """The live files of one snapshot: data files by path and the position deletes that apply to them."""

    snapshot_id: int | None
    data: Mapping[str, DataFile] = field(default_factory=dict, repr=False)
    sequence: Mapping[str, int] = field(default_factory=dict, repr=False)  # data file path -> data sequence number
    deletes: tuple[tuple[DataFile, int], ...] = field(default=(), repr=False)  # (delete file, sequence number)
    _applies: Mapping[str, tuple[DataFile, ...]] = field(default_factory=dict, repr=False)
    _by_partition: Mapping[tuple, tuple[str, ...]] = field(default_factory=dict, repr=False)

    def delete_files_for(self, path: str) -> tuple[DataFile, ...]:
        """Position-delete files that apply to the live data file at `path` (none for an unknown path)."""
        return self._applies.get(path, ())

    def plus(self, snapshot_id: int, data: list[tuple[DataFile, int]], deletes: list[tuple[DataFile, int]]):
        """This index with files added (data and delete files with their sequence numbers), none removed."""
        files, sequence = dict(self.data), dict(self.sequence)
        by_partition = {k: list(v) for k, v in self._by_partition.items()}
        for f, seq in data:
            files[f.file_path], sequence[f.file_path] = f, seq
            by_partition.setdefault((f.spec_id, f.partition), []).append(f.file_path)
        applies = dict(self._applies)
        for d, seq in deletes:
            for path in _targets(d, seq, files, sequence, by_partition):
                applies[path] = applies.get(path, ()) + (d,)
        return SnapshotFiles(snapshot_id, files, sequence, self.deletes + tuple(deletes), applies,
                             {k: tuple(v) for k, v in by_partition.items()})

    def without_deletes(self, keys: set) -> SnapshotFiles | None:
        """This index with the delete files of `keys` (format_v3.delete_key) removed; None when one of
        them is not in it."""
        kept = tuple((d, seq) for d, seq in self.deletes if delete_key(d) not in keys)
        if len(self.deletes) - len(kept) != len(keys):
            return None
        applies = {path: tuple(d for d in found if delete_key(d) not in keys) for path, found in self._applies.items()}
        return SnapshotFiles(self.snapshot_id, self.data, self.sequence, kept, {p: a for p, a in applies.items() if a},
                             self._by_partition)


def _targets(d: DataFile, seq: int, files, sequence, by_partition) -> list[str]:
    """Live data files a position-delete file applies to: the scan rule (its partition, a data sequence
    number <= its own) and its file_path bounds. pyiceberg's DeleteFileIndex asks the same with a metrics
    evaluator, ~60 us a pair: too slow for a per-batch index of tables with many delete files.
    A deletion vector (format v3) names its one file in `referenced_data_file`."""
    referenced = referenced_data_file(d)
    if referenced is not None:
        return [referenced] if referenced in files and sequence[referenced] <= seq else []
    lower, upper = (d.lower_bounds or {}).get(FILE_PATH_ID), (d.upper_bounds or {}).get(FILE_PATH_ID)
    try:
        lower, upper = (lower.decode(), upper.decode()) if lower is not None and upper is not None else (None, None)
    except UnicodeDecodeError:
        lower = upper = None
    if lower is not None and lower == upper:  # names one file (pyiceberg matches these by path alone)
        candidates: Iterable[str] = (lower,) if lower in files else ()
    else:
        candidates = by_partition.get((d.spec_id, d.partition), ())
        if lower is not None:
            candidates = [p for p in candidates if lower <= p <= upper]
    return [p for p in candidates if sequence[p] <= seq]


def _entries(io, manifest, discard_deleted: bool = True) -> list[ManifestEntry]:
    return manifest.fetch_manifest_entry(io, discard_deleted=discard_deleted)


def _split(table, entries: Iterable[ManifestEntry]) -> tuple[list, list]:
    data, deletes = [], []
    for entry in entries:
        content, seq = entry.data_file.content, entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        if content == DataFileContent.DATA:
            data.append((entry.data_file, seq))
        elif content == DataFileContent.POSITION_DELETES:
            deletes.append((entry.data_file, seq))
        else:
            raise RowLevelError("the table holds equality deletes, which this reader cannot apply",
                                table=_name(table), file=entry.data_file.file_path)
    return data, deletes


def _build(table, snapshot) -> SnapshotFiles:
    io = table.io
    lists = ExecutorFactory.get_or_create().map(lambda m: _entries(io, m), snapshot.manifests(io))
    data, deletes = _split(table, (e for entries in lists for e in entries))
    return SnapshotFiles(None).plus(snapshot.snapshot_id, data, deletes)


def _extend(table, snapshot, parent: SnapshotFiles) -> SnapshotFiles | None:
    """The parent's index plus what `snapshot` added and minus the delete files it removed (a v3 commit
    replaces the vectors it merges), read from the manifests it wrote; None when it removed data files
    (a compaction) or the totals of its summary disagree: then the index is read whole."""
    io, sid = table.io, snapshot.snapshot_id
    written = [m for m in snapshot.manifests(io) if m.added_snapshot_id == sid]
    entries = [e for m in written for e in _entries(io, m, discard_deleted=False) if e.snapshot_id == sid]
    removed = [e.data_file for e in entries if e.status == ManifestEntryStatus.DELETED]
    if any(f.content == DataFileContent.DATA for f in removed):
        return None
    base = parent.without_deletes({delete_key(f) for f in removed}) if removed else parent
    if base is None:
        return None
    data, deletes = _split(table, (e for e in entries if e.status == ManifestEntryStatus.ADDED))
    found = base.plus(sid, data, deletes)
    summary = snapshot.summary
    for total, have in (("total-data-files", len(found.data)), ("total-delete-files", len(found.deletes))):
        if summary is not None and summary.get(total) is not None and int(summary.get(total)) != have:
            return None
    return found


def snapshot_files(table, snapshot_id: int | None = None, metadata=None) -> SnapshotFiles:
    """The file index of the table's current snapshot (or of `snapshot_id`), cached per snapshot; built
    from its parent's when that is cached and it only added files (every commit of the job).
    `metadata`: a transaction's staged metadata instead of the table's."""
    metadata = metadata or table.metadata
    snapshot = metadata.snapshot_by_id(snapshot_id) if snapshot_id is not None else metadata.current_snapshot()
    if snapshot is None:
        if snapshot_id is not None:
            raise RowLevelError("no such snapshot", table=_name(table), snapshot_id=snapshot_id)
        return SnapshotFiles(None)
    uuid = str(metadata.table_uuid)
    with _lock:
        found = _snapshots.get((uuid, snapshot.snapshot_id))
        parent = _snapshots.get((uuid, snapshot.parent_snapshot_id)) if found is None else None
    if parent is not None and snapshot.first_row_id is not None and _first_with_row_ids(metadata, snapshot):
        parent = None  # its manifest list gave the parent's manifests row ids: their files' first_row_id changed
    if found is None:
        found = (_extend(table, snapshot, parent) if parent is not None else None) or _build(table, snapshot)
        with _lock, contextlib.suppress(ValueError):  # ValueError: larger than the whole cache
            _snapshots[(uuid, snapshot.snapshot_id)] = found
    return found


def _first_with_row_ids(metadata, snapshot) -> bool:
    """Whether `snapshot` is the first to assign row ids (a table upgraded to v3): its parent has none."""
    parent = metadata.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id is not None else None
    return parent is None or parent.first_row_id is None


# ----------------------------------------------------------------------------- deleted positions

def remember_positions(key: tuple[str, int | None], positions: Mapping[str, np.ndarray]) -> None:
    """Seed the cache with a delete file just written (its writer knows its content); `key`: its
    format_v3.delete_key (a deletion vector shares its Puffin file with others)."""
    with _lock, contextlib.suppress(ValueError):  # ValueError: larger than the whole cache
        _positions[key] = dict(positions)


def read_position_deletes(io, delete_file: DataFile) -> dict[str, np.ndarray]:
    """data file path -> sorted int64 positions a position-delete file or deletion vector names (cached)."""
    key = delete_key(delete_file)
    path = delete_file.file_path
    with _lock:
        found = _positions.get(key)
    if found is not None:
        return found
    if is_deletion_vector(delete_file):
        found = {referenced_data_file(delete_file): read_vector(io, delete_file)}
        with _lock, contextlib.suppress(ValueError):
            _positions[key] = found
        return found
    if delete_file.file_format != FileFormat.PARQUET:
        raise RowLevelError("only Parquet position-delete files are read here", file=path,
                            format=str(delete_file.file_format))
    with io.new_input(path).open() as stream:
        data = pq.read_table(stream, columns=["file_path", "pos"], read_dictionary=["file_path"])
    found = split_by_path(data.column("file_path"), data.column("pos"))
    with _lock, contextlib.suppress(ValueError):
        _positions[key] = found
    return found


def split_by_path(paths: pa.ChunkedArray | pa.Array, positions: pa.ChunkedArray | pa.Array) -> dict[str, np.ndarray]:
    """Group (file_path, pos) columns into path -> sorted unique int64 positions."""
    if len(paths) == 0:
        return {}
    encoded = _dictionary(paths)
    codes = encoded.indices.to_numpy(zero_copy_only=False)
    pos = np.asarray(positions.to_numpy() if isinstance(positions, pa.Array)
                     else positions.combine_chunks().to_numpy(), dtype=np.int64)
    order = np.argsort(codes, kind="stable")
    codes, pos = codes[order], pos[order]
    starts = np.flatnonzero(np.diff(codes, prepend=-1))
    ends = np.append(starts[1:], len(codes))
    names = encoded.dictionary.to_pylist()
    return {names[codes[s]]: np.unique(pos[s:e]) for s, e in zip(starts, ends)}


def _dictionary(paths: pa.ChunkedArray | pa.Array) -> pa.DictionaryArray:
    """One dictionary-encoded array of `paths`, whether they came encoded or not."""
    if isinstance(paths, pa.ChunkedArray):
        paths = (paths.unify_dictionaries() if pa.types.is_dictionary(paths.type) else paths).combine_chunks()
    return paths if pa.types.is_dictionary(paths.type) else paths.dictionary_encode()


def deleted_positions(table, path: str, files: SnapshotFiles | None = None) -> np.ndarray:
    """Sorted positions of the live data file at `path` that the snapshot's position deletes remove."""
    files = files or snapshot_files(table)
    deletes = files.delete_files_for(path)
    if not deletes:
        return np.empty(0, dtype=np.int64)
    names = frozenset(delete_key(d) for d in deletes)
    with _lock:
        found = _merged.get(path)
    if found is not None and found[0] == names:
        return found[1]
    done, merged = found if found is not None and found[0] <= names else (frozenset(), None)
    arrays = [read_position_deletes(table.io, d).get(path) for d in deletes if delete_key(d) not in done]
    arrays = [a for a in arrays + [merged] if a is not None and len(a)]
    if not arrays:
        merged = np.empty(0, dtype=np.int64)
    else:
        merged = arrays[0] if len(arrays) == 1 else _union(arrays)
    merged.flags.writeable = False  # shared through the cache
    with _lock, contextlib.suppress(ValueError):  # ValueError: larger than the whole cache
        _merged[path] = (names, merged)
    return merged


def _union(arrays: list[np.ndarray]) -> np.ndarray:
    """Sorted distinct values of sorted arrays: a stable sort merges the runs (numpy 2.4's np.unique hashes
    instead, 30x slower on 7,000 positions)."""
    values = np.concatenate(arrays)
    values.sort(kind="stable")
    keep = np.empty(len(values), dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def deleted_counts(table, files: SnapshotFiles | None = None) -> dict[str, int]:
    """data file path -> rows its position deletes remove, for every live data file that has any."""
    files = files or snapshot_files(table)
    paths = [p for p in files.data if files.delete_files_for(p)]
    return {p: int(len(deleted_positions(table, p, files))) for p in paths}


@dataclass(frozen=True)
class LiveDeleteFile:
    """A position-delete file of the current snapshot and the rows it names per data file path."""

    delete_file: DataFile
    sequence_number: int
    referenced: Mapping[str, int]  # data file path -> positions named (live or not)
    data_files: tuple[DataFile, ...]  # the live data files it applies to


def live_delete_files(table, files: SnapshotFiles | None = None) -> list[LiveDeleteFile]:
    """Every position-delete file of the snapshot, with the data files it references (read from it)."""
    files = files or snapshot_files(table)
    applied: dict[str, list[DataFile]] = {}
    for path, data_file in files.data.items():
        for d in files.delete_files_for(path):
            applied.setdefault(delete_key(d), []).append(data_file)
    out = []
    for delete_file, seq in files.deletes:
        named = read_position_deletes(table.io, delete_file)
        live = tuple(f for f in applied.get(delete_key(delete_file), ()) if f.file_path in named)
        out.append(LiveDeleteFile(delete_file, seq, {p: int(len(a)) for p, a in named.items()}, live))
    return out


# ----------------------------------------------------------------------------- reading with deletes applied

def scan_task(table, data_file: DataFile, files: SnapshotFiles | None = None) -> FileScanTask:
    """A pyiceberg scan task for one live data file with the position deletes that apply to it."""
    files = files or snapshot_files(table)
    return FileScanTask(data_file, delete_files=set(files.delete_files_for(data_file.file_path)))


def read_live_rows(table, data_files: Sequence[DataFile], files: SnapshotFiles | None = None,
                   columns: Iterable[str] | None = None) -> Iterator[pa.RecordBatch]:
    """Record batches of the data files, projected to the current schema, their position deletes applied."""
    files = files or snapshot_files(table)
    schema = table.schema() if columns is None else table.schema().select(*columns)
    scan = ArrowScan(table.metadata, table.io, schema, AlwaysTrue())
    yield from scan.to_record_batches([scan_task(table, f, files) for f in data_files])


def clear_caches() -> None:
    """Forget cached snapshot indexes and positions (tests, benchmarks)."""
    with _lock:
        _snapshots.clear()
        _positions.clear()
        _merged.clear()


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)
