"""Benchmark workload: a 12-field Avro schema, framed payloads, bulk and steady producers, raw consume.

Encoding two million records one by one would dominate the set-up, so a pool
of distinct payloads is encoded once and framed per topic (each topic has its
own registered schema, hence its own schema id, as in a real estate of
hundreds of subjects). Values are ~500 bytes on the wire.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import os
import random
import struct
import time
import uuid
from decimal import Decimal

import fastavro

POOL_SIZE = 4096
STATUSES = ("new", "paid", "shipped", "delivered", "returned")
CITIES = ("Berlin", "Lisbon", "Osaka", "Lima", "Oslo", "Austin", "Accra", "Perth")


def bench_schema(topic_index: int) -> dict:
    """The 12-field record; the namespace differs per topic so each subject gets its own schema id."""
    return {
        "type": "record", "name": "Order", "namespace": f"bench.t{topic_index:03d}", "fields": [
            {"name": "order_id", "type": "string"},
            {"name": "customer_id", "type": "long"},
            {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2}},
            {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "status", "type": "string"},
            {"name": "note", "type": ["null", "string"], "default": None},
            {"name": "quantity", "type": "int"},
            {"name": "price", "type": "double"},
            {"name": "tags", "type": {"type": "array", "items": "string"}},
            {"name": "address", "type": {"type": "record", "name": "Address", "fields": [
                {"name": "street", "type": "string"}, {"name": "city", "type": "string"},
                {"name": "zip", "type": "string"}, {"name": "country", "type": "string"}]}},
            {"name": "active", "type": "boolean"},
        ]}


def make_record(rng: random.Random, i: int) -> dict:
    ts = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=i * 37)
    return {
        "order_id": str(uuid.UUID(int=rng.getrandbits(128))),
        "customer_id": rng.randint(1, 10_000_000),
        "amount": Decimal(rng.randint(100, 99_999_999)) / 100,
        "created_at": ts,
        "updated_at": ts + dt.timedelta(microseconds=rng.randint(0, 10**9)),
        "status": rng.choice(STATUSES),
        "note": None if i % 10 == 0 else "".join(rng.choice("abcdefghij ") for _ in range(rng.randint(280, 380))),
        "quantity": rng.randint(1, 500),
        "price": rng.random() * 1000,
        "tags": [f"tag-{rng.randint(0, 99)}" for _ in range(rng.randint(0, 6))],
        "address": {"street": f"{rng.randint(1, 999)} " + "".join(rng.choice("klmnopqrst") for _ in range(60)),
                    "city": rng.choice(CITIES), "zip": f"{rng.randint(10000, 99999)}",
                    "country": rng.choice(("DE", "PT", "JP", "PE", "NO", "US"))},
        "active": bool(i % 2),
    }


def payload_pool(size: int = POOL_SIZE, seed: int = 7) -> list[bytes]:
    """Avro bodies (no framing) of `size` distinct records."""
    parsed = fastavro.parse_schema(bench_schema(0))
    rng = random.Random(seed)
    out = []
    for i in range(size):
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, parsed, make_record(rng, i))
        out.append(buf.getvalue())
    return out


def json_pool(size: int = POOL_SIZE, seed: int = 7) -> list[bytes]:
    """The same records as `payload_pool`, as plain JSON objects (decimal as a number, times as ISO text)."""
    import json as _json

    rng = random.Random(seed)
    out = []
    for i in range(size):
        record = make_record(rng, i)
        record.update(amount=float(record["amount"]), created_at=record["created_at"].isoformat(),
                      updated_at=record["updated_at"].isoformat())
        out.append(_json.dumps(record).encode())
    return out


def register_topics(registry_url: str, topics: list[str]) -> dict[str, int]:
    """Register one schema per topic subject; returns topic -> schema id."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return {t: client.register_schema(f"{t}-value", Schema(json.dumps(bench_schema(i)), "AVRO"))
            for i, t in enumerate(topics)}


def _producer(conf: dict):
    from confluent_kafka import Producer

    return Producer({**conf, "linger.ms": "50", "batch.num.messages": "10000",
                     "queue.buffering.max.messages": "1000000", "queue.buffering.max.kbytes": "1048576"})


