"""What a table's snapshots reference, and the files that only expired snapshots referenced.

Shared by the job's commits, which expire snapshots in their own transaction and
then delete what only those snapshots used (catalog/commit.py, batch_commit.py),
and by `icerouter maintain` (maintenance/files.py: expiry, orphan removal).

Manifest lists and manifests are written once under unique names and never
change, so what they name is cached by path. A maintenance run asks it of every
retained snapshot several times (before and after each expiry, after
compaction): 0.3 s a time, 1.5 of a run's 2.2 s of CPU, for a table with 70
snapshots and 160 files, read again from disk each time (cProfile). A job commit
that expires asks it of the few retained snapshots every `expire_every_commits`
commits: only the manifests written since the last expiry are read
(benchmarks/expiry_cleanup.json).
"""

from __future__ import annotations

import logging
import threading
from typing import Callable, Iterable

from cachetools import LRUCache
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.table import snapshots as _snapshots_module

from router.catalog.tables import delete_quietly

log = logging.getLogger("icerouter.catalog")

#: File paths held by the caches of what manifest lists and manifests name (~150 bytes each, ~30 MB
#: in all). Every Python worker of the job holds one: at 200 tables committing every 2 s it fills
#: with manifests no expiry will ask for again, so the bound is what it costs in each process.
REACHABLE_CACHE_PATHS = 200_000
#: Fresh metadata is read this many times when a snapshot's files vanish meanwhile (a later commit expired it).
REFRESH_ATTEMPTS = 3

_named: LRUCache = LRUCache(maxsize=REACHABLE_CACHE_PATHS, getsizeof=lambda value: 1 + sum(map(len, value)))
_named_lock = threading.Lock()


def _cached(key: tuple, read: Callable[[], tuple]) -> tuple:
    with _named_lock:
        value = _named.get(key)
    if value is None:
        value = read()
        with _named_lock:
            _named[key] = value
    return value


def _read_list(io, manifest_list: str) -> tuple:
    # looked up at call time: router/catalog/manifest_lists.py answers lists this process wrote from memory
    return tuple(_snapshots_module._manifests(io, manifest_list))


