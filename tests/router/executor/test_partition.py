"""The executor write path without Spark: real registry, real catalogs, DuckDB as the reader.

`process_partition` receives Arrow batches with the Kafka source schema, exactly as
`mapInArrow` hands them over; the descriptors it returns are committed with the real
commit code. This covers routing by topic, header and field, table-name templates fed
by data, projections, dead letters and evolution policies in seconds.
"""

from __future__ import annotations

import datetime as dt
import json
import pickle

import random

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import router.cli.demo_data as data
from router.driver.commits import commit_all
from router.config import CatalogConfig, parse_config
from router.driver.dispatcher import Dispatcher
from router.source.schema import kafka_arrow_schema
from router.descriptors import STATS_ROW, TableResult
from router.executor.partition import ROWS_PER_SEGMENT, sort_by_topic
from router.executor.tasks import process_partition
from tests.duckdb_reader import connect

STRING_AMOUNT = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"}, {"name": "quantity", "type": "string"}]}


def source_batch(records: list[tuple]) -> pa.RecordBatch:
    """(topic, partition, offset, value, headers) -> a batch shaped like the Kafka source's."""
    schema = kafka_arrow_schema()
    now = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    cols = {
        "key": [None] * len(records), "value": [r[3] for r in records], "topic": [r[0] for r in records],
        "partition": [r[1] for r in records], "offset": [r[2] for r in records],
        "timestamp": [now] * len(records), "timestampType": [0] * len(records),
        "headers": [[{"key": k, "value": v} for k, v in (r[4] or [])] for r in records],
    }
    return pa.RecordBatch.from_pydict(cols, schema=schema)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name):
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path / 'catalog.db'}"
    else:
        uri = request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


def make_dispatcher(catalog_config, registry_url, ns, routes, **extra) -> Dispatcher:
    raw = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "pattern": ".*"},
           "registry": {"url": registry_url},
           "catalog": {"name": catalog_config.name, "properties": dict(catalog_config.properties)},
           "tables": {"allowed_namespaces": [ns, f"{ns}_eu", f"{ns}_us"]},
           "routes": routes, "dlq": {"table": f"{ns}.dead_letters"}, **extra}
    return Dispatcher(parse_config(raw))


def run_batch(dispatcher: Dispatcher, batches: list[pa.RecordBatch], batch_id: int = 0):
    ctx = dispatcher.context(batch_id)
    results: dict[str, TableResult] = {}
    for batch in batches:  # one call per Spark partition
        for out in process_partition(iter([batch]), ctx):
            for table, blob in zip(out.column("table").to_pylist(), out.column("descriptor").to_pylist()):
                if table == STATS_ROW:
                    continue
                result = pickle.loads(blob)
                results.setdefault(table, TableResult(table)).merge(result)
    # as the dispatcher does: the tasks committed what they could, the driver commits the rest
    report = commit_all(dispatcher.config.catalog, [r for r in results.values() if r.has_work],
                        dispatcher.config.job.name, batch_id)
    report.outcomes = [o for r in results.values() for o in r.commits] + report.outcomes
    return results, report


def read(catalog_config, table: str, columns: str = "*", order: str = "_kafka_offset") -> list[tuple]:
    from router.catalog import load_table

    location = load_table(catalog_config, table, refresh=True).metadata_location.removeprefix("file://")
    return connect().execute(f"SELECT {columns} FROM iceberg_scan('{location}') ORDER BY {order}").fetchall()


