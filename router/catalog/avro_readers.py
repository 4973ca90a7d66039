"""Avro reader trees of manifest lists and manifests, resolved once per file schema.

Each open of a manifest list or a manifest parses the Avro schema in the file's
header into an Iceberg schema and resolves a reader tree against pyiceberg's
read schema: ~0.3 ms a file here, most of reading a manifest list of 32
manifests (0.5 ms), and paid again for each manifest a manifest merge or a
maintenance scan reads. The files of a table share a handful of schemas, and a
reader tree holds no state once built, so trees are kept per (header schema,
read schema, read types, read enums); the file's bytes are still read and
decoded as pyiceberg does. The header's own reader (the same for every Avro
file) is built once too: pyiceberg builds it at each open, ~0.1 ms, half of
reading a one-file manifest. `install` puts this in place of pyiceberg's
`AvroFile.__enter__`, once per process (router.catalog.get_catalog calls it).
"""

from __future__ import annotations

import threading

from cachetools import LRUCache
from pyiceberg.avro.file import _SCHEMA_KEY, META_SCHEMA, AvroFile, AvroFileHeader, new_decoder
from pyiceberg.avro.resolver import construct_reader, resolve_reader

#: Reader trees kept per process: a table has one manifest-list schema and one manifest schema per
#: partition spec and format version.
READERS_CACHED = 512

_readers: LRUCache = LRUCache(maxsize=READERS_CACHED)
_lock = threading.Lock()
_pyiceberg_enter = AvroFile.__enter__
_header_reader = construct_reader(META_SCHEMA, {-1: AvroFileHeader})  # stateless, as the trees


def _enter(self: AvroFile) -> AvroFile:
    """pyiceberg's `AvroFile.__enter__` with the schema and reader tree from the cache."""
    with self.input_file.open() as stream:
        self.decoder = new_decoder(stream.read())
    self.header = _header_reader.read(self.decoder)
    key = (self.header.meta.get(_SCHEMA_KEY), id(self.read_schema), tuple(self.read_types.items()),
           tuple(self.read_enums.items()))
    with _lock:
        hit = _readers.get(key)
    if hit is None or hit[0] is not self.read_schema:  # the identity check: an id can be reused once freed
        schema = self.header.get_schema()
        read_schema = self.read_schema or schema
        hit = (self.read_schema, schema, read_schema,
               resolve_reader(schema, read_schema, self.read_types, self.read_enums))
        with _lock:
            _readers[key] = hit
    _, self.schema, self.read_schema, self.reader = hit
    return self


def install() -> None:
    AvroFile.__enter__ = _enter


def uninstall() -> None:
    """pyiceberg's own `__enter__` again (the benchmark's baseline)."""
    AvroFile.__enter__ = _pyiceberg_enter
    with _lock:
        _readers.clear()