def produce_bulk(conf: dict, ids: dict[str, int], partitions: int, records: int,
                 pool: list[bytes], framed: bool = True) -> float:
    """Round-robin `records` over every topic-partition as fast as the broker takes them; seconds.
    `framed` False: the values as they are (no registry prefix)."""
    producer = _producer(conf)
    topics = list(ids)
    prefixes = [struct.pack(">bI", 0, ids[t]) if framed else b"" for t in topics]
    n_tp, n_pool = len(topics) * partitions, len(pool)
    started = time.perf_counter()
    produce = producer.produce
    for i in range(records):
        tp = i % n_tp
        t = tp // partitions
        value = prefixes[t] + pool[i % n_pool]
        while True:
            try:
                produce(topics[t], value=value, key=b"%d" % i, partition=tp % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0:
            producer.poll(0)
    remaining = producer.flush(300)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    return time.perf_counter() - started


def produce_steady(conf: dict, ids: dict[str, int], partitions: int, rate: float, seconds: float,
                   pool: list[bytes], out_file: str | None, stop=None, hot: int = 0, hot_share: float = 0.9) -> None:
    """Produce `rate` records/s for `seconds` (or until the `stop` event is set), writing (topic, partition,
    offset, timestamp_ms) of every acknowledged record to `out_file` (npz; None: keep no acks, for long
    runs). Runs in its own process so the job's driver is not slowed. `hot`: the first `hot` topics
    carry `hot_share` of the records, the others the rest (an estate's skew); 0: every topic alike."""
    import numpy as np

    producer = _producer({**conf, "linger.ms": "5"})
    topics = list(ids)
    index = {t: i for i, t in enumerate(topics)}
    prefixes = [struct.pack(">bI", 0, ids[t]) for t in topics]
    n_tp, n_pool = len(topics) * partitions, len(pool)
    acks: list[tuple[int, int, int, int]] = []

    def on_delivery(err, msg):
        if err is None:
            acks.append((index[msg.topic()], msg.partition(), msg.offset(), msg.timestamp()[1]))

    callback = on_delivery if out_file else None
    hot_tps, cold_tps = hot * partitions, n_tp - hot * partitions

    def pick(i: int) -> int:
        """The topic-partition (index) of record `i`: round robin, within the hot and cold sets when skewed."""
        if not hot or not cold_tps:
            return i % n_tp
        hot_before = int(i * hot_share)
        if int((i + 1) * hot_share) > hot_before:
            return hot_before % hot_tps
        return hot_tps + (i - hot_before) % cold_tps

    started = time.time()
    sent = 0
    tick = 0.02
    while True:
        elapsed = time.time() - started
        if elapsed >= seconds or (stop is not None and stop.is_set()):
            break
        due = int(elapsed * rate)
        while sent < due:
            tp = pick(sent)
            t = tp // partitions
            try:
                producer.produce(topics[t], value=prefixes[t] + pool[sent % n_pool], key=b"%d" % sent,
                                 partition=tp % partitions, on_delivery=callback)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        time.sleep(tick)
    producer.flush(120)
    if out_file:
        arr = np.array(acks, dtype=np.int64).reshape(-1, 4)
        np.savez(out_file, acks=arr, topics=np.array(topics))


def raw_consume(conf: dict, topics: list[str], partitions: int, expected: int) -> float:
    """One process draining every partition with confluent-kafka: the ceiling. Returns seconds."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    # noida-db answers a fetch with everything available (over 1 GB here): allow the largest response
    consumer = Consumer({**conf, "group.id": f"bench-raw-{uuid.uuid4().hex[:6]}", "enable.auto.commit": "false",
                         "enable.partition.eof": "true", "auto.offset.reset": "earliest",
                         "receive.message.max.bytes": "2147483647", "fetch.max.bytes": "52428800"})
    tps = [TopicPartition(t, p, 0) for t in topics for p in range(partitions)]
    consumer.assign(tps)
    started = time.perf_counter()
    seen = eof = 0
    while eof < len(tps):
        batch = consumer.consume(10000, 0) or [m for m in [consumer.poll(1.0)] if m is not None]
        for msg in batch:
            err = msg.error()
            if err is None:
                seen += 1
                msg.value()
            elif err.code() == KafkaError._PARTITION_EOF:
                eof += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    if seen != expected:
        raise RuntimeError(f"raw consumer saw {seen} of {expected} records")
    return elapsed


def produce_raw(conf: dict, topics: list[str], partitions: int, records: int, value_bytes: int) -> float:
    """Create `topics` and round-robin `records` unframed values of `value_bytes` over their partitions
    (the source and reader benchmarks read bytes, never decode them); seconds."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(conf)
    for fut in admin.create_topics([NewTopic(t, partitions, 1) for t in topics], operation_timeout=60).values():
        fut.result(timeout=60)
    producer = Producer({**conf, "linger.ms": "20", "batch.num.messages": "10000", "queue.buffering.max.messages": "500000"})
    value = os.urandom(value_bytes // 2).hex().encode()[:value_bytes]
    started = time.perf_counter()
    n_tp = len(topics) * partitions
    for i in range(records):
        tp = i % n_tp
        while True:
            try:
                producer.produce(topics[tp // partitions], value=value, key=b"%d" % i, partition=tp % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 20000 == 0:
            producer.poll(0)
    assert producer.flush(120) == 0
    return time.perf_counter() - started
