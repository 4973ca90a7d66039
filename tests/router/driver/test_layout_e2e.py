"""A table's layout changed between runs of the real job: the `icerouter run` process, a real broker,
Spark, a PostgreSQL catalog, DuckDB and pyiceberg reading the table back.

Run 1 creates the table partitioned by region and sorted by id descending; run 2 reads a
configuration that buckets by id and sorts by region then id: the spec and the order evolve,
the first run's files stay in their spec and order, every row is read once. Run 3 freezes
partition changes and asks for another spec: the table is refused, its records dead-lettered
with one reason that names it, and the table keeps its layout.
"""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
import yaml
from confluent_kafka.admin import AdminClient, NewTopic

from router.catalog import load_table
from router.config import CatalogConfig
from tests.duckdb_reader import read_iceberg
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run
from tests.router.driver.test_unframed_e2e import produce

pytestmark = pytest.mark.slow

REGIONS = ("eu", "us", "apac")


def events(first: int, count: int) -> list[tuple[None, bytes]]:
    return [(None, json.dumps({"id": i, "region": REGIONS[i % 3], "amount": i * 1.5}).encode())
            for i in range(first, first + count)]


def file_rows(table, data_file) -> list[dict]:
    with table.io.new_input(data_file.file_path).open() as stream:
        return pq.read_table(stream, columns=["id", "region"]).to_pylist()


def test_the_job_evolves_partition_spec_and_sort_order(tmp_path, kafka_bootstrap, postgres_uri, unique_name):
    p = unique_name("ly")
    topic, table_id = f"{p}.events", f"{p}_t.events"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    props = {"type": "sql", "uri": postgres_uri, "warehouse": (tmp_path / "wh").as_uri()}
    catalog = CatalogConfig("ly", props)

    def run(tables: dict, evolution: dict | None = None):
        config = {
            "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic],
                      "client": {"receive.message.max.bytes": 1_000_000_000}},
            "catalog": {"name": "ly", "properties": props},
            "job": {"name": f"job_{p}", "checkpoint": str(tmp_path / "checkpoint"), "spark": LOCAL_SPARK},
            "tables": {"allowed_namespaces": [f"{p}_t", f"{p}_ops"], **tables},
            "routes": [{"name": "events", "topic": topic, "table": table_id, "format": "json"}],
            "dlq": {"table": f"{p}_ops.dead_letters"},
            **({"evolution": evolution} if evolution else {}),
        }
        path = tmp_path / "router.yaml"
        path.write_text(yaml.safe_dump(config))
        done = _run(path, "--available-now")
        assert done.returncode == 0, done.stderr[-3000:]
        return load_table(catalog, table_id, refresh=True)

    produce(kafka_bootstrap, [(topic, key, value) for key, value in events(0, 60)])
    table = run({"partition_by": ["identity(region)"], "sort_by": ["id desc"]})
    assert [f.name for f in table.spec().fields] == ["region"]
    first_files = [t.file for t in table.scan().plan_files()]
    assert {f.partition[0] for f in first_files} == set(REGIONS)
    for f in first_files:
        ids = [r["id"] for r in file_rows(table, f)]
        assert f.sort_order_id == 1 and ids == sorted(ids, reverse=True)

    produce(kafka_bootstrap, [(topic, key, value) for key, value in events(60, 60)])
    table = run({"partition_by": ["bucket(4, id)"], "sort_by": ["region", "id"]})
    assert table.metadata.default_spec_id == 1 and [f.name for f in table.spec().fields] == ["id_bucket"]
    order_id = table.metadata.default_sort_order_id
    assert order_id == 2
    files = [t.file for t in table.scan().plan_files()]
    old = [f for f in files if f.spec_id == 0]
    new = [f for f in files if f.spec_id == 1]
    assert {f.file_path for f in old} == {f.file_path for f in first_files}  # untouched, in their own spec
    assert sum(f.record_count for f in new) == 60
    for f in new:
        rows = file_rows(table, f)
        assert f.sort_order_id == order_id and rows == sorted(rows, key=lambda r: (r["region"], r["id"]))
    assert sorted(read_iceberg(table).column("id").to_pylist()) == list(range(120))
    assert sorted(table.scan().to_arrow().column("id").to_pylist()) == list(range(120))

    produce(kafka_bootstrap, [(topic, key, value) for key, value in events(120, 6)])
    table = run({"partition_by": ["truncate(2, region)"], "sort_by": ["region", "id"]},
                {"default": {"partition_change": "freeze"}})
    assert table.metadata.default_spec_id == 1 and len(table.metadata.specs()) == 2  # refused: unchanged
    assert sorted(read_iceberg(table).column("id").to_pylist()) == list(range(120))
    letters = read_iceberg(load_table(catalog, f"{p}_ops.dead_letters", refresh=True)).to_pylist()
    assert len(letters) == 6 and {r["error_class"] for r in letters} == {"evolution_frozen"}
    assert {r["reason"] for r in letters} == {
        f"{table_id}: partition_change: partition spec bucket(4, id) -> truncate(2, region)"}
