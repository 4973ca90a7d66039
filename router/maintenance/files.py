"""Snapshot expiry with file clean-up, and orphan file removal (local warehouses)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from urllib.parse import urlparse

from router.catalog import expire_snapshots
from router.exceptions import MaintenanceError, UnsupportedLocation
from router.maintenance.compaction import LOCAL_SCHEMES, _delete, _name

log = logging.getLogger("icerouter.maintenance")


# ----------------------------------------------------------------------------- expire

@dataclass
class ExpiryResult:
    expired: int = 0
    deleted_files: list[str] = field(default_factory=list)


def reachable_files(table, include_deleted_entries: bool = False) -> set[str]:
    """Manifest lists, manifests and data/delete files the table's snapshots still reference."""
    paths: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=not include_deleted_entries):
                paths.add(entry.data_file.file_path)
    return paths


def expire(table, retain_last: int, max_age_seconds: float, delete_files: bool = True) -> ExpiryResult:
    """Expire old snapshots (router/catalog/expiry.py), then delete the files only they used."""
    before = reachable_files(table) if delete_files else set()
    expired = expire_snapshots(table, retain_last, max_age_seconds)
    result = ExpiryResult(expired=expired)
    if expired and delete_files:
        table.refresh()
        result.deleted_files = sorted(before - reachable_files(table))
        _delete(table, result.deleted_files)
    return result


# ----------------------------------------------------------------------------- orphans

def _local_path(location: str) -> str:
    parsed = urlparse(location)
    if parsed.scheme not in LOCAL_SCHEMES:
        raise UnsupportedLocation(f"orphan removal supports local warehouses only, not {parsed.scheme}://",
                                  location=location)
    return os.path.normpath(parsed.path if parsed.scheme else location)


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


def remove_orphans(table, older_than_seconds: float, dry_run: bool = False) -> list[str]:
    """Delete (or list) files under the data and metadata paths that no metadata references.

    Files are matched by inode, not by path spelling (symlinks, `..`, URI forms); if a live data
    file cannot be found that way, nothing is deleted.
    """
    table.refresh()
    provider = table.location_provider()
    roots = sorted({_local_path(provider.data_path), _local_path(provider.metadata_path)})
    referenced = {_identity(_local_path(p)) for p in referenced_files(table)}
    live = [task.file.file_path for task in table.scan().plan_files()] if table.current_snapshot() else []
    lost = [p for p in live if _identity(_local_path(p)) is None]
    if lost:
        raise MaintenanceError("live data files not found on disk; not removing orphans", table=_name(table),
                               missing=lost[0], count=len(lost))
    cutoff = time.time() - older_than_seconds
    orphans = []
    for root in roots:
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


def metadata_file_count(table) -> int:
    """Files under the metadata path (local warehouses), else metadata.json versions known."""
    try:
        root = _local_path(table.location_provider().metadata_path)
    except UnsupportedLocation:
        return len(table.metadata.metadata_log) + 1
    return sum(len(names) for _, _, names in os.walk(root))


