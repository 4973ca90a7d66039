"""A snapshot's manifests kept per process by manifest-list path, the lists this process wrote included.

Every append reads its parent snapshot's manifest list (the new list repeats the
existing manifests): ~0.4 ms a commit here, for a file this process usually wrote
itself one batch earlier (a task commits the same tables batch after batch). A
manifest list is never rewritten in place (each snapshot gets a new path, with a
fresh uuid), so what a path holds is known for good once it was written or read:
`install` keeps the manifests of each list written (format version 2: the
ManifestFiles as the list writer serialised them, sequence numbers assigned) and
of each list read, and `Snapshot.manifests` answers from that before reading the
file. tests/router/catalog/test_manifest_lists.py checks the kept manifests equal
those pyiceberg reads back from the file. A list deleted since (an expired
snapshot's) is still answered from memory: no snapshot in a table's metadata
points to it then, so nobody asks.
"""

from __future__ import annotations

import threading
from typing import Any

from cachetools import LRUCache
from pyiceberg.manifest import ManifestFile, ManifestListWriter
from pyiceberg.table import snapshots as snapshots_module

#: Manifest lists kept: the current one of a few hundred tables, and some older ones.
LISTS_CACHED = 2048

_lists: LRUCache = LRUCache(maxsize=LISTS_CACHED)
_lock = threading.Lock()
_pyiceberg = {
    "manifests": snapshots_module._manifests,
    "add": ManifestListWriter.add_manifests,
    "exit": ManifestListWriter.__exit__,
}


def _manifests(io: Any, manifest_list: str) -> tuple[ManifestFile, ...]:
    """pyiceberg's `_manifests`, answered from memory when this process wrote or read the list."""
    with _lock:
        hit = _lists.get(manifest_list)
    if hit is not None:
        return hit
    found = tuple(_pyiceberg["manifests"](io, manifest_list))
    with _lock:
        _lists[manifest_list] = found
    return found


def _add_manifests(self: ManifestListWriter, manifest_files: list[ManifestFile]) -> ManifestListWriter:
    """pyiceberg's `add_manifests`, remembering the ManifestFiles as written."""
    prepared = [self.prepare_manifest(manifest_file) for manifest_file in manifest_files]
    self._writer.write_block(prepared)
    self.__dict__.setdefault("_icerouter_written", []).extend(prepared)
    return self


def _exit(self: ManifestListWriter, exc_type, exc_value, traceback) -> None:
    """pyiceberg's `__exit__`; a list written whole (format version 2 or 3) is kept."""
    _pyiceberg["exit"](self, exc_type, exc_value, traceback)
    if exc_type is None and self._format_version >= 2:
        written = tuple(self.__dict__.get("_icerouter_written", ()))
        with _lock:
            _lists[self._output_file.location] = written


def install() -> None:
    snapshots_module._manifests = _manifests
    ManifestListWriter.add_manifests = _add_manifests
    ManifestListWriter.__exit__ = _exit


def uninstall() -> None:
    """pyiceberg's own reads again (tests, benchmark baselines)."""
    snapshots_module._manifests = _pyiceberg["manifests"]
    ManifestListWriter.add_manifests = _pyiceberg["add"]
    ManifestListWriter.__exit__ = _pyiceberg["exit"]
    clear()


def clear() -> None:
    with _lock:
        _lists.clear()
