"""Per-process catalog and table handles, table creation and partition specs.

Spark executors receive only the (picklable) CatalogConfig; the pyiceberg
catalog and the loaded tables are built lazily once per Python worker process
and kept in module-level caches, never captured in closures.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from typing import Any, Mapping, Sequence

from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchNamespaceError, TableAlreadyExistsError
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortField, SortOrder

from evolution.backoff import backoff_delay
from evolution.layout import partition_field_name, usable_partition_terms, usable_sort_terms
from router.catalog import avro_readers, avro_writers, format_v3, manifest_lists
from router.config import CatalogConfig
from router.exceptions import ServiceUnavailable

# Every commit appends one manifest; merged once ~32 pile up, a table's manifest list (read and
# rewritten by every commit) stays short over thousands of commits. Java Iceberg merges by default
# (at 100); pyiceberg does not. Commits add these to tables that lack them (catalog/commit.py).
MANIFEST_MERGE_MIN_COUNT = 32
MANIFEST_MERGE_PROPERTIES = {
    "commit.manifest-merge.enabled": "true",
    "commit.manifest.min-count-to-merge": str(MANIFEST_MERGE_MIN_COUNT),
}

# Properties every table created by icerouter gets (the user's properties win).
DEFAULT_TABLE_PROPERTIES = {
    "format-version": "2",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": "20",
    "commit.retry.num-retries": "0",  # we own the retry loop (DESIGN.md)
    "write.parquet.compression-codec": "zstd",
    **MANIFEST_MERGE_PROPERTIES,
}


def manifest_merge_properties(identifier: str) -> dict[str, str]:
    """MANIFEST_MERGE_PROPERTIES with the count spread over 0.75x-1.25x by a stable hash of the table
    name: tables created together and committed every batch would otherwise all merge in the same
    batch, one batch in 32 (a merge rewrites the merged manifest, ~15 ms a table)."""
    count = round(MANIFEST_MERGE_MIN_COUNT * (0.75 + 0.5 * (zlib.crc32(identifier.encode()) % 1000) / 1000))
    return {**MANIFEST_MERGE_PROPERTIES, "commit.manifest.min-count-to-merge": str(count)}


def table_properties(identifier: str, properties: Mapping[str, str] | None = None) -> dict[str, str]:
    """What a table icerouter creates gets: DEFAULT_TABLE_PROPERTIES, its merge count, the user's (which win)."""
    return {**DEFAULT_TABLE_PROPERTIES, **manifest_merge_properties(identifier), **(properties or {})}


_catalogs: dict[tuple, Any] = {}
_tables: dict[tuple, Any] = {}
_namespaces: set[tuple] = set()  # (catalog key, namespace) this process created or found
_lock = threading.RLock()


def _key(config: CatalogConfig) -> tuple:
    return (config.name, tuple(sorted((k, str(v)) for k, v in config.properties.items())))


def get_catalog(config: CatalogConfig, create: bool = True):
    """The process-wide catalog for this config (built on first use).

    `create=False` (read-only commands: status, dlq, plan, check): a catalog that does not exist
    is ServiceUnavailable (exit 3) naming it, never a new empty one (pyiceberg's SQL catalog
    creates a missing SQLite file, so a mistyped path would describe an empty estate)."""
    key = _key(config)
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is None:
            if not create and (missing := config.missing_file) is not None:
                raise ServiceUnavailable(f"the Iceberg catalog {config.name!r} at {config.url} does not exist "
                                         f"(no file {missing}): check catalog.properties.uri "
                                         "(the job's first run creates it)", service="Iceberg catalog", url=config.url)
            avro_readers.install()  # manifest lists and manifests read without re-resolving their schema
            avro_writers.install()  # and written without rebuilding their schemas and writer trees
            manifest_lists.install()  # a parent's manifests from memory when this process wrote the list
            format_v3.install()  # v3 manifests, manifest lists and row ids (pyiceberg 0.12 writes no v3)
            catalog = _catalogs[key] = config.load(sql_impl="router.catalog.sql.SqlCatalog", create=create)
        return catalog


def load_table(config: CatalogConfig, identifier: str, refresh: bool = False):
    """A cached table handle; `refresh=True` re-reads metadata. Raises NoSuchTableError."""
    key = (_key(config), identifier)
    with _lock:
        table = _tables.get(key)
    if table is None:
        table = get_catalog(config).load_table(identifier)
    elif refresh:
        _refresh(config, identifier, table)
    with _lock:
        _tables[key] = table
    return table


