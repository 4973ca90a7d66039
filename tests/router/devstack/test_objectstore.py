"""SeaweedFS as the warehouse: S3 through pyiceberg's FileIO and its Iceberg REST catalog.

Every table written here is read back by DuckDB (httpfs + iceberg, offline wheels)
as well as by pyiceberg, and its objects are listed through the S3 API.
"""

from __future__ import annotations

import datetime as dt
import os
import tempfile

import pyarrow as pa
import pytest
from pyarrow.fs import FileSelector
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.exceptions import CommitFailedException

from router.config import CatalogConfig, parse_config
from router.devstack._proc import pid_alive
from router.devstack.objectstore import LocalObjectStore
from tests.duckdb_reader import read_iceberg_rows


def _data(start: int, n: int = 5) -> pa.Table:
    base = dt.datetime(2024, 3, 1, tzinfo=dt.timezone.utc)
    return pa.table({"id": pa.array(range(start, start + n), pa.int64()),
                     "ts": pa.array([base + dt.timedelta(days=i % 2) for i in range(n)], pa.timestamp("us", "UTC")),
                     "s": pa.array([f"v{i}" for i in range(start, start + n)], pa.string())})


def _objects(store: LocalObjectStore, prefix: str) -> list[str]:
    infos = store.filesystem().get_file_info(FileSelector(prefix, recursive=True))
    return sorted(i.path for i in infos if i.is_file)


def test_rest_catalog_writes_tables_into_s3_read_back_by_duckdb(object_store, rest_catalog, unique_name):
    ns = unique_name("s3")
    rest_catalog.create_namespace(ns)
    table = rest_catalog.create_table(f"{ns}.t", schema=_data(0).schema)
    table.append(_data(0))
    table.append(_data(5))

    loaded = rest_catalog.load_table(f"{ns}.t")
    assert loaded.location() == f"s3://{object_store.table_bucket}/{ns}/t"
    assert loaded.metadata_location.startswith(f"s3://{object_store.table_bucket}/{ns}/t/metadata/")
    expected = sorted(_data(0).to_pylist() + _data(5).to_pylist(), key=lambda r: r["id"])
    assert sorted(loaded.scan().to_arrow().to_pylist(), key=lambda r: r["id"]) == expected
    assert read_iceberg_rows(loaded, order_by="id") == expected  # a second reader, through httpfs
    data_files = {f.file.file_path.removeprefix("s3://") for f in loaded.scan().plan_files()}
    assert len(data_files) == 2 and data_files <= set(_objects(object_store, f"{object_store.table_bucket}/{ns}/t"))


def test_rest_catalog_rejects_a_stale_commit(rest_catalog, unique_name):
    ns = unique_name("race")
    rest_catalog.create_namespace(ns)
    first = rest_catalog.create_table(f"{ns}.t", schema=_data(0).schema,
                                      properties={"commit.retry.num-retries": "0"})
    second = rest_catalog.load_table(f"{ns}.t")
    first.append(_data(0))
    with pytest.raises(CommitFailedException):
        second.append(_data(100))  # its base snapshot is gone: the catalog answers 409
    assert [r["id"] for r in read_iceberg_rows(rest_catalog.load_table(f"{ns}.t"), order_by="id")] == list(range(5))


def test_sql_catalog_on_an_s3_warehouse_with_keys_from_the_environment(object_store, tmp_path, monkeypatch,
                                                                       unique_name):
    props = {k: v for k, v in object_store.s3_properties().items() if "key" not in k}
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", object_store.access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", object_store.secret_key)
    prefix = unique_name("wh")
    catalog = SqlCatalog("s3env", uri=f"sqlite:///{tmp_path}/c.db", warehouse=object_store.warehouse(prefix),
                         **props)
    catalog.create_namespace("ns")
    table = catalog.create_table("ns.t", schema=_data(0).schema)
    table.append(_data(0))
    assert read_iceberg_rows(catalog.load_table("ns.t"), order_by="id") == _data(0).to_pylist()
    location = catalog.load_table("ns.t").location()
    assert location.startswith(f"s3://{object_store.bucket}/{prefix}/"), location
    assert any(p.endswith(".parquet") for p in _objects(object_store, location.removeprefix("s3://")))

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")  # the server really checks signatures
    denied = SqlCatalog("s3env", uri=f"sqlite:///{tmp_path}/c.db", warehouse=object_store.warehouse(prefix), **props)
    with pytest.raises(OSError):
        denied.load_table("ns.t").append(_data(5))


def test_s3_and_rest_secrets_are_masked(object_store, monkeypatch):
    props = object_store.rest_catalog_properties()
    assert repr(CatalogConfig("lake", props)).count(object_store.secret_key) == 0
    monkeypatch.setenv("LAKE_SECRET", object_store.secret_key)
    config = parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["t"]},
                           "registry": {"url": "http://127.0.0.1:9"},
                           "catalog": {"name": "lake", "properties": {
                               **props, "s3.secret-access-key": "${LAKE_SECRET}",
                               "credential": f"{object_store.access_key}:${{LAKE_SECRET}}"}}})
    assert config.catalog.properties["s3.secret-access-key"] == object_store.secret_key
    assert object_store.secret_key not in repr(config) and object_store.secret_key not in repr(config.catalog)


def test_a_second_store_starts_on_its_own_ports_and_stops_without_leftovers(object_store):
    other = LocalObjectStore(tied_to_parent=True)
    other.start()
    try:
        assert set(other.ports.values()).isdisjoint(object_store.ports.values())
        fs = other.filesystem()
        with fs.open_output_stream(f"{other.bucket}/probe.txt") as out:
            out.write(b"hello")
        assert _objects(other, other.bucket) == [f"{other.bucket}/probe.txt"]
        assert _objects(object_store, object_store.bucket).count(f"{object_store.bucket}/probe.txt") == 0
        logs = os.listdir(os.path.join(other.data_dir, "logs"))
        assert any(name.startswith("weed.") for name in logs), logs  # its logs are its own
    finally:
        pid, data_dir, ports = other.pid, other.data_dir, other.ports
        other.stop()
    assert not pid_alive(pid)
    assert not os.path.exists(data_dir)
    # nothing of it is left in the machine's temp dir: no log files, no sockets
    tmp = tempfile.gettempdir()
    litter = [n for n in os.listdir(tmp) if (n.startswith("weed.") and n.endswith(f".{pid}"))
              or (n.startswith("seaweedfs-") and any(n.endswith(f"-{port}.sock") for port in ports.values()))]
    assert litter == [], litter