def _read_manifest(io, manifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    entries = manifest.fetch_manifest_entry(io, discard_deleted=False)
    return (tuple(e.data_file.file_path for e in entries if e.status != ManifestEntryStatus.DELETED),
            tuple(e.data_file.file_path for e in entries if e.status == ManifestEntryStatus.DELETED))


def _manifests(io, manifest_list: str) -> tuple:
    """The ManifestFiles a manifest list names (one-tuple, for the cache's size count)."""
    return _cached(("list", manifest_list), lambda: (_read_list(io, manifest_list),))[0]


def _data_files(io, manifest) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(live, deleted) data and delete file paths a manifest names."""
    return _cached(("manifest", manifest.manifest_path), lambda: _read_manifest(io, manifest))


def _reachable(io, snapshots: Iterable, include_deleted_entries: bool) -> set[str]:
    paths: set[str] = set()
    seen: set[str] = set()
    for snapshot in snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in _manifests(io, snapshot.manifest_list):
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            paths.add(manifest.manifest_path)
            live, deleted = _data_files(io, manifest)
            paths.update(live)
            if include_deleted_entries:
                paths.update(deleted)
    return paths


def reachable_files(table, include_deleted_entries: bool = False) -> set[str]:
    """Manifest lists, manifests and data/delete files the table's snapshots still reference.

    A snapshot whose files are gone was expired by a commit after the table was read (its
    files deleted): the table is refreshed and asked again."""
    for attempt in range(REFRESH_ATTEMPTS):
        try:
            return _reachable(table.io, table.metadata.snapshots, include_deleted_entries)
        except FileNotFoundError:
            if attempt == REFRESH_ATTEMPTS - 1:
                raise
            table.refresh()
    raise AssertionError("unreachable")


def unreferenced_files(io, expired: Iterable, retained: Iterable) -> list[str]:
    """Manifest lists, manifests and live data/delete files of the `expired` snapshots that none of
    the `retained` ones references. An expired snapshot whose manifest list is gone was cleaned up
    already (by another expiry) and adds nothing; a retained one's raises FileNotFoundError (what it
    references is unknown, so nothing may be deleted on that basis)."""
    retained = list(retained)
    lists = {s.manifest_list for s in retained}
    kept = {m.manifest_path: m for s in retained for m in _manifests(io, s.manifest_list)}
    found: set[str] = set()
    data: set[str] = set()
    for snapshot in expired:
        try:
            manifests = _manifests(io, snapshot.manifest_list)
        except FileNotFoundError:
            continue
        if snapshot.manifest_list not in lists:
            found.add(snapshot.manifest_list)
        for manifest in manifests:
            # a manifest a retained snapshot lists keeps its live files; only the others are read
            if manifest.manifest_path in kept or manifest.manifest_path in found:
                continue
            try:
                live, _ = _data_files(io, manifest)
            except FileNotFoundError:
                continue
            found.add(manifest.manifest_path)
            data.update(live)
    if data:  # a manifest merge carries live files into new manifests: drop those any retained one holds
        for manifest in kept.values():
            data.difference_update(_data_files(io, manifest)[0])
            if not data:
                break
    return sorted(found | data)


def delete_expired_files(table, base, expired_ids: Iterable[int]) -> int:
    """After a commit that removed the snapshots `expired_ids` of `base` (the metadata it was staged
    on) is known to be committed: delete the files only those snapshots referenced, judged against
    `table.metadata`, the committed state. Returns how many; never raises (a failure leaves the
    files to orphan removal).

    No committer can need a deleted file. Each is referenced by none of the committed state's
    snapshots, and no commit ever adds an existing file again (appends, merges and compactions
    write new files), so no later snapshot references it either. A later commit starts from
    metadata that no longer holds the expired snapshots, and one staged on older metadata loses
    its compare-and-swap and stages again on fresh metadata (a manifest it finds gone meanwhile
    is an error its retry heals). A data file is deleted only when it is no longer live, i.e.
    when a merge or a compaction replaced it: whoever planned to rewrite it from an older
    snapshot would fail to commit anyway. A small-file merge re-checks that its sources are live
    before it commits (and gives up when one cannot be read); the driver's compaction re-checks
    before its commit, and a planned file that vanished while it is read is a CompactionConflict.
    Readers of an expired snapshot lose it, as with any expiry (`max_snapshot_age_seconds`)."""
    try:
        gone = set(expired_ids) - {s.snapshot_id for s in table.metadata.snapshots}
        expired = [s for s in base.snapshots if s.snapshot_id in gone]
        if not expired:
            return 0
        paths = unreferenced_files(table.io, expired, table.metadata.snapshots)
        delete_quietly(table.io, paths)
        return len(paths)
    except Exception as exc:  # noqa: BLE001 - the commit landed; its leftovers go to orphan removal
        log.warning("files of the snapshots expired in %s's commit left to orphan removal: %s: %s",
                    ".".join(table.name()), type(exc).__name__, exc)
        return 0


def drop_unlisted_manifests(table, producers) -> None:
    """Manifests the committed snapshot producers wrote that their snapshot does not list: a manifest
    merge folds the commit's new manifest (and compaction's rewritten ones) into a merged one, and
    pyiceberg leaves the folded ones on disk, referenced by nothing. A producer that wrote one
    manifest has it listed, so only those that wrote more read their list (from memory when this
    process wrote it: catalog/manifest_lists.py)."""
    for producer in producers:
        written = getattr(producer, "_written_manifests", ())
        snapshot = table.metadata.snapshot_by_id(producer.snapshot_id) if len(written) > 1 else None
        if snapshot is None:
            continue
        try:
            listed = {m.manifest_path for m in snapshot.manifests(table.io)}
        except Exception as exc:  # noqa: BLE001 - left to orphan removal
            log.warning("manifests folded by %s's commit left to orphan removal: %s", ".".join(table.name()), exc)
            continue
        delete_quietly(table.io, [p for p in written if p not in listed])