def refresh_cached(config: CatalogConfig, identifiers) -> set[str]:
    """Refresh the cached handles of `identifiers` with one catalog query where the catalog can
    (our SqlCatalog); returns the identifiers whose handles are now current. Others (not cached,
    gone, another catalog) are left to `load_table(..., refresh=True)`."""
    refresh_tables = getattr(get_catalog(config), "refresh_tables", None)
    if refresh_tables is None:
        return set()
    key = _key(config)
    with _lock:
        cached = {identifier: _tables.get((key, identifier)) for identifier in identifiers}
    by_name = {table.name(): identifier for identifier, table in cached.items() if table is not None}
    tables = [cached[identifier] for identifier in by_name.values()]
    return {by_name[table.name()] for table in refresh_tables(tables)}


def _refresh(config: CatalogConfig, identifier: str, table) -> None:
    """Bring the cached handle to the catalog's current metadata, in place (metadata files never change)."""
    refresh_table = getattr(get_catalog(config), "refresh_table", None)
    if refresh_table is not None:  # our SqlCatalog: one query, and nothing read if nobody committed
        refresh_table(table)
    else:
        table.refresh()


def layout_spec(schema: Schema, partition_by: Sequence[str]) -> PartitionSpec:
    """The spec a new table gets: the terms its schema can take (evolution/layout.py, the same terms
    an existing table is evolved to), fields named as ``partition_field_name`` names them."""
    return PartitionSpec(*[
        PartitionField(source_id=schema.find_field(t.column).field_id, field_id=1000 + i,
                       transform=t.to_transform(), name=partition_field_name(t))
        for i, t in enumerate(usable_partition_terms(schema, partition_by))])


def layout_sort_order(schema: Schema, sort_by: Sequence[str]) -> SortOrder:
    """The sort order a new table gets (unsorted without usable terms)."""
    fields = [SortField(source_id=schema.find_field(t.term.column).field_id, transform=t.term.to_transform(),
                        direction=t.direction, null_order=t.null_order) for t in usable_sort_terms(schema, sort_by)]
    return SortOrder(*fields) if fields else UNSORTED_SORT_ORDER


def create_table(config: CatalogConfig, identifier: str, schema: Schema, partition_by: Sequence[str] = (),
                 properties: Mapping[str, str] | None = None, sort_by: Sequence[str] = ()):
    """Create a table (and its namespace); if someone else created it meanwhile, load theirs."""
    catalog = get_catalog(config)
    namespace = identifier.rsplit(".", 1)[0]
    ensure_namespace(config, namespace)
    layout = {"schema": schema, "partition_spec": layout_spec(schema, partition_by),
              "sort_order": layout_sort_order(schema, sort_by), "properties": table_properties(identifier, properties)}
    try:
        try:
            table = catalog.create_table(identifier, **layout)
        except NoSuchNamespaceError:  # dropped since this process saw it
            ensure_namespace(config, namespace, known=False)
            table = catalog.create_table(identifier, **layout)
    except TableAlreadyExistsError:
        table = catalog.load_table(identifier)
    except Exception:  # a concurrent creation can also surface as a unique-key violation
        if not catalog.table_exists(identifier):
            raise
        table = catalog.load_table(identifier)
    with _lock:
        _tables[(_key(config), identifier)] = table
    return table


def ensure_namespace(config: CatalogConfig, namespace: str, known: bool = True) -> None:
    """Create the namespace unless this process already saw it (`known=False`: ask the catalog again)."""
    key = (_key(config), namespace)
    with _lock:
        if known and key in _namespaces:
            return
        _namespaces.discard(key)
    catalog = get_catalog(config)
    try:
        catalog.create_namespace(namespace)
    except NamespaceAlreadyExistsError:
        pass
    except Exception:  # two tasks creating it at once: the loser sees a unique-key violation
        if namespace not in {".".join(ns) for ns in catalog.list_namespaces()}:
            raise
    with _lock:
        _namespaces.add(key)


def backoff(attempt: int, base: float = 0.05, cap: float = 5.0) -> None:
    """Sleep before retry `attempt`: full-jitter exponential backoff (evolution/backoff.py)."""
    time.sleep(backoff_delay(attempt, base, cap))


def delete_quietly(io, paths) -> None:
    """Delete files nothing references any more. A file already gone is what was wanted (another
    committer or maintenance run got there first); any other failure leaves an orphan for
    `icerouter maintain` to remove, and is logged, never raised."""
    for path in paths:
        try:
            io.delete(path)
        except FileNotFoundError:
            pass
        except Exception as exc:
            logging.getLogger("icerouter.catalog").warning("could not delete %s: %s", path, exc)
