"""Sample Avro data for the demo, the benchmarks and the tests.

Records are Confluent-framed (magic 0 + 4-byte schema id + Avro binary) and
registered in the schema registry under `<topic>-value`. Version 2 of the order
schema adds a field and widens `quantity` from int to long: the two changes the
job must apply to live tables.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import json
import random
import struct
from typing import Iterator

import fastavro
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

ORDER_V1 = {
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "quantity", "type": "int"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
            {"name": "city", "type": "string"}, {"name": "zip", "type": "string"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}

ORDER_V2 = json.loads(json.dumps(ORDER_V1))
ORDER_V2["fields"][2] = {"name": "quantity", "type": "long"}
ORDER_V2["fields"].append({"name": "channel", "type": ["null", "string"], "default": None})

CLICK = {
    "type": "record", "name": "Click", "namespace": "web",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "url", "type": "string"},
        {"name": "user_id", "type": ["null", "long"], "default": None},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}

CITIES = ("Berlin", "Lisbon", "Osaka", "Lima", "Oslo", "Austin")


def frame(schema_id: int, payload: bytes) -> bytes:
    return struct.pack(">bI", 0, schema_id) + payload


class Encoder:
    """Encode dict records of one schema to framed bytes."""

    def __init__(self, schema: dict, schema_id: int):
        self.parsed = fastavro.parse_schema(json.loads(json.dumps(schema)))
        self.schema_id = schema_id

    def __call__(self, record: dict) -> bytes:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, self.parsed, record)
        return frame(self.schema_id, buf.getvalue())


def order(i: int, version: int = 1, rng: random.Random | None = None) -> dict:
    rng = rng or random.Random(i)
    record = {
        "id": i,
        "customer": f"customer-{rng.randint(1, 5000)}",
        "quantity": rng.randint(1, 50) if version == 1 else rng.randint(1, 50) + 3_000_000_000,
        "amount": decimal.Decimal(rng.randint(100, 10_000_000)) / 100,
        "created_at": dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i),
        "address": {"city": rng.choice(CITIES), "zip": f"{rng.randint(10000, 99999)}"},
        "tags": [f"t{rng.randint(0, 9)}" for _ in range(rng.randint(0, 3))],
        "note": None if i % 3 else f"note {i}",
    }
    if version == 2:
        record["channel"] = rng.choice(("web", "store", None))
    return record


def click(i: int) -> dict:
    return {"id": i, "url": f"/p/{i % 97}", "user_id": None if i % 5 == 0 else i % 1000,
            "at": dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=i)}


def json_event(i: int) -> dict:
    """A plain JSON event as a service writes it: no registry, a nested object, an optional field."""
    event = {"id": i, "user": f"user-{i % 300}", "page": {"path": f"/p/{i % 41}", "ms": 20 + i % 400},
             "at": (dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(seconds=i)).isoformat()}
    if i % 4 == 0:
        event["referrer"] = "https://example.com/"
    return event


def register(registry_url: str, subject: str, schema: dict) -> int:
    client = SchemaRegistryClient({"url": registry_url})
    return client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def produce_one(producer, topic: str, key, value, headers, on_delivery) -> None:
    """Produce one record, waiting for room when the local queue is full."""
    while True:
        try:
            producer.produce(topic, key=key, value=value, headers=headers, on_delivery=on_delivery)
            break
        except BufferError:
            producer.poll(0.1)
    producer.poll(0)


#: syslog level for librdkafka's own log lines of the demo's producer: a refused first
#: connection while a busy machine brings the broker up is retried by the client (and would
#: print before any Python logger could take it); failed deliveries still raise.
QUIET_LOG_LEVEL = 2


def produce(bootstrap: str, messages: Iterator[tuple[str, bytes | None, bytes | None, list | None]],
            extra: dict | None = None) -> int:
    """Produce (topic, key, value, headers) tuples; returns how many were acknowledged."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 5000,
                         "message.max.bytes": 16 * 1024 * 1024, "log_level": QUIET_LOG_LEVEL, **(extra or {})})
    acked = [0]
    errors: list[str] = []

    def on_delivery(err, _msg):
        if err is None:
            acked[0] += 1
        else:
            errors.append(str(err))

    for topic, key, value, headers in messages:
        produce_one(producer, topic, key, value, headers, on_delivery)
    producer.flush(60)
    if errors:
        raise RuntimeError(f"{len(errors)} records not delivered: {errors[0]}")
    return acked[0]