def test_routes_by_topic_header_field_and_dead_letters(catalog_config, registry_url, unique_name):
    ns = unique_name("p")
    topic, kinds = f"{ns}.orders", f"{ns}.kinds"
    enc = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    kind_schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"},
                                                             {"name": "kind", "type": "string"}]}
    kenc = data.Encoder(kind_schema, data.register(registry_url, f"{kinds}-value", kind_schema))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"},
        {"name": "region", "topic": rf"{ns}\.orders", "headers": {"region": "eu|us"},
         "table": f"{ns}_{{header.region}}.orders", "columns": ["id", "amount"]},
        {"name": "by-kind", "topic": rf"{ns}\.kinds", "fields": {"kind": ["click", "view"]},
         "table": f"{ns}.kind_{{field.kind}}"},
    ], tombstones="dlq")
    records = [(topic, 0, i, enc(data.order(i)), [("region", (b"eu", b"us")[i % 2])]) for i in range(10)]
    records += [
        (topic, 0, 10, b"not framed at all", None),                       # wire format
        (topic, 0, 11, data.frame(999_999, b"\x02"), None),                # unknown schema id
        (topic, 0, 12, enc(data.order(12))[:-7], None),                    # truncated
        (topic, 0, 13, None, None),                                         # tombstone -> dlq
        (topic, 0, 14, enc(data.order(14)), [("region", b"../x")]),        # header route: no match
    ]
    records += [(kinds, 1, i, kenc({"id": i, "kind": ("click", "view", "buy")[i % 3]}), None) for i in range(9)]
    records += [(f"{ns}.nobody", 0, 0, enc(data.order(0)), None)]          # unmatched -> dlq
    half = len(records) // 2
    results, report = run_batch(dispatcher, [source_batch(records[:half]), source_batch(records[half:])])

    assert not report.failed, report.failed
    assert [r[0] for r in read(catalog_config, f"{ns}.{ns}_orders", "id")] == list(range(10)) + [14]
    assert [r[0] for r in read(catalog_config, f"{ns}_eu.orders", "id")] == [0, 2, 4, 6, 8]
    us = read(catalog_config, f"{ns}_us.orders", "id, amount")
    assert [r[0] for r in us] == [1, 3, 5, 7, 9] and all(r[1] is not None for r in us)
    assert [r[0] for r in read(catalog_config, f"{ns}.kind_click", "id")] == [0, 3, 6]
    assert [r[0] for r in read(catalog_config, f"{ns}.kind_view", "id")] == [1, 4, 7]
    letters = read(catalog_config, f"{ns}.dead_letters", "topic, \"offset\", error_class, value", order='"offset"')
    by_offset = {(t, o): (cls, v) for t, o, cls, v in letters}
    assert by_offset[(topic, 10)] == ("wire_format", b"not framed at all")
    assert by_offset[(topic, 11)][0] == "schema_not_found"
    assert by_offset[(topic, 12)][0] == "decode_error"
    assert by_offset[(topic, 13)][0] == "tombstone"
    assert by_offset[(f"{ns}.nobody", 0)][0] == "unmatched"
    for offset in (2, 5, 8):  # kind "buy": the topic has a route, its fields filter takes none of them
        assert by_offset[(kinds, offset)][0] == "unmatched"
    assert len(letters) == 8


@pytest.mark.parametrize("unmatched", ["dlq", "drop"])
def test_a_record_no_routes_filter_takes_follows_unmatched(unmatched, catalog_config, registry_url, unique_name):
    """Routes with headers / fields filters on one topic: a record one of them takes is routed (fan-out
    included), a record none takes is a dead letter `unmatched` (or dropped), counted by reason."""
    ns = unique_name("u")
    topic = f"{ns}.kinds"
    schema = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"},
                                                        {"name": "kind", "type": "string"}]}
    enc = data.Encoder(schema, data.register(registry_url, f"{topic}-value", schema))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "clicks", "topic": rf"{ns}\.kinds", "fields": {"kind": ["click", "view"]}, "table": f"{ns}.clicks"},
        {"name": "eu", "topic": rf"{ns}\.kinds", "headers": {"region": "eu"}, "table": f"{ns}.eu"},
    ], unmatched=unmatched)
    kinds = ("click", "buy", "view", "buy")
    regions = (b"eu", b"us", b"us", b"eu")  # offset 1: buy from us, no route takes it; 3: buy from eu
    records = [(topic, 0, i, enc({"id": i, "kind": kinds[i % 4]}), [("region", regions[i % 4])]) for i in range(8)]
    records += [(topic, 0, 8, b"not framed", None)]  # a decode failure is its own letter, never also unmatched
    results, report = run_batch(dispatcher, [source_batch(records)])

    assert not report.failed, report.failed
    assert [r[0] for r in read(catalog_config, f"{ns}.clicks", "id")] == [0, 2, 4, 6]
    assert [r[0] for r in read(catalog_config, f"{ns}.eu", "id")] == [0, 3, 4, 7]  # 0 and 4 fan out to both
    letters = read(catalog_config, f"{ns}.dead_letters", "\"offset\", error_class, reason, value", order='"offset"')
    expected = [(8, "wire_format")] + ([(1, "unmatched"), (5, "unmatched")] if unmatched == "dlq" else [])
    assert sorted((o, cls) for o, cls, _, _ in letters) == sorted(expected)
    for offset, cls, reason, value in letters:
        if cls == "unmatched":
            assert reason == (f"no route's headers / fields filter takes this record of topic {topic!r} "
                              "(routes: clicks, eu)")
            assert value == records[offset][3]
    counted = results[f"{ns}.dead_letters"].reasons  # what the metrics count by reason
    assert counted == ({"wire_format": 1, "unmatched": 2} if unmatched == "dlq" else {"wire_format": 1})


