"""pyiceberg's SQL catalog (SQLite, PostgreSQL), committing on the caller's metadata.

For every commit pyiceberg's SqlCatalog re-loads the table (a catalog query plus
reading and parsing the metadata file) and deep-copies the new metadata: about
a third of a one-file append here (cProfile, scripts/bench_commit.py). Our
committers hold current metadata already (they refresh before deciding what a
table holds), and the compare-and-swap on the metadata location is what makes a
commit safe, so this catalog applies the updates to the caller's metadata and
swaps the pointer. A stale caller loses the swap and the commit falls back to
pyiceberg's own path, so the result is what pyiceberg alone would have done.

A file SQLite catalog is switched to write-ahead logging: the tasks of every
worker process commit into it at once, and in rollback-journal mode each commit
locks out readers and costs several fsyncs. Its connections run with
`synchronous=NORMAL` (SQLITE_CONNECTION_PRAGMAS), SQLite's advice for WAL: a
commit no longer waits for an fsync of the log, which on a disk shared with a
broker or compaction writing waits behind their dirty pages (p99 0.4 ms -> 30 ms
under the local broker's store rewrites). The file stays consistent; a power
loss may drop the last commits, and a table then rolls back together with the
offsets it stores (router/progress.py), so the job reads those records again
and writes them once.

`current_location` answers "did the table move?" with one query, so refreshing a
cached table that nobody else committed costs no metadata read (`refresh_tables`:
one query for all the tables a task wrote, ~1.5 ms a table less at 100 tables a task); `refresh_table`
reads a moved table's new metadata without re-parsing the snapshots the cached
metadata already holds, and every metadata file is written with each snapshot
serialised once per process (router/catalog/metadata_files.py).

Creating a table, pyiceberg asks whether the namespace exists three times and
then reads back the metadata file it has just written (~4 of 7 ms per table on
an idle machine; a new route over hundreds of topics creates hundreds of tables
in one batch). This catalog asks once per namespace per `NAMESPACE_TTL_SECONDS`
(for its `location` property) and returns the table from the metadata it wrote.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from cachetools import TTLCache
from pyiceberg.catalog import LOCATION, WAREHOUSE_LOCATION, Catalog
from pyiceberg.catalog.sql import IcebergTables
from pyiceberg.catalog.sql import SqlCatalog as _PyicebergSqlCatalog
from pyiceberg.exceptions import NoSuchTableError, TableAlreadyExistsError
from pyiceberg.io import load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table, TableProperties, Transaction
from pyiceberg.table.locations import load_location_provider
from pyiceberg.table.metadata import new_table_metadata
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (  # pinned pyiceberg 0.12 (tests/router/catalog/test_commit.py)
    AssertCreate, _apply_table_update, _TableMetadataUpdateContext, _update_table_metadata_log,
)
from pyiceberg.utils.datetime import datetime_to_millis
from pyiceberg.utils.properties import property_as_bool
from pyiceberg.typedef import EMPTY_DICT
from sqlalchemy import bindparam, event, insert, select, update
from sqlalchemy.exc import IntegrityError

from router.catalog.metadata_files import read_metadata, write_metadata
from router.catalog.tables import delete_quietly

#: How long a namespace's `location` property is trusted when tables are created in it.
NAMESPACE_TTL_SECONDS = 60.0


def staged(base, updates) -> tuple:
    """`updates` applied to `base` in order by pyiceberg's own rules: (metadata, whether it changed).

    No deep copy: table metadata models are frozen, so sharing unchanged parts
    with `base` is safe. Also the staged view of our transactions (catalog/commit.py).
    """
    context = _TableMetadataUpdateContext()
    metadata = base
    for table_update in updates:
        metadata = _apply_table_update(table_update, metadata, context)
    return metadata, context.has_changes()


def apply_updates(base, updates, metadata_location: str):
    """pyiceberg's `update_table_metadata` for an existing table, without its closing deep copy."""
    metadata, changed = staged(base, updates)
    if changed:
        metadata = _update_table_metadata_log(metadata, metadata_location, base.last_updated_ms)
        if base.last_updated_ms == metadata.last_updated_ms:
            metadata = metadata.model_copy(update={"last_updated_ms": datetime_to_millis(datetime.now().astimezone())})
    metadata.spec().check_compatible(metadata.schema())
    metadata.sort_order().check_compatible(metadata.schema())
    return metadata


