"""Protobuf mode: the live job on Protobuf topics against the same job on Avro topics, one run.

The same records (the throughput workload's 12-field order, ~490 B) are produced twice: as Avro to
`pbavro.NNN` topics and as Protobuf to `pbproto.NNN` topics (one registered schema per topic,
Confluent framing with message indexes). The Protobuf message has the same fields: decimals
become int64 cents, the two timestamps google.protobuf.Timestamp, the optional note a proto3
`optional`, the address a nested message, the tags a repeated string. After a warm-up the job
drains each backlog with availableNow from a clean checkpoint, Avro and Protobuf in turn, twice
(A P A P: the machine's drift hits both), and the Protobuf rate is reported as a share of the
Avro rate (target >= 70%). Every table must hold exactly its topic's records.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import catalog_properties
from scripts.perf.services import Stack

TARGET_SHARE = 0.70
ORDER_PROTO = """syntax = "proto3";
package bench;
import "google/protobuf/timestamp.proto";
message Order {
  string order_id = 1;
  int64 customer_id = 2;
  int64 amount_cents = 3;
  google.protobuf.Timestamp created_at = 4;
  google.protobuf.Timestamp updated_at = 5;
  string status = 6;
  optional string note = 7;
  int32 quantity = 8;
  double price = 9;
  repeated string tags = 10;
  message Address { string street = 1; string city = 2; string zip = 3; string country = 4; }
  Address address = 11;
  bool active = 12;
}
"""


def proto_pool(size: int = data.POOL_SIZE, seed: int = 7) -> list[bytes]:
    """Protobuf bodies (message index list + message, no magic/id) of the workload's records."""
    from registry.protobuf_schema import encode_message_indexes, load_protobuf

    file = load_protobuf(ORDER_PROTO)
    cls = file.message_class(file.message((0,)))
    rng = random.Random(seed)
    indexes = encode_message_indexes([0])
    out = []
    for i in range(size):
        r = data.make_record(rng, i)
        m = cls(order_id=r["order_id"], customer_id=r["customer_id"], amount_cents=int(r["amount"] * 100),
                status=r["status"], quantity=r["quantity"], price=r["price"], tags=r["tags"], active=r["active"])
        m.created_at.FromDatetime(r["created_at"])
        m.updated_at.FromDatetime(r["updated_at"])
        if r["note"] is not None:
            m.note = r["note"]
        for k in ("street", "city", "zip", "country"):
            setattr(m.address, k, r["address"][k])
        out.append(indexes + m.SerializeToString())
    return out


def register_proto(registry_url: str, topics: list[str]) -> dict[str, int]:
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    client = SchemaRegistryClient({"url": registry_url})
    return {t: client.register_schema(f"{t}-value", Schema(ORDER_PROTO.replace("package bench;", f"package bench.t{i:03d};"),
                                                           "PROTOBUF"))
            for i, t in enumerate(topics)}


def drain(spark, stack: Stack, root: Path, fmt: str, run: int, topics: list[str], records: int,
          batch_records: int) -> dict:
    from router.catalog import load_table
    from router.config import parse_config
    from router.driver.job import start_query
    from scripts.perf.probe import RecordingDispatcher

    namespace = f"pb_{fmt}_{run}"
    config = parse_config({
        "kafka": {"bootstrap_servers": stack.bootstrap, "topics": topics, "client": stack.client,
                  "max_records_per_batch": batch_records},
        "registry": {"url": stack.registry_url},
        "catalog": {"name": "bench", "properties": catalog_properties(root)},
        "job": {"name": f"bench_{namespace}", "checkpoint": str(root / f"checkpoint-{namespace}")},
        "tables": {"allowed_namespaces": [namespace, "ops"], "metadata_columns": True},
        "routes": [{"name": fmt, "topic": rf"pb{fmt}\.\d+", "table": f"{namespace}.{{topic}}"}],
        "dlq": {"table": f"ops.dead_letters_{namespace}"},
    })
    query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    read = sum(b.stats.records for b in dispatcher.batches)
    first, last = dispatcher.batches[0].started, dispatcher.batches[-1].ended
    rows = {t: sum(int(s.summary["added-records"]) for s in load_table(config.catalog, f"{namespace}.pb{fmt}_{t[-3:]}",
                                                                      refresh=True).snapshots()
                   if "added-records" in s.summary.additional_properties) for t in topics}
    dead = sum(b.stats.dead_letters for b in dispatcher.batches)
    if read != records or sum(rows.values()) != records or dead:
        raise SystemExit(f"{fmt} run {run}: read {read:,}, wrote {sum(rows.values()):,}, {dead} dead letters; "
                         f"expected {records:,} records in the tables")
    return {"records": read, "batches": len(dispatcher.batches), "seconds": round(last - first, 3),
            "records_per_s": round(read / (last - first)),
            "task_decode_s": round(sum(b.stats.task_seconds.get("decode", 0.0) for b in dispatcher.batches), 3)}


def run_protobuf(args, stack: Stack, root: Path) -> dict:
    from router.driver.job import build_spark
    from router.config import parse_config
    from scripts.perf.live.throughput import warm_up
    from scripts.perf.probe import load_average, settle_broker

    result: dict = {"mode": "protobuf", "topics_per_format": args.topics, "partitions": args.partitions,
                    "records_per_format": args.records, "batch_records": args.batch_records,
                    "load_before": load_average()}
    formats = {"avro": [f"pbavro.{i:03d}" for i in range(args.topics)],
               "proto": [f"pbproto.{i:03d}" for i in range(args.topics)]}
    pools = {"avro": data.payload_pool(), "proto": proto_pool()}
    result["value_bytes_mean"] = {f: round(statistics.mean(len(p) for p in pool) + 5, 1) for f, pool in pools.items()}
    for fmt, topics in formats.items():
        print(f"producing {args.records:,} {fmt} records to {len(topics)} topics ...", flush=True)
        stack.broker.create_topics(topics, partitions=args.partitions, timeout=120)
        ids = data.register_topics(stack.registry_url, topics) if fmt == "avro" else \
            register_proto(stack.registry_url, topics)
        data.produce_bulk(stack.conf, ids, args.partitions, args.records, pools[fmt])
    result["broker_settle_seconds"] = settle_broker(stack.broker)

    spark = build_spark(parse_config({"kafka": {"bootstrap_servers": stack.bootstrap, "topics": ["x"]},
                                      "registry": {"url": stack.registry_url},
                                      "job": {"spark": {"spark.driver.memory": "4g"}}}))
    print("warming up Spark workers ...", flush=True)
    warm_up(spark, args, stack, root)
    settle_broker(stack.broker)
    runs: dict[str, list[dict]] = {"avro": [], "proto": []}
    for run in range(2):
        for fmt, topics in formats.items():
            runs[fmt].append(drain(spark, stack, root, fmt, run, topics, args.records, args.batch_records))
            print(f"  {fmt} run {run}: {runs[fmt][-1]['records_per_s']:,} records/s", flush=True)
            time.sleep(2)
    spark.stop()
    rates = {fmt: statistics.median(r["records_per_s"] for r in rs) for fmt, rs in runs.items()}
    result["runs"] = runs
    result["records_per_s"] = {fmt: round(v) for fmt, v in rates.items()}
    result["protobuf_share_of_avro"] = round(rates["proto"] / rates["avro"], 3)
    result["target_share"] = TARGET_SHARE
    result["within_target"] = result["protobuf_share_of_avro"] >= TARGET_SHARE
    result["load_after"] = load_average()
    return result
