"""Snapshot expiry with file clean-up, and orphan file removal (local disk or object storage).

Orphans are found by listing the table's data and metadata prefixes through the
table's own FileIO filesystem (pyarrow: local, S3, GCS, ADLS...), so an object
store is listed and its objects deleted, never a local mirror of it.
"""

from __future__ import annotations

import os
import posixpath
import time
from dataclasses import dataclass, field
from typing import Callable
from urllib.parse import urlparse

from pyarrow.fs import FileSelector

from router.catalog import delete_quietly, expire_snapshots
from router.catalog.reachable import REFRESH_ATTEMPTS, reachable_files, unreferenced_files
from router.exceptions import MaintenanceError, UnsupportedLocation
from router.maintenance.compaction import LOCAL_SCHEMES, _name


# ----------------------------------------------------------------------------- expire

@dataclass
class ExpiryResult:
    expired: int = 0
    deleted_files: list[str] = field(default_factory=list)


def expire(table, retain_last: int, max_age_seconds: float, delete_files: bool = True) -> ExpiryResult:
    """Expire old snapshots (router/catalog/expiry.py), then delete the files only they used.

    Judged on fresh metadata: every snapshot of the table as first read that is gone now counts,
    also those the job's commits expired meanwhile (whose files those commits delete as well)."""
    before = table.metadata
    expired = expire_snapshots(table, retain_last, max_age_seconds)
    result = ExpiryResult(expired=expired)
    if expired and delete_files:
        result.deleted_files = _left_behind(table, before)
        delete_quietly(table.io, result.deleted_files)
    return result


def _left_behind(table, before) -> list[str]:
    """Files of the snapshots of `before` that the table no longer holds, referenced by none it holds.
    A held snapshot whose files vanished was expired by a later commit: read fresh metadata again."""
    for attempt in range(REFRESH_ATTEMPTS):
        table.refresh()
        current = {s.snapshot_id for s in table.metadata.snapshots}
        try:
            return unreferenced_files(table.io, [s for s in before.snapshots if s.snapshot_id not in current],
                                      table.metadata.snapshots)
        except FileNotFoundError:
            if attempt == REFRESH_ATTEMPTS - 1:
                raise
    return []


def delete_unreferenced(table, paths: set[str]) -> tuple[list[str], set[str]]:
    """Delete those of `paths` that no snapshot of the table references any more (files a
    compaction replaced, once the snapshots that still read them are expired).
    Returns (deleted, still referenced); a file already gone counts as deleted."""
    if not paths:
        return [], set()
    still = paths & reachable_files(table)
    deleted = sorted(paths - still)
    delete_quietly(table.io, deleted)
    return deleted, still


# ----------------------------------------------------------------------------- orphans

#: Schemes naming the same object store (Hadoop's s3a / s3n are S3).
SCHEME_ALIASES = {"s3a": "s3", "s3n": "s3"}


def _local_path(location: str) -> str:
    parsed = urlparse(location)
    if parsed.scheme not in LOCAL_SCHEMES:
        raise UnsupportedLocation(f"not a local path: {parsed.scheme}://", location=location)
    return os.path.normpath(parsed.path if parsed.scheme else location)


def _is_local(location: str) -> bool:
    return urlparse(location).scheme in LOCAL_SCHEMES


def _object_key(location: str) -> tuple[str, str]:
    """(scheme, "bucket/normalised/key") of an object-store URI, spelling differences removed."""
    parsed = urlparse(location)
    scheme = SCHEME_ALIASES.get(parsed.scheme, parsed.scheme)
    return scheme, f"{parsed.netloc}{posixpath.normpath('/' + parsed.path.lstrip('/'))}"


def _filesystem(table, location: str):
    """The pyarrow filesystem the table's FileIO uses for ``location`` (credentials included)."""
    io = table.io
    fs_by_scheme = getattr(io, "fs_by_scheme", None)
    if fs_by_scheme is None or not hasattr(io, "parse_location"):
        raise UnsupportedLocation(f"orphan removal needs pyiceberg's PyArrowFileIO, not {type(io).__name__}",
                                  location=location)
    scheme, netloc, _ = io.parse_location(location, io.properties)
    return fs_by_scheme(scheme, netloc)