class StagedTransaction(Transaction):
    """A pyiceberg Transaction whose staged view of the metadata is built once per staged state.

    pyiceberg re-applies every staged update to a deep copy of the whole table
    metadata each time the transaction's metadata is read, ~15 times for one
    fast append: ~60% of a commit's CPU here (cProfile, scripts/bench_commit.py).
    The staged view is only read, so it is applied once, without the deep copy;
    the catalog still builds and validates the committed metadata itself. Every
    commit of ours goes through it: the job's appends (catalog/commit.py), snapshot
    expiry (catalog/expiry.py) and compaction's replace (maintenance/compaction.py).
    """

    _view = None
    _view_key: tuple = ()

    @property
    def table_metadata(self):
        key = (id(self._table.metadata), len(self._updates))
        if self._view is None or self._view_key != key:
            self._view, self._view_key = staged(self._table.metadata, self._updates)[0], key
        return self._view


@dataclass
class StagedCommit:
    """A commit of one table staged up to its swap (SqlCatalog.stage_commit)."""

    table: Table
    base_location: str
    metadata: Any  # the new TableMetadata (the base's when nothing changed)
    location: str  # its metadata file, written


#: The compare-and-swap of one table's metadata location, built once (building the expression was
#: ~0.4 ms a table); its parameters name the row, the location it must still hold and the new one.
_SWAP = (update(IcebergTables)
         .where(IcebergTables.catalog_name == bindparam("catalog"),
                IcebergTables.table_namespace == bindparam("namespace"),
                IcebergTables.table_name == bindparam("table"),
                IcebergTables.metadata_location == bindparam("base"))
         .values(metadata_location=bindparam("location"), previous_metadata_location=bindparam("base")))


#: Set on every connection to a file SQLite catalog (per connection, unlike journal_mode).
SQLITE_CONNECTION_PRAGMAS = ("PRAGMA synchronous=NORMAL",)


def _on_sqlite_connect(dbapi_connection, _record) -> None:
    cursor = dbapi_connection.cursor()
    for pragma in SQLITE_CONNECTION_PRAGMAS:
        cursor.execute(pragma)
    cursor.close()