def test_template_values_from_data_cannot_escape(catalog_config, registry_url, unique_name):
    ns = unique_name("t")
    topic = f"{ns}.events"
    enc = data.Encoder(data.CLICK, data.register(registry_url, f"{topic}-value", data.CLICK))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "tenant", "topic": rf"{ns}\.events", "table": "{header.tenant}.events"}])
    records = [(topic, 0, 0, enc(data.click(0)), [("tenant", f"{ns}_eu".encode())]),
               (topic, 0, 1, enc(data.click(1)), [("tenant", b"../x")]),
               (topic, 0, 2, enc(data.click(2)), [("tenant", b"other_db.t")]),
               (topic, 0, 3, enc(data.click(3)), [("tenant", b"not_allowed")]),
               (topic, 0, 4, enc(data.click(4)), None)]
    run_batch(dispatcher, [source_batch(records)])
    assert [r[0] for r in read(catalog_config, f"{ns}_eu.events", "id")] == [0]
    letters = read(catalog_config, f"{ns}.dead_letters", "\"offset\", error_class, reason", order='"offset"')
    assert [(o, c) for o, c, _ in letters] == [(1, "TableNameError"), (2, "TableNameError"),
                                               (3, "TableNameError"), (4, "TableNameError")]
    assert "not in tables.allowed_namespaces" in letters[2][2]


@pytest.mark.parametrize("mode, written, dead", [("dlq", 0, 3), ("discard_row", 0, 0),
                                                 ("discard_value", 3, 0), ("freeze", 0, 3)])
def test_incompatible_change_follows_policy_and_spares_other_tables(
        catalog_config, registry_url, unique_name, mode, written, dead):
    ns = unique_name("v")
    bad, good = f"{ns}.bad", f"{ns}.good"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{bad}-value", data.ORDER_V1))
    g = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{good}-value", data.ORDER_V1))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}],
        evolution={"default": "evolve", "topics": {rf"{ns}\.bad": {"type_change": mode}}})
    run_batch(dispatcher, [source_batch([(bad, 0, i, v1(data.order(i)), None) for i in range(3)])], 0)
    v3 = data.Encoder(STRING_AMOUNT, data.register(registry_url, f"{bad}-value-v3", STRING_AMOUNT))
    batch = [(bad, 0, 3 + i, v3({"id": 100 + i, "quantity": "many"}), None) for i in range(3)]
    batch += [(good, 0, i, g(data.order(i)), None) for i in range(4)]
    results, report = run_batch(dispatcher, [source_batch(batch)], 1)
    assert len(read(catalog_config, f"{ns}.{ns}_good", "id")) == 4  # the other table committed
    rows = read(catalog_config, f"{ns}.{ns}_bad", "id, quantity")
    assert len(rows) == 3 + written
    if mode == "discard_value":
        assert sorted(r for r in rows if r[0] >= 100) == [(100, None), (101, None), (102, None)]
    letters = read(catalog_config, f"{ns}.dead_letters", "error_class, table_name", order="1") if dead else []
    assert len(letters) == dead
    assert all(t == f"{ns}.{ns}_bad" for _, t in letters)
    assert (results[f"{ns}.{ns}_bad"].failure is not None) == (mode == "freeze")


