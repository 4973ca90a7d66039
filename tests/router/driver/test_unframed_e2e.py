"""Topics without registry framing in the real job: the `icerouter run` process, a real broker,
Spark, a PostgreSQL catalog, DuckDB reading the tables back.

One job, with no schema registry in its config, reads six topics the way real producers write
them: plain JSON (inferred columns), JSON declared by a schema file, Kafka Connect's JsonConverter
envelope, raw bytes, Debezium's JSON events mirrored into an upsert table, and JSON whose only
route takes some records by a field (the others are unmatched). Bad input is dead-lettered with
its bytes and one reason, the rest lands. A second run after a restart finds the inferred table's
types where the first left them (the table is the state) and appends to them.
"""

from __future__ import annotations

import base64
import json

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import router.cli.demo_cdc as cdc
from router.catalog import load_table
from router.config import CatalogConfig
from tests.duckdb_reader import read_iceberg
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run
from tests.router.executor.test_upsert import COLUMNS

pytestmark = pytest.mark.slow

CONNECT_ORDER = {"type": "struct", "optional": False, "name": "shop.Order", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "9"}},
    {"field": "day", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1},
    {"field": "at", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
]}
PAYMENT_SCHEMA = {"type": "object", "required": ["id"], "properties": {
    "id": {"type": "integer"}, "amount": {"type": "number"}, "at": {"type": "string", "format": "date-time"}}}


