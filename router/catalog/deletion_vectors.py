"""Deletion vectors: a v3 table's deleted rows, one Roaring bitmap per data file in a Puffin file.

On a format v3 table an upsert or a change stream deletes old row images with
deletion vectors, never with position-delete files (which v3 replaces) nor with
equality deletes. Each commit writes one Puffin file holding a
``deletion-vector-v1`` blob per data file it deletes rows from; the blob holds
every deleted position of that file, so the file's previous vector (and any
position-delete file of an upgraded table) is merged into it, and the previous
vector's entry leaves the table in the same commit: a data file has at most one
live vector (the spec's scan rule applies only that one). An upgraded table's
position-delete file leaves too once every live data file it names has a vector.

The blob and the Puffin file are router/catalog/puffin.py's. The manifest entry: content position deletes, format PUFFIN, the
record count is the vector's cardinality, ``referenced_data_file`` the data file,
``content_offset`` / ``content_size_in_bytes`` the blob's place in the Puffin file,
and full lower/upper bounds of ``file_path`` equal to that file, so readers that
index delete files by path bounds (pyiceberg, router/catalog/snapshot_files.py)
match the vector to its file alone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

from router.catalog.format_v3 import delete_key, is_deletion_vector
from router.catalog.snapshot_files import (
    FILE_PATH_ID, SnapshotFiles, deleted_positions, read_position_deletes, remember_positions, snapshot_files,
)
from router.catalog.puffin import puffin_file, serialize_vector
from router.catalog.tables import delete_quietly
from router.exceptions import RowLevelError


# ----------------------------------------------------------------------------- writing a commit's vectors

@dataclass
class VectorWrite:
    """The deletion vectors one commit adds, and the vectors of the same data files they replace."""

    added: list[DataFile] = field(default_factory=list)
    replaced: list[DataFile] = field(default_factory=list)


def write_deletion_vectors(table, positions: dict[str, np.ndarray], files: SnapshotFiles | None = None,
                           new_data_files: Iterable[DataFile] = ()) -> VectorWrite:
    """One Puffin file (not committed) with a vector per data file of `positions` (path -> sorted positions):
    each merged with what the snapshot's deletes already remove from that file, and the file's live
    vector named as replaced. Paths must be live in `files` (the snapshot located in) or `new_data_files`."""
    if int(table.metadata.format_version) < 3:
        raise RowLevelError("deletion vectors need an Iceberg format v3 table", table=_name(table))
    wanted = {p: a for p, a in positions.items() if len(a)}
    out = VectorWrite()
    if not wanted:
        return out
    files = files or snapshot_files(table)
    new = {f.file_path: f for f in new_data_files}
    targets, blobs, merged = [], [], {}
    for path in sorted(wanted):
        data_file = files.data.get(path) or new.get(path)
        if data_file is None:
            raise RowLevelError("deletion vectors name a file that is not a live data file of the snapshot",
                                table=_name(table), path=path, snapshot_id=files.snapshot_id)
        before = deleted_positions(table, path, files) if path in files.data else np.empty(0, np.int64)
        union = np.union1d(before, wanted[path]).astype(np.int64, copy=False)
        merged[path] = union
        targets.append(data_file)
        blobs.append((path, serialize_vector(union), len(union)))
        out.replaced += [d for d in files.delete_files_for(path) if is_deletion_vector(d)]
    out.replaced += _position_files_merged(table, files, set(wanted))
    content, places = puffin_file(blobs)
    location = table.location_provider().new_data_location(f"00000-0-{uuid.uuid4()}-deletes.puffin")
    try:
        with table.io.new_output(location).create(overwrite=True) as stream:
            stream.write(content)
    except BaseException as exc:
        delete_quietly(table.io, [location])
        if isinstance(exc, OSError) and _refused(exc):
            raise RowLevelError(REFUSED, table=_name(table), path=location) from exc
        raise
    default_spec = table.metadata.default_spec_id
    for data_file, (path, _, cardinality), (offset, length) in zip(targets, blobs, places):
        vector = DataFile.from_args(
            _table_format_version=3, content=DataFileContent.POSITION_DELETES, file_path=location,
            file_format=FileFormat.PUFFIN, partition=data_file.partition, record_count=cardinality,
            file_size_in_bytes=len(content), column_sizes=None, value_counts=None, null_value_counts=None,
            nan_value_counts=None, lower_bounds={FILE_PATH_ID: path.encode()},
            upper_bounds={FILE_PATH_ID: path.encode()}, key_metadata=None, split_offsets=None,
            equality_ids=None, sort_order_id=None, first_row_id=None, referenced_data_file=path,
            content_offset=offset, content_size_in_bytes=length)
        vector.spec_id = getattr(data_file, "_spec_id", default_spec)
        remember_positions(delete_key(vector), {path: merged[path]})
        out.added.append(vector)
    return out


def _position_files_merged(table, files: SnapshotFiles, targets: set[str]) -> list[DataFile]:
    """An upgraded table's position-delete files whose every live data file has a vector once this commit
    lands (a new one here, or one already live): each vector merged their positions, and readers ignore
    such a file where a vector applies, so it leaves the table as Java's writers drop file-scoped ones;
    the snapshot summary then counts each deleted row once. A file that names another live data file
    without a vector stays until that file gets one (or compaction rewrites it)."""
    seen, out = set(), []
    for path in sorted(targets):
        for d in files.delete_files_for(path):
            if is_deletion_vector(d) or delete_key(d) in seen:
                continue
            seen.add(delete_key(d))
            named = read_position_deletes(table.io, d)
            if all(p in targets or p not in files.data or _has_vector(files, p) for p in named):
                out.append(d)
    return out


def _has_vector(files: SnapshotFiles, path: str) -> bool:
    return any(is_deletion_vector(d) for d in files.delete_files_for(path))


#: Why an upsert into a v3 table fails where the object store refuses its Puffin files.
REFUSED = ("the object store refused the deletion vectors' Puffin file: a v3 table's upserts need a store that "
           "takes Puffin files beside the data files (SeaweedFS's table buckets take only Parquet, ORC and Avro)")


def _refused(exc: OSError) -> bool:
    """An access refusal (a store's rule or policy), which no retry changes, as pyarrow's S3 FileIO words it."""
    text = str(exc)
    return "ACCESS_DENIED" in text or "AccessDenied" in text or "Access Denied" in text


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)