class SqlCatalog(_PyicebergSqlCatalog):
    """See the module docstring; created by `router.catalog.get_catalog` for `type: sql`."""

    def __init__(self, name: str, **properties: str):
        super().__init__(name, **properties)
        if self.engine.dialect.name == "sqlite" and self.engine.url.database not in (None, "", ":memory:"):
            event.listen(self.engine, "connect", _on_sqlite_connect)
            self.engine.dispose()  # connections pooled while pyiceberg created its tables lack the pragmas
            with self.engine.connect() as conn:  # persistent in the file; a no-op once set
                conn.exec_driver_sql("PRAGMA journal_mode=WAL")
        self._namespace_locations: TTLCache = TTLCache(maxsize=4096, ttl=NAMESPACE_TTL_SECONDS)
        self._namespace_lock = threading.Lock()

    def _row(self, identifier):
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        return (IcebergTables.catalog_name == self.name, IcebergTables.table_namespace == namespace,
                IcebergTables.table_name == Catalog.table_name_from(identifier))

    def current_location(self, identifier) -> str | None:
        """The table's metadata location in the catalog now (None: no such table)."""
        with self.engine.connect() as conn:
            return conn.execute(select(IcebergTables.metadata_location).where(*self._row(identifier))).scalar()

    def current_locations(self, identifiers) -> dict[tuple, str]:
        """Metadata locations of the tables in the catalog now, in one query (a table missing is left out)."""
        wanted = {(Catalog.namespace_to_string(Catalog.namespace_from(i)), Catalog.table_name_from(i)): i
                  for i in identifiers}
        if not wanted:
            return {}
        namespaces = sorted({ns for ns, _ in wanted})
        query = select(IcebergTables.table_namespace, IcebergTables.table_name, IcebergTables.metadata_location) \
            .where(IcebergTables.catalog_name == self.name, IcebergTables.table_namespace.in_(namespaces))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {wanted[(ns, name)]: location for ns, name, location in rows if (ns, name) in wanted}

    def refresh_tables(self, tables) -> list:
        """`refresh_table` of many cached handles with one query; returns the handles now current.
        A table the catalog no longer has, or whose new metadata cannot be read, is left out: the
        caller's per-table path meets the same error where it fails that table alone."""
        locations = self.current_locations([t.name() for t in tables])
        fresh = []
        for table in tables:
            location = locations.get(table.name())
            if location is None:
                continue
            try:
                self._move(table, location)
            except Exception:  # noqa: BLE001 - reported by the table's own refresh, not here
                continue
            fresh.append(table)
        return fresh

    def refresh_table(self, table) -> bool:
        """`Table.refresh` with one query and only new snapshots parsed; False when the table had not moved."""
        location = self.current_location(table.name())
        if location is None:
            raise NoSuchTableError(f"Table does not exist: {'.'.join(table.name())}")
        return self._move(table, location)

    def _move(self, table, location: str) -> bool:
        """Bring `table` to the metadata at `location` in place; False when it was there already."""
        if location == table.metadata_location:
            return False
        metadata = read_metadata(table.io, location, table.metadata)
        table._check_uuid(table.metadata, metadata)
        if metadata.properties != table.metadata.properties:  # the FileIO may depend on them
            table.io = self._load_file_io(metadata.properties, location)
        table.metadata, table.metadata_location = metadata, location
        return True

    _write_metadata = staticmethod(write_metadata)

    def create_table(self, identifier, schema, location: str | None = None,
                     partition_spec: PartitionSpec = UNPARTITIONED_PARTITION_SPEC,
                     sort_order: SortOrder = UNSORTED_SORT_ORDER, properties=EMPTY_DICT) -> Table:
        """pyiceberg's create_table with one cached namespace lookup and no read-back (module docstring)."""
        version = int(properties.get(TableProperties.FORMAT_VERSION, TableProperties.DEFAULT_FORMAT_VERSION))
        schema = self._convert_schema_if_needed(schema, version)
        namespace = Catalog.namespace_to_string(Catalog.namespace_from(identifier))
        table_name = Catalog.table_name_from(identifier)
        location = (location or self._default_location(namespace, table_name)).rstrip("/")
        metadata_location = load_location_provider(table_location=location, table_properties=properties) \
            .new_table_metadata_file_location()
        metadata = new_table_metadata(location=location, schema=schema, partition_spec=partition_spec,
                                      sort_order=sort_order, properties=properties)
        if metadata.format_version >= 3 and metadata.next_row_id is None:  # the spec: a new v3 table starts at 0
            metadata = metadata.model_copy(update={"next_row_id": 0})
        io = load_file_io(properties=self.properties, location=metadata_location)
        self._write_metadata(metadata, io, metadata_location)
        try:
            with self.engine.begin() as conn:
                conn.execute(insert(IcebergTables).values(**self._create_table_row(namespace, table_name,
                                                                                     metadata_location)))
        except IntegrityError:
            delete_quietly(io, [metadata_location])  # never referenced
            raise TableAlreadyExistsError(f"Table {namespace}.{table_name} already exists") from None
        return Table(identifier=Catalog.identifier_to_tuple(namespace) + (table_name,), metadata=metadata,
                     metadata_location=metadata_location,
                     io=self._load_file_io(metadata.properties, metadata_location), catalog=self)

    def _default_location(self, namespace: str, table_name: str) -> str:
        """pyiceberg's default table location (the namespace's `location`, else the warehouse);
        raises NoSuchNamespaceError as pyiceberg does."""
        with self._namespace_lock:
            namespace_location = self._namespace_locations.get(namespace)
        if namespace_location is None:
            namespace_location = self.load_namespace_properties(namespace).get(LOCATION, "")
            with self._namespace_lock:
                self._namespace_locations[namespace] = namespace_location
        if namespace_location:
            return f"{namespace_location.rstrip('/')}/{table_name}"
        if warehouse := self.properties.get(WAREHOUSE_LOCATION):
            return f"{warehouse.rstrip('/')}/{namespace}/{table_name}"
        raise ValueError("No default path is set, please specify a location when creating a table")

    def update_namespace_properties(self, namespace, removals=None, updates=EMPTY_DICT):
        self._forget_namespace(namespace)
        return super().update_namespace_properties(namespace, removals, updates)

    def drop_namespace(self, namespace) -> None:
        self._forget_namespace(namespace)
        super().drop_namespace(namespace)

    def _forget_namespace(self, namespace) -> None:
        with self._namespace_lock:
            self._namespace_locations.pop(Catalog.namespace_to_string(namespace), None)

    def commit_table(self, table, requirements, updates) -> CommitTableResponse:
        if not self.stages_commits(table, requirements):
            return super().commit_table(table, requirements, updates)
        staged_commit = self.stage_commit(table, requirements, updates)
        if staged_commit.location == staged_commit.base_location or self.swap_staged([staged_commit])[0]:
            return CommitTableResponse(metadata=staged_commit.metadata, metadata_location=staged_commit.location)
        self.forget_staged(staged_commit)  # never referenced: the table moved under us
        response = super().commit_table(table, requirements, updates)
        self._delete_dropped_by_fallback(table.io, response.metadata)
        return response

    def stages_commits(self, table, requirements=()) -> bool:
        """Whether a commit of `table` can be staged and swapped here (else pyiceberg's own path)."""
        return (table.metadata_location is not None and self.engine.dialect.supports_sane_rowcount
                and not any(isinstance(r, AssertCreate) for r in requirements))

    def stage_commit(self, table, requirements, updates) -> StagedCommit:
        """A commit up to its swap: requirements checked on the caller's metadata, updates applied and
        the new metadata file written (location == base_location: nothing changed, nothing to swap)."""
        base, base_location = table.metadata, table.metadata_location
        for requirement in requirements:
            requirement.validate(base)
        metadata = apply_updates(base, updates, base_location)
        if metadata is base:
            return StagedCommit(table, base_location, base, base_location)
        version = self._parse_metadata_version(base_location) + 1
        location = load_location_provider(metadata.location, metadata.properties) \
            .new_table_metadata_file_location(version)
        self._write_metadata(metadata=metadata, io=table.io, metadata_path=location)
        return StagedCommit(table, base_location, metadata, location)

    def swap_staged(self, staged_commits) -> list[bool]:
        """Compare-and-swap the metadata location of every staged commit in one catalog transaction
        (one round trip to commit, one log write, for all the tables a task wrote); True where the
        table still stood at its base. A table that moved meanwhile is left unchanged and the
        others are swapped all the same. Rows are updated in name order, so two committers of
        overlapping tables lock them in one order (no deadlock on PostgreSQL). An error (catalog
        unreachable) raises: nothing was swapped, or, when it failed while committing, nobody
        knows; the caller's staged metadata files then stay where they are."""
        swapped = [s.location == s.base_location for s in staged_commits]
        order = sorted((i for i, done in enumerate(swapped) if not done), key=lambda i: staged_commits[i].table.name())
        if not order:
            return swapped
        with self.engine.begin() as conn:
            for i in order:
                s = staged_commits[i]
                identifier = s.table.name()
                swapped[i] = conn.execute(_SWAP, {
                    "catalog": self.name, "namespace": Catalog.namespace_to_string(Catalog.namespace_from(identifier)),
                    "table": Catalog.table_name_from(identifier), "base": s.base_location, "location": s.location,
                }).rowcount == 1
        return swapped

    @staticmethod
    def forget_staged(staged_commit: StagedCommit) -> None:
        """Delete the metadata file of a staged commit that lost its swap (nothing references it)."""
        if staged_commit.location != staged_commit.base_location:
            delete_quietly(staged_commit.table.io, [staged_commit.location])

    def _delete_dropped_by_fallback(self, io, metadata) -> None:
        """The caller cleans up from its stale base, so files the table dropped since it was read are
        left over: read the commit's real base (the last entry of the new log) and clean up from it."""
        if not metadata.metadata_log:
            return
        try:
            base = FromInputFile.table_metadata(io.new_input(metadata.metadata_log[-1].metadata_file))
        except FileNotFoundError:  # another committer already moved on and removed it
            return
        self._delete_old_metadata(io, base, metadata)

    @staticmethod
    def _delete_old_metadata(io, base, metadata) -> None:
        """pyiceberg's clean-up of metadata files past ``previous-versions-max``, quiet about files that
        are already gone: every committer of a fan-in table removes the same old files, and all but
        the first found nothing left to do (pyiceberg warned once per file and commit)."""
        if not property_as_bool(metadata.properties, TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED,
                                TableProperties.METADATA_DELETE_AFTER_COMMIT_ENABLED_DEFAULT):
            return
        kept = {entry.metadata_file for entry in metadata.metadata_log}
        delete_quietly(io, {entry.metadata_file for entry in base.metadata_log} - kept)