def produce(bootstrap: str, messages: list[tuple[str, bytes | None, bytes | None]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for topic, key, value in messages:
        producer.produce(topic, key=key, value=value)
    assert producer.flush(30) == 0


def rows(catalog: CatalogConfig, table: str, *columns: str) -> list[tuple]:
    data = read_iceberg(load_table(catalog, table, refresh=True)).to_pylist()
    return sorted((tuple(r[c] for c in columns) for r in data), key=repr)


def test_every_kind_of_topic_lands(tmp_path, kafka_bootstrap, postgres_uri, unique_name):
    p = unique_name("uf")
    topics = {k: f"{p}.{k}" for k in ("clicks", "payments", "connect", "audit", "dbz", "kinds")}
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, 1 if k != "dbz" else 2, 1) for k, t in topics.items()]).values():
        future.result(15)
    (tmp_path / "payment.schema.json").write_text(json.dumps(PAYMENT_SCHEMA))
    props = {"type": "sql", "uri": postgres_uri, "warehouse": (tmp_path / "wh").as_uri()}
    catalog = CatalogConfig("uf", props)
    ns = f"{p}_t"
    config = {
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": sorted(topics.values()),
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        # no registry: none of these routes reads through one
        "catalog": {"name": "uf", "properties": props},
        "job": {"name": f"job_{p}", "checkpoint": str(tmp_path / "checkpoint"), "spark": LOCAL_SPARK},
        "tables": {"allowed_namespaces": [ns, f"{p}_ops"]},
        "routes": [
            {"name": "clicks", "topic": topics["clicks"], "table": f"{ns}.clicks", "format": "json"},
            {"name": "payments", "topic": topics["payments"], "table": f"{ns}.payments",
             "format": {"type": "json", "schema_file": "payment.schema.json"}},
            {"name": "connect", "topic": topics["connect"], "table": f"{ns}.orders", "format": "connect_json"},
            {"name": "audit", "topic": topics["audit"], "table": f"{ns}.audit", "format": "raw"},
            {"name": "customers", "topic": topics["dbz"], "table": f"{ns}.customers", "cdc": "debezium",
             "format": "connect_json"},
            # the topic's only route filters: a record it does not take is unmatched (a dead letter)
            {"name": "views", "topic": topics["kinds"], "table": f"{ns}.views", "format": "json",
             "fields": {"kind": ["view"]}},
        ],
        "dlq": {"table": f"{p}_ops.dead_letters"},
    }
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(config))

    def js(doc) -> bytes:
        return json.dumps(doc).encode()

    price = base64.b64encode((1999).to_bytes(2, "big", signed=True)).decode()
    script, encode = cdc.ChangeScript(seed=5), cdc.DebeziumJsonEncoder(schemas=True)
    dbz = [encode(topics["dbz"], e) for e in list(script.snapshot(30)) + list(script.mixed(40))]
    produce(kafka_bootstrap, [
        (topics["clicks"], None, js({"user": "a", "price": 1.5, "page": {"path": "/", "ms": 12}})),
        (topics["clicks"], None, js({"user": "b", "price": 2.5, "tags": ["x"], "later": None})),
        (topics["clicks"], None, b"\xff\xfe not utf-8"),
        (topics["clicks"], None, b"{broken"),
        (topics["clicks"], None, js([1, 2])),
        (topics["payments"], None, js({"id": 1, "amount": 9.5, "at": "2026-11-27T10:00:00Z"})),
        (topics["payments"], None, js({"amount": 1})),  # misses the required id
        (topics["connect"], None, js({"schema": CONNECT_ORDER, "payload": {"id": 7, "price": price, "day": 20000,
                                                                          "at": 1_790_000_000_000}})),
        (topics["connect"], None, js({"schema": CONNECT_ORDER})),  # an envelope without a payload
        (topics["audit"], b"k", b"\x00\x01 anything"),
        (topics["audit"], None, None),
        *[(t, k, v) for t, k, v, _ in dbz],
        (topics["kinds"], None, js({"id": 1, "kind": "view"})),
        (topics["kinds"], None, js({"id": 2, "kind": "buy"})),
    ])
    first = _run(path, "--available-now")
    assert first.returncode == 0, first.stderr[-3000:]

    assert rows(catalog, f"{ns}.clicks", "user", "price") == [("a", 1.5), ("b", 2.5)]
    clicks = load_table(catalog, f"{ns}.clicks", refresh=True).schema()
    assert str(clicks.find_field("price").field_type) == "double" and "later" not in clicks.column_names
    assert rows(catalog, f"{ns}.payments", "id", "amount") == [(1, 9.5)]
    [order] = read_iceberg(load_table(catalog, f"{ns}.orders", refresh=True)).to_pylist()
    assert (order["id"], str(order["price"]), str(order["day"]), order["at"].year) == (7, "19.99", "2024-10-04", 2026)
    assert rows(catalog, f"{ns}.audit", "key", "value") == [(None, None), (b"k", b"\x00\x01 anything")]
    live = {r[0]: r for r in rows(catalog, f"{ns}.customers", *COLUMNS)}
    assert live == {k: tuple(v[c] for c in COLUMNS) for k, v in script.rows.items()}

    letters = rows(catalog, f"{p}_ops.dead_letters", "topic", "error_class", "value")
    assert sorted((t.rsplit(".", 1)[1], c) for t, c, _ in letters) == [
        ("clicks", "decode_error"), ("clicks", "decode_error"), ("clicks", "invalid_utf8"),
        ("connect", "decode_error"), ("kinds", "unmatched"), ("payments", "decode_error")]
    assert rows(catalog, f"{ns}.views", "id", "kind") == [(1, "view")]
    assert b"\xff\xfe not utf-8" in {v for _, _, v in letters}  # the original bytes

    # a restart: the inferred table's types are the state, later integral prices land as doubles
    produce(kafka_bootstrap, [(topics["clicks"], None, js({"user": "c", "price": 3, "later": "now"}))])
    second = _run(path, "--available-now")
    assert second.returncode == 0, second.stderr[-3000:]
    assert rows(catalog, f"{ns}.clicks", "user", "price", "later") == [("a", 1.5, None), ("b", 2.5, None),
                                                                       ("c", 3.0, "now")]
    assert str(load_table(catalog, f"{ns}.clicks", refresh=True).schema().find_field("price").field_type) == "double"
    assert len(rows(catalog, f"{p}_ops.dead_letters", "topic")) == 6  # nothing read twice
