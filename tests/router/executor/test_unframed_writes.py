"""Topics without registry framing through the executor write path and the real commit, over the
catalog grid: Debezium JSON (the JsonConverter's envelope) mirrored with position deletes only,
inferred JSON whose columns keep their first type across batches, and raw bytes; DuckDB and
pyiceberg read the tables back."""

from __future__ import annotations

import json

import pytest

import router.cli.demo_cdc as cdc
from router.catalog import load_table
from tests.duckdb_reader import read_iceberg
from tests.router.executor.test_partition import make_dispatcher, run_batch
from tests.router.executor.test_upsert import (
    COLUMNS, catalog_config, kafka_batch, live_rows, manifests_hold_no_equality_deletes,  # noqa: F401
)


class JsonStream:
    """Kafka positions for a script's events, encoded as Debezium's JSON converter writes them."""

    def __init__(self, topic: str, partitions: int = 2, schemas: bool = True):
        self.topic, self.partitions = topic, partitions
        self.encode = cdc.DebeziumJsonEncoder(schemas=schemas)
        self.next = [0] * partitions

    def batches(self, events) -> list:
        per: dict[int, list] = {}
        for event in events:
            _, key, value, _ = self.encode(self.topic, event)
            p = event.key["id"] % self.partitions
            per.setdefault(p, []).append((self.topic, p, self.next[p], key, value))
            self.next[p] += 1
        return [kafka_batch(rows) for _, rows in sorted(per.items())]


def duck(catalog_config, table: str, *columns: str) -> list[tuple]:
    """The table as DuckDB reads it (S3 included), ordered by the last column."""
    rows = read_iceberg(load_table(catalog_config, table, refresh=True)).to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in rows), key=lambda r: r[-1])


def truth(script: cdc.ChangeScript) -> dict[int, tuple]:
    return {k: tuple(v[c] for c in COLUMNS) for k, v in sorted(script.rows.items())}


@pytest.mark.parametrize("schemas", [True, False], ids=["with-schema", "without-schema"])
def test_debezium_json_is_mirrored_with_position_deletes(catalog_config, registry_url, unique_name, schemas):
    """With the schema embedded (connect_json) and without it (json, inferred: the key columns named)."""
    ns = unique_name("dj")
    table = f"{ns}.customers"
    route = {"name": "cdc", "topic": "dbz.*", "table": table, "cdc": "debezium",
             **({"format": "connect_json"} if schemas else {"format": "json", "key": ["id"]})}
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [route])
    script, stream = cdc.ChangeScript(seed=11), JsonStream("dbz.customers", schemas=schemas)
    results, report = run_batch(dispatcher, stream.batches(list(script.snapshot(40))), 0)
    assert not report.failed and live_rows(catalog_config, table) == truth(script)
    for batch_id in (1, 2):
        events = list(script.mixed(60)) + list(script.change_key())
        results, report = run_batch(dispatcher, stream.batches(events), batch_id)
        assert not report.failed, report.failed
        assert live_rows(catalog_config, table) == truth(script)
    handle = load_table(catalog_config, table, refresh=True)
    assert manifests_hold_no_equality_deletes(handle) > 0
    schema = {f.name: str(f.field_type) for f in handle.schema().fields}
    # the Connect schema types updated_at; inferred JSON sees its milliseconds as a number
    assert schema["id"] == "long" and schema["updated_at"] == ("timestamptz" if schemas else "long")
    assert handle.schema().identifier_field_names() == {"id"}


def test_inferred_json_columns_keep_their_first_type_across_batches(catalog_config, registry_url, unique_name):
    """A double column takes later integral numbers; a long column meeting 10.5 dead-letters that
    record (type_change: dlq, the default), the rest of the batch lands."""
    ns = unique_name("ij")
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "j", "topic": "clicks", "table": f"{ns}.clicks", "format": "json"}])

    def batch(first: int, docs: list) -> list:
        return [kafka_batch([("clicks", 0, first + i, None, json.dumps(d).encode() if isinstance(d, dict) else d)
                             for i, d in enumerate(docs)])]

    run_batch(dispatcher, batch(0, [{"id": 1, "price": 1.5, "tags": ["a"]}, {"id": 2, "price": 2.5, "gone": None}]), 0)
    run_batch(dispatcher, batch(2, [{"id": 3, "price": 3, "geo": {"lat": 1.25}}, b"{oops", b"[1]"]), 1)
    run_batch(dispatcher, batch(5, [{"id": 6.5, "price": 7}]), 2)
    run_batch(dispatcher, batch(6, [{"id": 7, "price": 8}]), 3)
    handle = load_table(catalog_config, f"{ns}.clicks", refresh=True)
    types = {f.name: str(f.field_type) for f in handle.schema().fields if not f.name.startswith("_kafka")}
    assert types["id"] == "long" and types["price"] == "double" and types["tags"] == "list<string>"
    assert types["geo"].startswith("struct<") and "gone" not in types
    assert duck(catalog_config, f"{ns}.clicks", "id", "price", "_kafka_offset") == [
        (1, 1.5, 0), (2, 2.5, 1), (3, 3.0, 2), (7, 8.0, 6)]
    letters = duck(catalog_config, f"{ns}.dead_letters", "error_class", "offset")
    assert letters == [("decode_error", 3), ("decode_error", 4), ("evolution_violation", 5)], letters


