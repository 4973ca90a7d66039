"""Tables Java Iceberg made, written on by the job: users point icerouter at tables their Spark jobs made.

Spark 3.5 SQL creates two format-version 2 tables in a Hadoop catalog on a local warehouse, inserts,
and runs a merge-on-read MERGE that leaves position-delete files; pyiceberg's `register_table` puts
them into the job's catalog; the executor write path appends to one and upserts into the other
(identifier fields set by Java); Java, DuckDB and pyiceberg then read the same rows.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json

import pytest
from pyiceberg.catalog import load_catalog

import router.cli.demo_data as data
from router.catalog import load_table
from router.catalog.snapshot_files import live_delete_files, snapshot_files
from router.config import CatalogConfig
from tests.javaref.client import assert_readers_agree
from tests.router.executor.test_partition import make_dispatcher, run_batch, source_batch

pytestmark = pytest.mark.slow

ROW = {"type": "record", "name": "Row", "namespace": "javaref", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "region", "type": ["null", "string"], "default": None},
    {"name": "amount", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}],
     "default": None},
    {"name": "at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": None},
    {"name": "note", "type": ["null", "string"], "default": None},  # a column the Java tables lack
]}
MOR = ("'format-version'='2', 'write.delete.mode'='merge-on-read', 'write.update.mode'='merge-on-read', "
       "'write.merge.mode'='merge-on-read'")


def _java_table(java, ns: str, name: str, keyed: bool) -> None:
    table = f"javaref.{ns}.{name}"
    java.sql(
        f"CREATE TABLE {table} (id bigint NOT NULL, name string, region string, amount decimal(10,2), at timestamp) "
        f"USING iceberg PARTITIONED BY (region) TBLPROPERTIES ({MOR})",
        *([f"ALTER TABLE {table} SET IDENTIFIER FIELDS id"] if keyed else []),
        f"INSERT INTO {table} SELECT id, concat('java-', id), IF(id % 2 = 0, 'eu', 'us'), "
        f"CAST(id * 1.25 AS decimal(10,2)), TIMESTAMP '2026-01-01 00:00:00' + make_interval(0, 0, 0, 0, id) "
        f"FROM range(1, 21)",
        f"MERGE INTO {table} t USING (SELECT id, id % 3 = 0 AS gone FROM range(1, 11)) s ON t.id = s.id "
        f"WHEN MATCHED AND s.gone THEN DELETE WHEN MATCHED THEN UPDATE SET t.name = concat('merged-', s.id)")


def _register(java, catalog, ns: str, name: str):
    metadata = sorted((java.warehouse_path(ns, name) / "metadata").glob("v*.metadata.json"),
                      key=lambda p: int(p.name[1:].split(".")[0]))[-1]
    catalog.create_namespace_if_not_exists(ns)
    return catalog.register_table(f"{ns}.{name}", metadata.as_uri())


def _row(i: int, tag: str) -> dict:
    return {"id": i, "name": f"{tag}-{i}", "region": ("eu", "us")[i % 2], "amount": decimal.Decimal(f"{i}.50"),
            "at": dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc) + dt.timedelta(hours=i), "note": tag}


def test_tables_java_made_take_appends_and_upserts_and_java_reads_them(java_reader, tmp_path, registry_url,
                                                                       unique_name):
    ns = unique_name("jw")
    for name, keyed in (("events", False), ("customers", True)):
        _java_table(java_reader, ns, name, keyed)
    config = CatalogConfig(unique_name("c"), {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                                              "warehouse": (tmp_path / "wh").as_uri()})
    catalog = load_catalog(config.name, **config.properties)
    tables = {name: _register(java_reader, catalog, ns, name) for name in ("events", "customers")}
    java_rows = {name: assert_readers_agree(java_reader, t) for name, t in tables.items()}
    assert len(java_rows["events"]) == 17 and live_delete_files(tables["events"], snapshot_files(tables["events"]))

    encode = data.Encoder(ROW, data.register(registry_url, f"{ns}.rows-value", ROW))
    dispatcher = make_dispatcher(config, registry_url, ns, [
        {"name": "events", "topic": rf"{ns}\.events", "table": f"{ns}.events"},
        {"name": "customers", "topic": rf"{ns}\.customers", "table": f"{ns}.customers", "mode": "upsert",
         "key": ["id"]}])
    records = [(f"{ns}.events", 0, i, encode(_row(100 + i, "appended")), None) for i in range(5)]
    records += [(f"{ns}.customers", 0, i, encode(_row(i, "upserted")), None) for i in (2, 3, 4, 11, 30)]
    _, report = run_batch(dispatcher, [source_batch(records)])
    assert not report.failed and not [o for o in report.outcomes if o.status == "failed"], report.outcomes

    events = [json.loads(r) for r in assert_readers_agree(java_reader, load_table(config, f"{ns}.events"))]
    assert len(events) == 22 and sum(r["note"] == "appended" for r in events) == 5
    rows = [json.loads(r) for r in assert_readers_agree(java_reader, load_table(config, f"{ns}.customers"))]
    customers = {r["id"]: r for r in rows}
    assert len(customers) == len(rows), "a key holds more than one live row"
    # ids 1..20 less 3, 6, 9 (Java's MERGE), 3 and 30 inserted by the upsert, 2, 4 and 11 replaced
    assert sorted(customers) == sorted({*range(1, 21)} - {6, 9} | {30})
    assert {i: customers[i]["name"] for i in (1, 2, 3, 4, 5, 11, 12)} == {
        1: "merged-1", 2: "upserted-2", 3: "upserted-3", 4: "upserted-4", 5: "merged-5", 11: "upserted-11",
        12: "java-12"}