def test_table_failing_three_batches_is_quarantined_to_the_dlq(catalog_config, registry_url, unique_name):
    ns = unique_name("q")
    sick, well = f"{ns}.sick", f"{ns}.well"
    enc = data.Encoder(data.CLICK, data.register(registry_url, f"{ns}-click-value", data.CLICK))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}])
    sick_table = f"{ns}.{ns}_sick"
    for _ in range(2):
        dispatcher.track_failures({sick_table: "CommitFailedException: boom"}, set())
    assert sick_table not in dispatcher.quarantined
    dispatcher.track_failures({}, {sick_table})  # a healthy batch resets the streak
    for _ in range(3):
        dispatcher.track_failures({sick_table: "CommitFailedException: boom"}, set())
    assert dispatcher.quarantined == {sick_table: "CommitFailedException: boom"}
    run_batch(dispatcher, [source_batch([(sick, 0, 0, enc(data.click(0)), None),
                                         (well, 0, 0, enc(data.click(1)), None)])])
    assert [r[0] for r in read(catalog_config, f"{ns}.{ns}_well", "id")] == [1]
    letters = read(catalog_config, f"{ns}.dead_letters", "topic, error_class, table_name", order="1")
    assert letters == [(sick, "quarantined", sick_table)]


NESTED_V1 = {"type": "record", "name": "Shipment", "fields": [
    {"name": "id", "type": "long"},
    {"name": "address", "type": {"type": "record", "name": "Addr", "fields": [{"name": "city", "type": "string"}]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
]}
NESTED_V2 = json.loads(json.dumps(NESTED_V1))
NESTED_V2["fields"][1]["type"]["fields"].append({"name": "country", "type": ["null", "string"], "default": None})
NESTED_V2["fields"][2]["type"]["items"]["fields"][1] = {"name": "qty", "type": "long"}
NESTED_V2["fields"][2]["type"]["items"]["fields"].append({"name": "gift", "type": ["null", "boolean"], "default": None})


def test_nested_fields_evolve_in_structs_and_list_elements(catalog_config, registry_url, unique_name):
    ns = unique_name("n")
    topic = f"{ns}.shipments"
    v1 = data.Encoder(NESTED_V1, data.register(registry_url, f"{topic}-value", NESTED_V1))
    v2 = data.Encoder(NESTED_V2, data.register(registry_url, f"{topic}-value", NESTED_V2))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}])
    old = {"id": 1, "address": {"city": "Oslo"}, "items": [{"sku": "a", "qty": 2}]}
    new = {"id": 2, "address": {"city": "Lima", "country": "PE"}, "items": [{"sku": "b", "qty": 5_000_000_000,
                                                                              "gift": True}]}
    run_batch(dispatcher, [source_batch([(topic, 0, 0, v1(old), None)])], 0)
    results, report = run_batch(dispatcher, [source_batch([(topic, 0, 1, v2(new), None)])], 1)
    assert not report.failed
    changes = results[f"{ns}.{ns}_shipments"].changes
    assert any("address.country" in c for c in changes) and any("gift" in c for c in changes)
    rows = read(catalog_config, f"{ns}.{ns}_shipments", "id, address, items", order="id")
    assert rows[0][1] == {"city": "Oslo", "country": None}
    assert rows[0][2] == [{"sku": "a", "qty": 2, "gift": None}]
    assert rows[1][1] == {"city": "Lima", "country": "PE"}
    assert rows[1][2] == [{"sku": "b", "qty": 5_000_000_000, "gift": True}]


