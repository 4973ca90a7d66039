"""Decode throughput: icerouter's decoder vs confluent AvroDeserializer + from_pylist.

Encodes N registry-framed records (~500 bytes, 12 fields incl. nested record,
decimal, timestamps, array, optional string) once, then decodes them to Arrow:

* baseline: confluent_kafka AvroDeserializer per record, then pa.Table.from_pylist;
* ours (columnar): registry.decode.decode_values (polars container path);
* ours (per-record): the same API forced onto the fastavro per-record path.

Prints records/s and the ratio to the baseline measured in the same run. The
registry emulator runs in-process (router/devstack/registry_server.py) unless
--registry-url is given.

    python scripts/bench_decode.py --records 1000000
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import random
import time
from decimal import Decimal

import pyarrow as pa
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.decode import decode_values

SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench", "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": "long"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 12, "scale": 2}},
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
TOPIC = "bench-orders"


def make_record(rng: random.Random, i: int) -> dict:
    ts = dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=i * 37)
    return {
        "order_id": f"order-{i:012d}-{rng.getrandbits(64):016x}",
        "customer_id": rng.randrange(1 << 40),
        "amount": Decimal(rng.randrange(10 ** 9)) / 100,
        "created_at": ts, "updated_at": ts + dt.timedelta(microseconds=rng.randrange(10 ** 6)),
        "status": rng.choice(["NEW", "PAID", "SHIPPED", "CANCELLED"]),
        "note": None if i % 3 == 0 else "note " + "x" * rng.randrange(20, 120),
        "quantity": rng.randrange(100), "price": rng.random() * 1000,
        "tags": [f"tag-{rng.randrange(50)}" for _ in range(rng.randrange(1, 6))],
        "address": {"street": f"{rng.randrange(999)} Long Street Name Avenue Block {i % 97}",
                    "city": rng.choice(["Amsterdam", "Berlin", "Copenhagen", "Dublin"]) + " " * 40,
                    "zip": f"{rng.randrange(99999):05d}", "country": "Country " + "y" * 60 + " " * rng.randrange(150, 230)},
        "active": bool(i % 2),
    }


def encode(registry: CachedRegistry, n: int, schemas: int = 1) -> list[bytes]:
    """n framed values; with schemas > 1, spread round-robin over that many
    registered schemas (one per topic), as in a batch read from many topics."""
    rng = random.Random(42)
    sers = []
    for k in range(schemas):
        schema = SCHEMA if k == 0 else dict(SCHEMA, name=f"Order{k}")
        topic = TOPIC if k == 0 else f"{TOPIC}-{k}"
        sers.append((AvroSerializer(registry.client, json.dumps(schema)),
                     SerializationContext(topic, MessageField.VALUE)))
    distinct = []
    for i in range(min(n, 20_000)):
        ser, ctx = sers[i % schemas]
        distinct.append(ser(make_record(rng, i), ctx))
    return [distinct[i % len(distinct)] for i in range(n)]


def bench_baseline(registry: CachedRegistry, values: list[bytes]) -> tuple[float, int]:
    de = AvroDeserializer(registry.client)
    for v in values[:1000]:            # warm its schema cache (all schemas) outside the timing
        de(v, SerializationContext(TOPIC, MessageField.VALUE))
    ctx = SerializationContext(TOPIC, MessageField.VALUE)
    t0 = time.perf_counter()
    rows = [de(v, ctx) for v in values]
    table = pa.Table.from_pylist(rows)
    return time.perf_counter() - t0, table.num_rows


def bench_ours(registry: CachedRegistry, values: pa.Array) -> tuple[float, int]:
    t0 = time.perf_counter()
    res = decode_values(registry, values)
    elapsed = time.perf_counter() - t0
    assert not res.failures, res.failures[:3]
    return elapsed, res.decoded_rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--baseline-records", type=int, default=None,
                    help="records for the (slow) baseline; default min(records, 200000), rate extrapolated")
    ap.add_argument("--schemas", type=int, default=1,
                    help="spread the records over this many writer schemas (topics)")
    ap.add_argument("--registry-url", default=None)
    args = ap.parse_args(argv)

    server = None
    url = args.registry_url
    if url is None:
        from router.devstack.registry_server import RegistryServer

        server = RegistryServer()
        url = server.start()
    try:
        cfg = RegistryConfig(url=url)
        fast = CachedRegistry(cfg)
        slow = CachedRegistry(cfg, columnar=False)
        t0 = time.perf_counter()
        values = encode(fast, args.records, args.schemas)
        arr = pa.array(values, type=pa.binary())
        size = sum(len(v) for v in values[:1000]) / min(1000, len(values))
        print(f"records: {args.records:,}  schemas: {args.schemas}  avg framed size: {size:.0f} bytes  "
              f"(encoded in {time.perf_counter() - t0:.1f}s)")
        # warm the schema caches outside the timed region for every decoder
        decode_values(fast, arr.slice(0, 1000))
        decode_values(slow, arr.slice(0, 1000))

        nb = args.baseline_records or min(args.records, 200_000)
        t_base, rows = bench_baseline(fast, values[:nb])
        base_rate = rows / t_base
        print(f"baseline  confluent AvroDeserializer + from_pylist: {base_rate:>12,.0f} rec/s "
              f"({rows:,} records, {t_base:.2f}s)")
        ns = min(args.records, nb)
        t_slow, rows = bench_ours(slow, arr.slice(0, ns))
        print(f"ours      per-record fastavro path:                 {rows / t_slow:>12,.0f} rec/s "
              f"({rows:,} records, {t_slow:.2f}s)  ratio {rows / t_slow / base_rate:.1f}x")
        t_fast, rows = bench_ours(fast, arr)
        fast_rate = rows / t_fast
        print(f"ours      columnar decode_values:                   {fast_rate:>12,.0f} rec/s "
              f"({rows:,} records, {t_fast:.2f}s)  ratio {fast_rate / base_rate:.1f}x")
    finally:
        if server is not None:
            server.stop()
    return 0