def test_raw_bytes_land_as_they_are(catalog_config, registry_url, unique_name):
    ns = unique_name("rw")
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "r", "topic": "audit", "table": f"{ns}.audit", "format": "raw"}], tombstones="dlq")
    values = [b"\xff\x00binary", None, b"{\"a\": 1}", b""]
    run_batch(dispatcher, [kafka_batch([("audit", 0, i, b"k%d" % i, v) for i, v in enumerate(values)])], 0)
    assert duck(catalog_config, f"{ns}.audit", "key", "value", "_kafka_offset") == [
        (b"k0", b"\xff\x00binary", 0), (b"k1", None, 1), (b"k2", b"{\"a\": 1}", 2), (b"k3", b"", 3)]
    handle = load_table(catalog_config, f"{ns}.audit", refresh=True)
    assert [r["value"] for r in handle.scan().to_arrow().sort_by("_kafka_offset").to_pylist()] == values


class FlatStream(JsonStream):
    def __init__(self, topic: str, encode, partitions: int = 2):
        self.topic, self.partitions, self.encode = topic, partitions, encode
        self.next = [0] * partitions


@pytest.mark.parametrize("shape", ["avro", "json"])
def test_flattened_debezium_records_are_mirrored(catalog_config, registry_url, unique_name, shape):
    """ExtractNewRecordState's output (`__op`, `__source_lsn`, `__deleted` with delete.handling.mode=
    rewrite), in Avro through the registry and in plain JSON: the same position-delete mirror."""
    import router.cli.demo_data as data

    ns = unique_name("fl")
    table, topic = f"{ns}.customers", f"flat.{ns}"
    route = {"name": "cdc", "topic": "flat.*", "table": table, "cdc": "debezium", "sequence_by": "__source_lsn",
             **({"format": "json", "key": ["id"]} if shape == "json" else {})}
    if shape == "json":
        encode = cdc.FlattenedJsonEncoder()
    else:
        encode = cdc.FlattenedAvroEncoder(data.register(registry_url, f"{topic}-key", cdc.CUSTOMER_KEY),
                                          data.register(registry_url, f"{topic}-value", cdc.FLAT_VALUE))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [route])
    script, stream = cdc.ChangeScript(seed=21), FlatStream(topic, encode)
    steps = [lambda: list(script.snapshot(30)), lambda: list(script.mixed(50)) + list(script.change_key()),
             lambda: list(script.mixed(50))]
    for batch_id, step in enumerate(steps):
        results, report = run_batch(dispatcher, stream.batches(step()), batch_id)
        assert not report.failed, report.failed
        assert live_rows(catalog_config, table) == truth(script)
    handle = load_table(catalog_config, table, refresh=True)
    assert manifests_hold_no_equality_deletes(handle) > 0
    names = handle.schema().column_names
    assert "__op" not in names and "__deleted" not in names and "__source_lsn" in names


def test_debezium_json_envelopes_appended_as_rows(catalog_config, registry_url, unique_name):
    """The envelope itself as a log row (a null `before` holds required fields): DuckDB reads every event."""
    ns = unique_name("da")
    table = f"{ns}.events"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "log", "topic": "dbz.*", "table": table, "format": "connect_json"}])
    script, stream = cdc.ChangeScript(seed=5), JsonStream("dbz.events")
    events = [e for e in [*script.snapshot(20), *script.mixed(30)] if e.value is not None]
    results, report = run_batch(dispatcher, stream.batches(events), 0)
    assert not report.failed, report.failed
    got = duck(catalog_config, table, "op", "_kafka_offset")
    assert sorted(op for op, _ in got) == sorted(e.op for e in events)


def test_malformed_debezium_json_records_are_dead_lettered_with_their_position(catalog_config, registry_url,
                                                                                unique_name):
    """Records of a Debezium JSON topic that are not JSON, not an envelope or do not fit their schema
    land in the dead-letter table with topic, partition, offset and their bytes; the others mirror."""
    ns = unique_name("dm")
    table = f"{ns}.customers"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "cdc", "topic": "dbz.*", "table": table, "cdc": "debezium", "format": "connect_json"}])
    script, stream = cdc.ChangeScript(seed=17), JsonStream("dbz.customers")
    even, odd = stream.batches(list(script.snapshot(20)))  # partition = id % 2
    envelope = json.loads(odd.column("value")[0].as_py())
    misfit = json.dumps({**envelope, "payload": {**envelope["payload"], "op": 7}}).encode()  # op is a string
    bad = [b"{not json", b'{"payload": {}}', misfit]
    first = stream.next[1]
    rows = [(r["topic"], r["partition"], r["offset"], r["key"], r["value"]) for r in odd.to_pylist()]
    rows += [("dbz.customers", 1, first + i, b"k", v) for i, v in enumerate(bad)]
    results, report = run_batch(dispatcher, [even, kafka_batch(rows)], 0)
    assert not report.failed, report.failed
    assert live_rows(catalog_config, table) == truth(script)
    letters = duck(catalog_config, f"{ns}.dead_letters", "topic", "partition", "error_class", "value", "offset")
    assert letters == [("dbz.customers", 1, "decode_error", v, first + i) for i, v in enumerate(bad)], letters
