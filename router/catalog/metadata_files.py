"""Table metadata files read and written with each committed snapshot handled once per process.

Every commit rewrites the whole metadata file, snapshots included, and a
committer whose cached metadata is behind reads the whole file again. A table
keeps ~65 snapshots at a 1 s trigger with the default 60 s snapshot age, and
pyiceberg spends most of the file's cost on them: their summaries are built and
serialised by Python code (`Summary.__init__`, its `model_serializer`). A
committed snapshot hardly changes: its id and its manifest list (a file written
once under a unique name) identify it, and only pyiceberg's expiry rewrites it,
dropping a parent id that pointed at an expired snapshot. So its JSON is cached
by all its fields but the summary, when written, and its parsed model is reused
from the previous metadata when read. Everything else in the file goes through
pyiceberg as before; the result is the metadata pyiceberg writes and reads
(tests/router/catalog/test_metadata_files.py).
"""

from __future__ import annotations

import functools
import json
import operator
import threading

from cachetools import LRUCache
from pyiceberg.serializers import Compressor
from pyiceberg.table.metadata import TableMetadataUtil, TableMetadataV3
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.utils.config import Config

#: Serialised snapshots kept per process (a few hundred bytes to a few kB each).
SNAPSHOT_JSON_CACHE = 16384

_snapshot_json: LRUCache = LRUCache(maxsize=SNAPSHOT_JSON_CACHE)
_lock = threading.Lock()


#: Snapshot fields that identify one version of a committed snapshot; the summary never changes.
SNAPSHOT_KEY_FIELDS = ("snapshot_id", "manifest_list", "parent_snapshot_id", "sequence_number", "timestamp_ms",
                       "schema_id", "first_row_id", "added_rows")
_key = operator.attrgetter(*SNAPSHOT_KEY_FIELDS)
_JSON_NAMES = tuple(Snapshot.model_fields[name].alias or name for name in SNAPSHOT_KEY_FIELDS)


def _raw_key(raw: dict) -> tuple:
    """`_key` of a snapshot still in its JSON form."""
    return tuple(raw.get(name) for name in _JSON_NAMES)


@functools.lru_cache(maxsize=1)
def legacy_current_snapshot_id() -> bool:
    """pyiceberg's `legacy-current-snapshot-id` setting, read once per process (pyiceberg reads its
    config file and environment for every metadata file: ~0.25 ms of each)."""
    return bool(Config().get_bool("legacy-current-snapshot-id"))


def _dump(metadata, **kwargs) -> str:
    """pyiceberg's JSON of the model; a v3 model's own method refuses (pyiceberg 0.12 writes no v3), so its
    fields are serialised by the base model as for v2: v3 adds `next-row-id` and the snapshots' row ids,
    which the model holds (router/catalog/format_v3.py keeps them right)."""
    if isinstance(metadata, TableMetadataV3):
        return super(TableMetadataV3, metadata).model_dump_json(**kwargs)
    return metadata.model_dump_json(**kwargs)


def metadata_json(metadata) -> str:
    """The JSON pyiceberg writes for `metadata` (ToOutputFile.table_metadata), snapshots from the cache."""
    exclude_none = not legacy_current_snapshot_id()
    if metadata.format_version < 2 or not metadata.snapshots:  # v1 rewrites its snapshots when serialised
        return _dump(metadata, exclude_none=exclude_none)
    head = _dump(metadata, exclude_none=exclude_none, exclude={"snapshots"})
    keys = [(_key(snapshot), exclude_none) for snapshot in metadata.snapshots]
    with _lock:
        parts = [_snapshot_json.get(key) for key in keys]
    for i, text in enumerate(parts):
        if text is None:
            parts[i] = text = metadata.snapshots[i].model_dump_json(exclude_none=exclude_none)
            with _lock:
                _snapshot_json[keys[i]] = text
    return f'{head[:-1]},"snapshots":[{",".join(parts)}]}}'


def write_metadata(metadata, io, metadata_path: str) -> None:
    """Write a new metadata file (never overwriting one), compressed as its name says; pyiceberg's
    catalogs call it by keyword as `_write_metadata`."""
    data = metadata_json(metadata).encode("utf-8")
    with io.new_output(metadata_path).create(overwrite=False) as stream:
        stream.write(Compressor.get_compressor(metadata_path).bytes_compressor()(data))


def read_metadata(io, location: str, previous=None):
    """Parse the metadata file at `location`; snapshots `previous` (older metadata of the same table)
    already holds are taken from it instead of being parsed again."""
    with io.new_input(location).open() as stream:
        with Compressor.get_compressor(location).stream_decompressor(stream) as plain:
            raw = json.loads(plain.read())
    if previous is not None and previous.format_version >= 2 and raw.get("format-version") == previous.format_version:
        known = {_key(s): s for s in previous.snapshots}
        raw["snapshots"] = [known.get(_raw_key(s), s) for s in raw.get("snapshots", ())]
    return TableMetadataUtil.parse_obj(raw)