def referenced_files(table) -> set[str]:
    """Every file the table metadata can reach, including old metadata versions and statistics."""
    metadata = table.metadata
    paths = reachable_files(table, include_deleted_entries=True)
    paths.add(table.metadata_location)
    paths.update(entry.metadata_file for entry in metadata.metadata_log)
    paths.update(s.statistics_path for s in getattr(metadata, "statistics", []) or [])
    paths.update(s.statistics_path for s in getattr(metadata, "partition_statistics", []) or [])
    return paths


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def remove_orphans(table, older_than_seconds: float, dry_run: bool = False,
                   clock: Callable[[], float] = time.time) -> list[str]:
    """Delete (or list) files under the data and metadata paths that no metadata references.

    Only files older than ``older_than_seconds`` count (a concurrent writer's new files are not
    orphans yet). If a live data file cannot be found, nothing is deleted: the listing or the
    location mapping is wrong, and deleting on that basis could destroy the table.
    """
    table.refresh()
    provider = table.location_provider()
    roots = sorted({provider.data_path, provider.metadata_path})
    if all(_is_local(root) for root in roots):
        return _remove_local_orphans(table, roots, clock() - older_than_seconds, dry_run)
    if any(_is_local(root) for root in roots):
        remote = next(root for root in roots if not _is_local(root))
        raise UnsupportedLocation(f"data and metadata paths are on different file systems ({remote})",
                                  location=remote)
    return _remove_object_orphans(table, roots, clock() - older_than_seconds, dry_run)


def _live_files(table) -> list[str]:
    return [task.file.file_path for task in table.scan().plan_files()] if table.current_snapshot() else []


def _refuse_if_lost(table, lost: list[str]) -> None:
    if lost:
        raise MaintenanceError("live data files not found in the warehouse; not removing orphans",
                               table=_name(table), missing=lost[0], count=len(lost))


def _remove_local_orphans(table, roots: list[str], cutoff: float, dry_run: bool) -> list[str]:
    """Local disk: files are matched by inode, not by path spelling (symlinks, `..`, URI forms)."""
    referenced = {_identity(_local_path(p)) for p in referenced_files(table)}
    _refuse_if_lost(table, [p for p in _live_files(table) if _identity(_local_path(p)) is None])
    orphans = []
    for root in sorted({_local_path(r) for r in roots}):
        for directory, _, names in os.walk(root):
            for path in (os.path.join(directory, name) for name in names):
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                if st.st_mtime < cutoff and (st.st_dev, st.st_ino) not in referenced:
                    orphans.append(path)
    if not dry_run:
        for path in orphans:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
    return sorted(orphans)


def _list_objects(table, roots: list[str]) -> dict[tuple[str, str], float]:
    """(scheme, key) -> modification time of every object under the roots, through the table's FileIO."""
    objects: dict[tuple[str, str], float] = {}
    for root in roots:
        scheme, key = _object_key(root)
        infos = _filesystem(table, root).get_file_info(FileSelector(key, recursive=True, allow_not_found=True))
        for info in infos:
            if info.is_file:
                objects[(scheme, posixpath.normpath("/" + info.path)[1:])] = (
                    info.mtime.timestamp() if info.mtime is not None else float("inf"))
    return objects


def _remove_object_orphans(table, roots: list[str], cutoff: float, dry_run: bool) -> list[str]:
    """Object storage: list the prefixes, compare normalised keys, delete through the FileIO."""
    listed = _list_objects(table, roots)
    referenced = {_object_key(p) for p in referenced_files(table)}
    _refuse_if_lost(table, [p for p in _live_files(table) if _object_key(p) not in listed
                            and not _exists(table, p)])
    orphans = sorted(f"{scheme}://{key}" for (scheme, key), mtime in listed.items()
                     if mtime < cutoff and (scheme, key) not in referenced)
    if not dry_run:
        for uri in orphans:
            try:
                table.io.delete(uri)
            except FileNotFoundError:
                pass
    return orphans


def _exists(table, location: str) -> bool:
    """For live files outside the listed prefixes (e.g. written before `write.data.path` changed)."""
    try:
        return table.io.new_input(location).exists()
    except OSError:
        return False


def metadata_file_count(table) -> int:
    """Files under the table's metadata path (listed through its FileIO)."""
    root = table.location_provider().metadata_path
    if _is_local(root):
        return sum(len(names) for _, _, names in os.walk(_local_path(root)))
    try:
        return len(_list_objects(table, [root]))
    except UnsupportedLocation:
        return len(table.metadata.metadata_log) + 1
