"""Executor-side evolution across batches: a table that needs no change is not re-planned, and
what another writer does to the table's schema in between is still seen.

Real registry, real SQLite and PostgreSQL catalogs, DuckDB as the reader; the other writer
is a catalog object of its own (not the job's cached handles).
"""

from __future__ import annotations

from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.types import StringType

import router.cli.demo_data as data
from router.catalog import load_table
from router.executor import evolve
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch

__all__ = ["catalog_config"]  # the fixture, shared with test_partition


def written(report, table_id: str) -> int:
    return sum(o.rows for o in report.outcomes if o.table == table_id and o.status == "committed")


def other_writer(catalog_config) -> SqlCatalog:
    props = dict(catalog_config.properties)
    props.pop("type", None)
    return SqlCatalog(catalog_config.name, **props)  # same catalog, an instance of its own


def test_a_schema_changed_by_another_writer_is_evolved_again(catalog_config, registry_url, unique_name):
    ns = unique_name("e")
    topic = f"{ns}.orders"
    enc = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"}])
    table_id = f"{ns}.{ns}_orders"
    for batch_id in range(2):  # created, then settled: the second batch finds nothing to do
        results, report = run_batch(dispatcher, [source_batch(
            [(topic, 0, 3 * batch_id + i, enc(data.order(3 * batch_id + i)), None) for i in range(3)])], batch_id)
        assert not report.failed and written(report, table_id) == 3
    assert results[table_id].changes == []
    table = load_table(catalog_config, table_id)
    settled = [k for k in list(evolve._settled.keys()) if k[2] == table_id]
    assert settled and all(k[1] == table.metadata.current_schema_id for k in settled)

    # another writer drops a column the writer schema has, and adds one of its own
    with other_writer(catalog_config).load_table(table_id).update_schema() as update:
        update.delete_column("customer")
        update.add_column("remark", StringType())
    results, report = run_batch(dispatcher, [source_batch(
        [(topic, 0, 6 + i, enc(data.order(6 + i)), None) for i in range(3)])], 2)
    assert not report.failed and written(report, table_id) == 3
    assert any("customer" in change for change in results[table_id].changes)  # added back, under a new id
    rows = read(catalog_config, table_id, "id, customer, remark")
    assert [r[0] for r in rows] == list(range(9))
    assert [r[1] is None for r in rows] == [True] * 6 + [False] * 3  # the old column's values are gone
    assert all(r[2] is None for r in rows)


def test_a_type_changed_by_another_writer_changes_the_decision(catalog_config, registry_url, unique_name):
    """The writer schema's `id` is a long and was settled; once another writer makes the table's `id`
    a string, the same writer schema is a type change, and the policy (dlq) decides its records."""
    ns = unique_name("d")
    topic = f"{ns}.kinds"
    schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"},
                                                        {"name": "kind", "type": "string"}]}
    enc = data.Encoder(schema, data.register(registry_url, f"{topic}-value", schema))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\.kinds", "table": f"{ns}.kinds"}],
        evolution={"default": "evolve", "topics": {rf"{ns}\..*": {"type_change": "dlq"}}})
    table_id = f"{ns}.kinds"
    for batch_id in range(2):
        results, report = run_batch(dispatcher, [source_batch(
            [(topic, 0, 2 * batch_id + i, enc({"id": i, "kind": "a"}), None) for i in range(2)])], batch_id)
        assert written(report, table_id) == 2
    other = other_writer(catalog_config)
    with other.load_table(table_id).update_schema() as update:  # `id` becomes a string column
        update.rename_column("id", "old_id")
    with other.load_table(table_id).update_schema() as update:
        update.add_column("id", StringType())
    results, report = run_batch(dispatcher, [source_batch(
        [(topic, 0, 4 + i, enc({"id": 100 + i, "kind": "b"}), None) for i in range(3)])], 2)
    assert written(report, table_id) == 0 and results[table_id].dead_letters == 3
    assert [k for (k,) in read(catalog_config, table_id, "kind", order="1")] == ["a"] * 4
    letters = read(catalog_config, f"{ns}.dead_letters", "error_class, table_name", order="1")
    assert letters == [("evolution_violation", table_id)] * 3
