"""The SQL catalog that commits on the caller's metadata (router/catalog/sql.py), on SQLite and
PostgreSQL: the same table as pyiceberg's SqlCatalog would make, a stale caller still served by
pyiceberg's path, and refreshes that skip the metadata read when the table did not move."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pyarrow as pa
import pytest
from pyiceberg.catalog.sql import SqlCatalog as PyicebergSqlCatalog
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, get_catalog, load_table
from router.catalog.sql import SqlCatalog
from router.config import CatalogConfig
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def rows(first: int, count: int) -> pa.Table:
    ids = list(range(first, first + count))
    return pa.table({"id": pa.array(ids, pa.int64()), "body": pa.array([f"row {i}" for i in ids])})


def metadata_files(table) -> set[str]:
    return {p.name for p in Path(table.location().removeprefix("file://"), "metadata").glob("*.metadata.json")}


def test_sql_configs_get_our_catalog_and_others_do_not(catalog_config, tmp_path):
    assert type(get_catalog(catalog_config)) is SqlCatalog
    untyped = CatalogConfig("untyped", {"uri": catalog_config.properties["uri"],
                                        "warehouse": catalog_config.properties["warehouse"]})
    assert type(untyped.load(sql_impl="router.catalog.sql.SqlCatalog")) is SqlCatalog
    assert type(catalog_config.load()) is PyicebergSqlCatalog  # without the hint: pyiceberg's own


def test_appends_match_pyiceberg_and_read_back(catalog_config, unique_name):
    ns = unique_name("n")
    ours = create_table(catalog_config, f"{ns}.ours", SCHEMA)
    theirs = catalog_config.load().create_table(f"{ns}.theirs", schema=SCHEMA)
    for batch in range(3):
        ours.append(rows(batch * 5, 5))
        theirs.append(rows(batch * 5, 5))
        for table in (ours, theirs):
            with table.transaction() as tx:
                tx.set_properties({"batch": str(batch)})
    for table in (ours, theirs):
        fresh = catalog_config.load().load_table(table.name())  # pyiceberg reads what we committed
        assert fresh.metadata_location == table.metadata_location
        assert len(fresh.metadata.snapshots) == 3 and len(fresh.metadata.metadata_log) == 6
        assert fresh.properties["batch"] == "2"
        assert sorted(read_iceberg(fresh).column("id").to_pylist()) == list(range(15))
    a, b = (catalog_config.load().load_table(t.name()).metadata for t in (ours, theirs))
    assert [s.summary.additional_properties for s in a.snapshots] == [s.summary.additional_properties
                                                                       for s in b.snapshots]
    assert a.last_updated_ms >= a.snapshots[-1].timestamp_ms


def test_a_stale_caller_falls_back_to_pyiceberg_and_leaves_no_orphan(catalog_config, unique_name):
    name = f"{unique_name('n')}.t"
    create_table(catalog_config, name, SCHEMA)
    first = get_catalog(catalog_config).load_table(name)
    stale = get_catalog(catalog_config).load_table(name)
    first.append(rows(0, 3))
    before = metadata_files(first)

    with pytest.raises(CommitFailedException):  # an append on an old snapshot is refused, as by pyiceberg
        stale.append(rows(10, 3))
    assert metadata_files(first) == before  # the file written for the lost swap was removed

    with stale.transaction() as tx:
        tx.set_properties({"owner": "ops"})  # no requirement on the base: pyiceberg applies it to the current table
    current = catalog_config.load().load_table(name)
    assert current.properties["owner"] == "ops" and len(current.metadata.snapshots) == 1
    assert len(metadata_files(first)) == len(before) + 1
    assert sorted(read_iceberg(current).column("id").to_pylist()) == [0, 1, 2]


def test_committers_of_one_table_clean_up_old_metadata_without_warnings(catalog_config, unique_name, caplog):
    """Two handles on one table (a fan-in table's tasks): the second's clean-up finds files the first removed."""
    name = f"{unique_name('n')}.t"
    create_table(catalog_config, name, SCHEMA)
    table = get_catalog(catalog_config).load_table(name)
    with table.transaction() as tx:
        tx.set_properties({"write.metadata.previous-versions-max": "1"})
    other = get_catalog(catalog_config).load_table(name)
    for batch in range(3):
        table.append(rows(batch * 3, 3))
    caplog.set_level(logging.DEBUG)
    with other.transaction() as tx:  # its base still lists metadata files the appends removed
        tx.set_properties({"owner": "ops"})
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
    current = catalog_config.load().load_table(name)
    assert current.properties["owner"] == "ops"
    kept = {Path(e.metadata_file).name for e in current.metadata.metadata_log}
    assert metadata_files(current) == kept | {Path(current.metadata_location).name} and len(kept) == 1
    assert sorted(read_iceberg(current).column("id").to_pylist()) == list(range(9))


def test_refresh_reads_metadata_only_when_the_table_moved(catalog_config, unique_name):
    name = f"{unique_name('n')}.t"
    create_table(catalog_config, name, SCHEMA)
    cached = load_table(catalog_config, name, refresh=True)
    metadata = cached.metadata
    assert get_catalog(catalog_config).current_location(name) == cached.metadata_location
    assert load_table(catalog_config, name, refresh=True).metadata is metadata  # unchanged: no read

    catalog_config.load().load_table(name).append(rows(0, 4))  # another process commits
    refreshed = load_table(catalog_config, name, refresh=True)
    assert refreshed.metadata is not metadata and len(refreshed.metadata.snapshots) == 1
    assert get_catalog(catalog_config).current_location(name) == refreshed.metadata_location
    assert get_catalog(catalog_config).current_location(f"{name}_missing") is None


def test_one_query_refreshes_every_cached_handle_a_task_wrote(catalog_config, unique_name):
    from router.catalog.tables import refresh_cached

    ns, other_ns = unique_name("n"), unique_name("m")
    names = [f"{ns}.a", f"{ns}.b", f"{other_ns}.c"]
    for name in names:
        create_table(catalog_config, name, SCHEMA)
    cached = {name: load_table(catalog_config, name) for name in names}
    before = {name: t.metadata for name, t in cached.items()}
    catalog_config.load().load_table(names[0]).append(rows(0, 4))  # another process commits a and c
    catalog_config.load().load_table(names[2]).append(rows(4, 2))

    fresh = refresh_cached(catalog_config, names + [f"{ns}.never_loaded"])

    assert fresh == set(names)  # a handle this process never loaded is left to load_table
    assert cached[names[1]].metadata is before[names[1]]  # did not move: nothing read
    for name, count in ((names[0], 4), (names[2], 2)):
        assert cached[name].metadata_location == catalog_config.load().load_table(name).metadata_location
        assert read_iceberg(cached[name]).num_rows == count
    catalog_config.load().drop_table(names[1])
    assert refresh_cached(catalog_config, names) == {names[0], names[2]}  # gone: the caller's path raises
    # a table whose new metadata cannot be read is left out too (its own refresh fails it alone)
    writer = catalog_config.load().load_table(names[2])
    writer.append(rows(6, 1))
    os.remove(writer.metadata_location.removeprefix("file://"))
    assert refresh_cached(catalog_config, names) == {names[0]}
    with pytest.raises(FileNotFoundError):
        load_table(catalog_config, names[2], refresh=True)


def test_a_sqlite_catalog_file_uses_write_ahead_logging_without_an_fsync_per_commit(tmp_path):
    import sqlite3

    config = CatalogConfig("wal", {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                   "warehouse": (tmp_path / "wh").as_uri()})
    create_table(config, "n.t", SCHEMA).append(rows(0, 2))
    with sqlite3.connect(tmp_path / "c.db") as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    engine = get_catalog(config).engine
    engine.dispose()
    for _ in range(2):  # a new connection, then one from the pool: both skip the fsync per commit
        with engine.connect() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL (FULL is 2)
    theirs = config.load().load_table("n.t")  # pyiceberg's own class reads the WAL-mode file too
    assert sorted(read_iceberg(theirs).column("id").to_pylist()) == [0, 1]


class StatementCounter:
    """Counts the SQL statements an engine runs (sqlalchemy's own event hook)."""

    def __init__(self, engine):
        from sqlalchemy import event

        self.statements: list[str] = []
        event.listen(engine, "before_cursor_execute", self._seen)

    def _seen(self, conn, cursor, statement, *args):
        if not statement.lstrip().upper().startswith("PRAGMA"):
            self.statements.append(statement)


def test_created_tables_equal_pyiceberg_s_and_skip_the_repeated_lookups(catalog_config, unique_name):
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import BucketTransform

    ns = unique_name("n")
    spec = PartitionSpec(PartitionField(1, 1000, BucketTransform(4), "id_bucket"))
    props = {"format-version": "2", "owner": "router"}
    catalog = get_catalog(catalog_config)
    counter = StatementCounter(catalog.engine)
    ours = create_table(catalog_config, f"{ns}.first", SCHEMA, partition_by=["bucket(4, id)"],
                        properties={"owner": "router"})
    theirs = catalog_config.load().create_table(f"{ns}.theirs", schema=SCHEMA, partition_spec=spec, properties=props)
    for table in (ours,):
        read_back = catalog_config.load().load_table(table.name())  # what pyiceberg reads from the catalog
        assert read_back.metadata_location == table.metadata_location
        assert read_back.metadata.model_dump() == table.metadata.model_dump()  # nothing differs from disk
    assert ours.location() == theirs.location().replace("/theirs", "/first")
    assert ours.schema() == theirs.schema() and ours.spec() == theirs.spec()

    counter.statements.clear()
    second = create_table(catalog_config, f"{ns}.second", SCHEMA)
    # one INSERT: the namespace is known to this process and its location cached
    assert [s.split()[0].upper() for s in counter.statements] == ["INSERT"]
    second.append(rows(0, 3))
    assert sorted(read_iceberg(catalog_config.load().load_table(f"{ns}.second")).column("id").to_pylist()) == [0, 1, 2]


def test_a_table_created_twice_raises_and_leaves_no_metadata_file(catalog_config, unique_name):
    from pyiceberg.exceptions import TableAlreadyExistsError

    name = f"{unique_name('n')}.t"
    table = create_table(catalog_config, name, SCHEMA)
    before = metadata_files(table)
    with pytest.raises(TableAlreadyExistsError, match=name):
        get_catalog(catalog_config).create_table(name, schema=SCHEMA)
    assert metadata_files(table) == before
    assert create_table(catalog_config, name, SCHEMA).metadata_location == table.metadata_location  # theirs, loaded


def test_namespace_location_changes_and_drops_are_seen(catalog_config, unique_name, tmp_path):
    ns = unique_name("n")
    catalog = get_catalog(catalog_config)
    create_table(catalog_config, f"{ns}.a", SCHEMA)
    elsewhere = (tmp_path / "elsewhere").as_uri()
    catalog.update_namespace_properties(ns, updates={"location": elsewhere})
    moved = create_table(catalog_config, f"{ns}.b", SCHEMA)
    assert moved.location() == f"{elsewhere}/b"

    # dropped and gone: the next creation makes the namespace again
    for name in ("a", "b"):
        catalog.drop_table(f"{ns}.{name}")
    catalog.drop_namespace(ns)
    again = create_table(catalog_config, f"{ns}.c", SCHEMA)
    assert ns in {".".join(n) for n in catalog_config.load().list_namespaces()}
    assert again.location().endswith(f"/{ns}/c") and not again.location().startswith(elsewhere)
