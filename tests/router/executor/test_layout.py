"""Table layout on the executor write path (no Spark): sort order and partition spec evolution.

Real registry, real SQLite and PostgreSQL catalogs; the data files are read back with pyarrow,
the tables with DuckDB and pyiceberg. A changed configuration is a new dispatcher on the same
catalog, as a restarted job with the new file would be.
"""

from __future__ import annotations

import random

import pyarrow.parquet as pq
from pyiceberg.expressions import EqualTo

import router.cli.demo_data as data
from router.catalog import load_table
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch

__all__ = ["catalog_config"]  # the fixture, shared with test_partition

STEP = 9_000  # seconds between two orders' created_at: thirty orders span four days


def orders_batch(topic: str, enc, ids: list[int], first_offset: int):
    return source_batch([(topic, 0, first_offset + n, enc(data.order(i)), None) for n, i in enumerate(ids)])


def setup(catalog_config, registry_url, unique_name, prefix: str):
    ns = unique_name(prefix)
    topic = f"{ns}.orders"
    enc = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    return ns, topic, enc, f"{ns}.{ns}_orders"


def dispatcher_for(catalog_config, registry_url, ns: str, tables: dict | None = None, **route):
    return make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}", **route}],
        tables={"allowed_namespaces": [ns], **(tables or {})})


def live_files(table) -> list:
    return [task.file for task in table.scan().plan_files()]


def file_rows(table, data_file, columns: list[str]) -> list[dict]:
    with table.io.new_input(data_file.file_path).open() as stream:
        return pq.read_table(stream, columns=columns).to_pylist()


def sorted_by_customer_then_id_desc(rows: list[dict]) -> bool:
    keys = [(r["customer"], -r["id"]) for r in rows]
    return keys == sorted(keys)


def test_a_sorted_table_writes_files_sorted_within_themselves(catalog_config, registry_url, unique_name):
    ns, topic, enc, table_id = setup(catalog_config, registry_url, unique_name, "s")
    dispatcher = dispatcher_for(catalog_config, registry_url, ns, {"sort_by": ["customer", "id desc"]},
                                partition_by=["day(created_at)"])
    ids = [k * STEP for k in range(30)] + [k * STEP + 1 for k in range(30)]
    random.Random(7).shuffle(ids)
    results, report = run_batch(dispatcher, [orders_batch(topic, enc, ids, 0)])
    assert not report.failed
    assert results[table_id].changes == [f"created {table_id}"]
    table = load_table(catalog_config, table_id, refresh=True)
    order = table.metadata.sort_order()
    assert not order.is_unsorted and [str(f.direction) for f in order.fields] == ["ASC", "DESC"]
    files = live_files(table)
    assert len(files) == 4  # one per day
    for f in files:
        assert f.sort_order_id == table.metadata.default_sort_order_id
        rows = file_rows(table, f, ["customer", "id"])
        assert len(rows) > 1 and sorted_by_customer_then_id_desc(rows)
    assert sorted(r[0] for r in read(catalog_config, table_id, "id")) == sorted(ids)


def test_a_partition_spec_change_mid_stream_keeps_every_row_readable(catalog_config, registry_url, unique_name):
    ns, topic, enc, table_id = setup(catalog_config, registry_url, unique_name, "p")
    first = [k * STEP for k in range(20)]
    by_day = dispatcher_for(catalog_config, registry_url, ns, {"partition_by": ["day(created_at)"]})
    _, report = run_batch(by_day, [orders_batch(topic, enc, first, 0)], 0)
    assert not report.failed

    # the configuration now buckets by id: the table's spec evolves, the day files stay as they are
    by_bucket = dispatcher_for(catalog_config, registry_url, ns, {"partition_by": ["bucket(4, id)"]})
    second = [k * STEP + 5 for k in range(20)]
    results, report = run_batch(by_bucket, [orders_batch(topic, enc, second, 20)], 1)
    assert not report.failed
    assert results[table_id].changes == ["~ partition spec: day(created_at) -> bucket(4, id)"]

    table = load_table(catalog_config, table_id, refresh=True)
    specs = table.metadata.specs()
    assert len(specs) == 2 and table.metadata.default_spec_id == 1
    assert [f.name for f in specs[0].fields] == ["created_at_day"]
    assert [f.name for f in specs[1].fields] == ["id_bucket"]
    files = live_files(table)
    old = [f for f in files if f.spec_id == 0]
    new = [f for f in files if f.spec_id == 1]
    assert sum(f.record_count for f in old) == 20 and sum(f.record_count for f in new) == 20
    assert len(old) == 2 and len(new) <= 4  # 20 x 2.5 h: two days; four buckets at most
    for f in old:  # each old file still in its day partition, each new one in its bucket
        days = {r["created_at"].date() for r in file_rows(table, f, ["created_at"])}
        assert len(days) == 1
    for f in new:
        assert f.partition[0] in range(4)

    everything = sorted(first + second)
    assert sorted(r[0] for r in read(catalog_config, table_id, "id")) == everything  # DuckDB
    assert sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()) == everything
    # pyiceberg prunes with each file's own spec: a filter on the new partition source finds rows of both
    for i in (first[3], second[3]):
        assert table.scan(row_filter=EqualTo("id", i)).to_arrow().column("id").to_pylist() == [i]

    # the same configuration again: settled, nothing more to change
    results, report = run_batch(by_bucket, [orders_batch(topic, enc, [999_999], 40)], 2)
    assert not report.failed and results[table_id].changes == []


def test_a_frozen_layout_change_fails_the_table_with_one_line_naming_it(catalog_config, registry_url, unique_name):
    ns, topic, enc, table_id = setup(catalog_config, registry_url, unique_name, "f")
    _, report = run_batch(dispatcher_for(catalog_config, registry_url, ns, {"partition_by": ["day(created_at)"]}),
                          [orders_batch(topic, enc, [1, 2], 0)], 0)
    assert not report.failed
    frozen = dispatcher_for(catalog_config, registry_url, ns, {"partition_by": ["hour(created_at)"],
                                                               "sort_by": ["id"]},
                            evolution={"partition_change": "freeze"})  # the route's own policy
    results, _ = run_batch(frozen, [orders_batch(topic, enc, [3, 4], 2)], 1)
    reason = f"{table_id}: partition_change: partition spec day(created_at) -> hour(created_at)"
    assert results[table_id].failure == reason
    letters = read(catalog_config, f"{ns}.dead_letters", '"offset", error_class, reason', order='"offset"')
    assert letters == [(2, "evolution_frozen", reason), (3, "evolution_frozen", reason)]
    table = load_table(catalog_config, table_id, refresh=True)
    assert len(table.metadata.specs()) == 1 and table.metadata.sort_order().is_unsorted  # nothing applied
    assert sorted(r[0] for r in read(catalog_config, table_id, "id")) == [1, 2]