def test_dead_letters_also_go_to_a_kafka_topic(tmp_path, registry_url, kafka_bootstrap, unique_name):
    from confluent_kafka import Consumer

    ns = unique_name("k")
    topic, dlq_topic = f"{ns}.orders", f"{ns}.dlq"
    catalog = CatalogConfig(ns, {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                 "warehouse": (tmp_path / "wh").as_uri()})
    enc = data.Encoder(data.CLICK, data.register(registry_url, f"{topic}-value", data.CLICK))
    dispatcher = Dispatcher(parse_config({
        "kafka": {"bootstrap_servers": kafka_bootstrap, "pattern": ".*"}, "registry": {"url": registry_url},
        "catalog": {"name": catalog.name, "properties": dict(catalog.properties)},
        "routes": [{"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}],
        "dlq": {"table": f"{ns}.dead_letters", "topic": dlq_topic}}))
    run_batch(dispatcher, [source_batch([(topic, 0, 0, enc(data.click(0)), None),
                                         (topic, 0, 1, b"not framed", [("trace", b"t-1")])])])
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": ns, "auto.offset.reset": "earliest"})
    consumer.subscribe([dlq_topic])
    try:
        msg = None
        for _ in range(60):
            msg = consumer.poll(1.0)
            if msg is not None and not msg.error():
                break
        assert msg is not None and msg.value() == b"not framed"
        headers = dict(msg.headers())
        assert headers["trace"] == b"t-1"
        assert headers["icerouter.error.class"] == b"wire_format"
        assert headers["icerouter.source"] == f"{topic}/0/1".encode()
    finally:
        consumer.close()
    assert len(read(catalog, f"{ns}.dead_letters", "value", order="1")) == 1


def partition_runs(runs: list[tuple[str, int, int, int]], rows_per_batch: int) -> list[pa.RecordBatch]:
    """(topic, partition, first offset, count) runs, laid out as a consumer hands them over, cut into batches."""
    records = [(t, p, o, b"%s/%d/%d" % (t.encode(), p, o), None) for t, p, first, n in runs
               for o in range(first, first + n)]
    return [source_batch(records[i:i + rows_per_batch]) for i in range(0, len(records), rows_per_batch)]


def row_sorted(table: pa.Table) -> list[tuple]:
    order = pc.sort_indices(table, sort_keys=[("topic", "ascending"), ("partition", "ascending"),
                                              ("offset", "ascending")])
    return list(zip(*(table.take(order).column(c).to_pylist() for c in ("topic", "partition", "offset", "value"))))


@pytest.mark.parametrize("layout", ["consumer runs", "in order", "record by record"])
def test_sort_by_topic_orders_rows_and_finds_each_topic_run(layout):
    # non-ASCII and upper-case names: runs come out in Arrow's (UTF-8 byte) order, as a row-level sort gives
    topics = ["orders.b", "Orders.a", "orders.é", "orders.a"]
    runs = [(t, p, first, 150) for t in topics for p in range(3) for first in (0, 150)]
    if layout == "consumer runs":
        random.Random(7).shuffle(runs)
    elif layout == "record by record":
        runs = [(t, p, o, 1) for o in range(300) for t in topics for p in range(3)]
    source = pa.Table.from_batches(partition_runs(runs, rows_per_batch=1000))  # runs span batch boundaries

    ordered, topic_runs = sort_by_topic(source)

    assert list(zip(*(ordered.column(c).to_pylist() for c in ("topic", "partition", "offset", "value")))) \
        == row_sorted(source)
    assert [(t, start, n) for t, start, n in topic_runs] == \
        [(t, i * 900, 900) for i, t in enumerate(sorted(topics, key=str.encode))]
    assert all(ordered.column(c).num_chunks == 1 for c in ordered.column_names)


def test_sort_by_topic_takes_the_row_sort_only_when_rows_interleave_finely(monkeypatch):
    row_sorts = []
    sort_indices = pc.sort_indices
    monkeypatch.setattr(pc, "sort_indices", lambda *a, **k: row_sorts.append(1) or sort_indices(*a, **k))
    fine = [(t, 0, o, 1) for o in range(128) for t in "ab"]                     # 256 segments of 1 row
    coarse = [(t, 0, o, ROWS_PER_SEGMENT) for o in (0, ROWS_PER_SEGMENT) for t in "ab"]  # 4 of 64
    for runs, sorted_by_row in ((fine, True), (coarse, False)):
        row_sorts.clear()
        ordered, topic_runs = sort_by_topic(pa.Table.from_batches(partition_runs(runs, 100)))
        assert bool(row_sorts) == sorted_by_row
        assert ordered.column("offset").to_pylist() == list(range(128)) * 2
        assert topic_runs == [("a", 0, 128), ("b", 128, 128)]
    empty = pa.Table.from_batches([], schema=kafka_arrow_schema())
    assert sort_by_topic(empty) == (empty, [])


def test_partition_runs_in_consumer_order_reach_every_table_once(catalog_config, registry_url, unique_name):
    ns = unique_name("s")
    names = [f"{ns}.t{i}" for i in range(3)]
    encoders = {t: data.Encoder(data.ORDER_V1, data.register(registry_url, f"{t}-value", data.ORDER_V1))
                for t in names}
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"},
        {"name": "all", "topic": rf"{ns}\..*", "table": f"{ns}.everything"}])
    runs = [(t, p, first, 100) for t in names for p in range(2) for first in (0, 100)]
    random.Random(3).shuffle(runs)
    records = [(t, p, o, encoders[t](data.order(o * 10 + p)), None) for t, p, first, n in runs
               for o in range(first, first + n)]
    batches = [source_batch(records[i:i + 500]) for i in range(0, len(records), 500)]
    results = {}
    for out in process_partition(iter(batches), dispatcher.context(0)):  # one task, several source batches
        for table, blob in zip(out.column("table").to_pylist(), out.column("descriptor").to_pylist()):
            if table != STATS_ROW:
                results[table] = pickle.loads(blob)
    report = commit_all(dispatcher.config.catalog, [r for r in results.values() if r.has_work],
                        dispatcher.config.job.name, 0)
    assert not report.failed, report.failed

    expected = {t: sorted((p, o) for p in range(2) for o in range(200)) for t in names}
    for t in names:
        got = read(catalog_config, f"{ns}.{t.replace('.', '_')}", "_kafka_partition, _kafka_offset, id",
                   order="_kafka_partition, _kafka_offset")
        assert [(p, o) for p, o, _ in got] == expected[t]
        assert [i for p, o, i in got] == [o * 10 + p for p, o in expected[t]]
    everything = read(catalog_config, f"{ns}.everything", "_kafka_topic, _kafka_partition, _kafka_offset",
                      order="1, 2, 3")
    assert everything == [(t, p, o) for t in names for p, o in expected[t]]


