"""Manifest and manifest-list writers set up once per schema, not once per file.

Every commit writes a manifest (one entry per data file) and a manifest list,
and before writing a byte pyiceberg rebuilds, per file, the manifest entry
schema for the table's partition type, the writer tree that encodes it, the
file header's Avro schema JSON and the table schema and partition spec JSON of
the manifest's metadata: ~1.8 ms of a one-file append's ~7 ms commit here
(cProfile, scripts/bench_task.py over 200 tables), for things that depend only
on the table's schema, spec and format version. They hold no state once built,
so they are kept per process, keyed by the identity of the schema and spec
objects they come from (the cache entry holds those objects, so an id is never
reused while cached); a table's cached metadata keeps handing out the same
objects from commit to commit. The bytes written are pyiceberg's (the sync
marker is random per file as before; tests/router/catalog/test_avro_writers.py
compares files written both ways). A commit's manifests are written in the
committing thread, not handed to pyiceberg's pool (`_InlineSubmit`). `install`
puts this in place, once per process (router.catalog.get_catalog calls it).
"""

from __future__ import annotations

import json
import os
import threading
from concurrent.futures import Future

from cachetools import LRUCache
from pyiceberg.avro.file import (
    _SCHEMA_KEY, AVRO_CODEC_KEY, CODEC_MAPPING_ICEBERG_TO_AVRO, MAGIC, META_SCHEMA, SYNC_SIZE, AvroFileHeader,
    AvroOutputFile,
)
from pyiceberg.avro.resolver import construct_writer, resolve_writer
from pyiceberg.manifest import ManifestWriter
from pyiceberg.table.update import snapshot as snapshot_module
from pyiceberg.typedef import EMPTY_DICT
from pyiceberg.utils.concurrent import ExecutorFactory
from pyiceberg.utils.schema_conversion import AvroSchemaConversion

#: Schemas, writer trees and JSON texts kept per process (a few per table).
WRITERS_CACHED = 2048

_cache: LRUCache = LRUCache(maxsize=WRITERS_CACHED)
_lock = threading.Lock()
_META_WRITER = construct_writer(META_SCHEMA)
_pyiceberg = {
    "with_partition": ManifestWriter._with_partition,
    "meta": ManifestWriter._meta,
    "init": AvroOutputFile.__init__,
    "header": AvroOutputFile._write_header,
}


def _cached(kind: str, sources: tuple, build):
    """`build()` once per (kind, identity of `sources`); the entry keeps `sources` alive."""
    key = (kind, *map(id, sources))
    with _lock:
        hit = _cache.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], sources)):
        return hit[1]
    value = build()
    with _lock:
        _cache[key] = (sources, value)
    return value


def _with_partition(self: ManifestWriter, format_version):
    """pyiceberg's `ManifestWriter._with_partition` (the manifest entry schema), from the cache."""
    return _cached(f"entry-schema-v{format_version}", (self._spec, self._schema),
                   lambda: _pyiceberg["with_partition"](self, format_version))


def _meta(self: ManifestWriter) -> dict[str, str]:
    """pyiceberg's `ManifestWriter._meta`, the schema and spec JSON from the cache."""
    # `self.version` and the codec are not part of the cached texts; they are added per file
    texts = _cached("meta", (self._spec, self._schema),
                    lambda: {k: v for k, v in _pyiceberg["meta"].fget(self).items()
                             if k in ("schema", "partition-spec", "partition-spec-id")})
    return {**texts, "format-version": str(self.version), AVRO_CODEC_KEY: self._compression}


def _init(self: AvroOutputFile, output_file, file_schema, schema_name: str, record_schema=None,
          metadata=EMPTY_DICT) -> None:
    """pyiceberg's `AvroOutputFile.__init__` with the writer tree from the cache."""
    self.output_file = output_file
    self.file_schema = file_schema
    self.schema_name = schema_name
    self.sync_bytes = os.urandom(SYNC_SIZE)
    if record_schema is None:
        self.writer = _cached("writer", (file_schema,), lambda: construct_writer(file_schema=file_schema))
    else:
        self.writer = _cached("resolved-writer", (record_schema, file_schema),
                              lambda: resolve_writer(record_schema=record_schema, file_schema=file_schema))
    self.metadata = metadata


def _write_header(self: AvroOutputFile) -> None:
    """pyiceberg's `AvroOutputFile._write_header` with the file schema's Avro JSON from the cache."""
    from pyiceberg.table import TableProperties

    codec_name = self.metadata.get(AVRO_CODEC_KEY, TableProperties.WRITE_AVRO_COMPRESSION_DEFAULT)
    if avro_codec_name := CODEC_MAPPING_ICEBERG_TO_AVRO.get(codec_name):
        codec_name = avro_codec_name
    json_schema = _cached(f"avro-json:{self.schema_name}", (self.file_schema,), lambda: json.dumps(
        AvroSchemaConversion().iceberg_to_avro(self.file_schema, schema_name=self.schema_name)))
    meta = {**self.metadata, _SCHEMA_KEY: json_schema, AVRO_CODEC_KEY: codec_name}
    _META_WRITER.write(self.encoder, AvroFileHeader(MAGIC, meta, self.sync_bytes))


class _InlineSubmit:
    """pyiceberg's executor for snapshot producers, with `submit` run in the caller's thread.

    A commit's producer hands its new manifest, its delete manifests and the
    parent's manifest list to pyiceberg's thread pool and waits for all three:
    Python work that holds the GIL, so the hand-off to pool threads and back is
    pure cost (measured in scripts/bench_task.py). `map` (an overwrite reading
    many manifests, I/O an object store can overlap) still uses the pool.
    """

    @staticmethod
    def get_or_create():
        return _InlineSubmit()

    @staticmethod
    def submit(fn, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - raised by result(), as the pool's future would
            future.set_exception(exc)
        return future

    @staticmethod
    def map(fn, *iterables, **kwargs):
        return ExecutorFactory.get_or_create().map(fn, *iterables, **kwargs)


def install() -> None:
    snapshot_module.ExecutorFactory = _InlineSubmit
    ManifestWriter._with_partition = _with_partition
    ManifestWriter._meta = property(_meta)
    AvroOutputFile.__init__ = _init
    AvroOutputFile._write_header = _write_header


def uninstall() -> None:
    """pyiceberg's own writers again (tests, the benchmark's baseline)."""
    snapshot_module.ExecutorFactory = ExecutorFactory
    ManifestWriter._with_partition = _pyiceberg["with_partition"]
    ManifestWriter._meta = _pyiceberg["meta"]
    AvroOutputFile.__init__ = _pyiceberg["init"]
    AvroOutputFile._write_header = _pyiceberg["header"]
    with _lock:
        _cache.clear()
