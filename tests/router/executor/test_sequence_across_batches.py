"""sequence_by across batches: the stored row's sequence value decides, so a stale change that arrives
in a later batch (fan-in of two CDC topics into one table, interleaved across batches) never overwrites
or deletes a newer row. Over the catalog grid, read back by DuckDB and pyiceberg."""

from __future__ import annotations

import datetime as dt

import pytest

import router.cli.demo_cdc as cdc
from router.catalog import load_table
from tests.router.executor.test_partition import make_dispatcher, run_batch
from tests.router.executor.test_upsert import (  # noqa: F401
    catalog_config, kafka_batch, live_rows, manifests_hold_no_equality_deletes,
)
from tests.router.executor.test_unframed_writes import duck


def row(key: int, version: int) -> dict:
    return {"id": key, "name": f"customer {key} v{version}", "email": None, "tier": "pro", "region": "eu",
            "updated_at": dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=version)}


def event(op: str, key: int, lsn: int, before: int | None, after: int | None) -> cdc.Event:
    envelope = {"before": row(key, before) if before else None, "after": row(key, after) if after else None,
                "op": op, "ts_ms": 1_700_000_000_000 + lsn,
                "source": {"connector": "postgresql", "db": "shop", "table": "customers", "lsn": lsn,
                           "ts_ms": 1_700_000_000_000 + lsn}}
    return cdc.Event({"id": key}, envelope, op)


class Topics:
    """Two Debezium topics of one partition each, as the JSON converter writes them."""

    def __init__(self):
        self.encode = cdc.DebeziumJsonEncoder(schemas=True)
        self.next: dict[str, int] = {}

    def batch(self, *items: tuple[str, cdc.Event]):
        records = []
        for topic, e in items:
            offset = self.next.get(topic, 0)
            self.next[topic] = offset + 1
            _, key, value, _ = self.encode(topic, e)
            records.append((topic, 0, offset, key, value))
        return [kafka_batch([r for r in records if r[0] == t]) for t in sorted({r[0] for r in records})]


@pytest.mark.parametrize("sequence_by", ["source.lsn", "ts_ms"])
def test_a_stale_change_in_a_later_batch_never_overwrites_a_newer_row(catalog_config, registry_url, unique_name,
                                                                     sequence_by):
    ns = unique_name("sq")
    table = f"{ns}.customers"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "cdc", "topic": r"db[12]\.customers", "table": table, "cdc": "debezium", "format": "connect_json",
         "sequence_by": sequence_by}])
    t = Topics()
    batches = [
        t.batch(("db1.customers", event("c", 1, 10, None, 10)), ("db1.customers", event("c", 3, 11, None, 11))),
        # db2 lags: its update of key 1 is older than the row; key 2 is new
        t.batch(("db2.customers", event("u", 1, 5, 1, 5)), ("db2.customers", event("c", 2, 20, None, 20))),
        # a stale delete of key 2, and a newer update of key 3 beside a stale one in the same batch
        t.batch(("db1.customers", event("d", 2, 15, 15, None)), ("db1.customers", event("u", 3, 40, 11, 40)),
                ("db2.customers", event("u", 3, 12, 11, 12))),
        # newer: applies
        t.batch(("db1.customers", event("u", 1, 30, 10, 30))),
        # equal sequence read later: wins, as within a batch
        t.batch(("db2.customers", event("u", 1, 30, 30, 31))),
    ]
    expected = [
        {1: 10, 3: 11},
        {1: 10, 2: 20, 3: 11},
        {1: 10, 2: 20, 3: 40},
        {1: 30, 2: 20, 3: 40},
        {1: 31, 2: 20, 3: 40},
    ]
    for batch_id, (batch, want) in enumerate(zip(batches, expected)):
        results, report = run_batch(dispatcher, batch, batch_id)
        assert not report.failed, report.failed
        live = live_rows(catalog_config, table)
        assert {k: int(r[1].rsplit("v", 1)[1]) for k, r in live.items()} == want, f"after batch {batch_id}"
    handle = load_table(catalog_config, table, refresh=True)
    manifests_hold_no_equality_deletes(handle)
    assert "_change_sequence" in handle.schema().column_names
    stored = dict(duck(catalog_config, table, "_change_sequence", "id") and
                  [(r[1], r[0]) for r in duck(catalog_config, table, "_change_sequence", "id")])
    first = 1_700_000_000_000 if sequence_by == "ts_ms" else 0
    assert stored == {1: first + 30, 2: first + 20, 3: first + 40}


def test_an_upsert_table_orders_by_its_own_column_across_batches(catalog_config, registry_url, unique_name):
    """sequence_by naming a column of the table itself: no extra column, the stored value decides."""
    import json

    ns = unique_name("su")
    table = f"{ns}.prices"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "up", "topic": r"p[12]", "table": table, "mode": "upsert", "key": ["sku"], "format": "json",
         "sequence_by": "version"}])

    def batch(topic: str, first: int, docs: list[dict]):
        return [kafka_batch([(topic, 0, first + i, None, json.dumps(d).encode()) for i, d in enumerate(docs)])]

    run_batch(dispatcher, batch("p1", 0, [{"sku": "a", "price": 1.0, "version": 2}]), 0)
    run_batch(dispatcher, batch("p2", 0, [{"sku": "a", "price": 9.0, "version": 1},
                                          {"sku": "b", "price": 5.0, "version": 1}]), 1)
    run_batch(dispatcher, batch("p1", 1, [{"sku": "a", "price": 3.0, "version": 3}]), 2)
    got = sorted((r[1], r[0]) for r in duck(catalog_config, table, "price", "sku"))
    assert got == [("a", 3.0), ("b", 5.0)]
    assert "_change_sequence" not in load_table(catalog_config, table, refresh=True).schema().column_names