@pytest.mark.parametrize("mode", ["append", "upsert"])
def test_a_table_failing_at_write_dead_letters_its_rows_and_spares_the_others(mode, catalog_config, registry_url,
                                                                             unique_name):
    """A write-stage error that no retry mends (here: a Parquet codec the writer does not know) sends the
    table's rows of the batch to the dead-letter table with the error; the other table commits."""
    from router.catalog import load_table

    ns = unique_name("w")
    bad, good = f"{ns}.bad", f"{ns}.good"
    encoders = {t: data.Encoder(data.ORDER_V1, data.register(registry_url, f"{t}-value", data.ORDER_V1))
                for t in (bad, good)}
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}", "mode": mode,
         **({"key": ["id"]} if mode == "upsert" else {})}])
    run_batch(dispatcher, [source_batch([(t, 0, i, encoders[t](data.order(i)), None)
                                         for t in (bad, good) for i in range(3)])], 0)
    with load_table(catalog_config, f"{ns}.{ns}_bad", refresh=True).transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "no-such-codec"})
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}", "mode": mode,
         **({"key": ["id"]} if mode == "upsert" else {})}])
    results, report = run_batch(dispatcher, [source_batch([(t, 0, 3 + i, encoders[t](data.order(10 + i)), None)
                                                           for t in (bad, good) for i in range(4)])], 1)
    assert len(read(catalog_config, f"{ns}.{ns}_good", "id")) == 7
    assert len(read(catalog_config, f"{ns}.{ns}_bad", "id")) == 3  # nothing of the failed write committed
    letters = read(catalog_config, f"{ns}.dead_letters", 'error_class, table_name, "offset", reason', order='"offset"')
    assert [(c, t, o) for c, t, o, _ in letters] == [("table_write_failed", f"{ns}.{ns}_bad", o) for o in range(3, 7)]
    assert all("no-such-codec" in reason for *_, reason in letters), letters[0]
    assert results[f"{ns}.{ns}_bad"].broken and not results[f"{ns}.{ns}_good"].broken
