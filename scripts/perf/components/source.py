"""Throughput of the Kafka source against the raw confluent-kafka ceiling, measured in one run.

    python scripts/bench_source.py [--records 1000000] [--topics 200] [--partitions 3]
                                   [--value-bytes 500] [--bootstrap HOST:PORT] [--no-unpacked]

Produces the records (over topics x partitions), then measures:
  (a) one process consuming every partition with confluent-kafka (the ceiling),
  (b) the Python Data Source through Spark (local[2], Trigger.AvailableNow, a
      foreachBatch that counts rows with an Arrow-native mapInArrow),
  (b1) the same with [] instead of null for records without headers,
  (b2) the same without the headers column (include_headers=False),
  (c) optionally (b2) with one Spark task per topic-partition (no packing),
and prints records/s and the ratios to (a). Without --bootstrap a local
noida-db broker is started and stopped.

    python scripts/bench_source.py --tail [--records 2000000] [--tail-partitions 150] [--json FILE]

--tail: the reader alone (router/source/fetch.read_ranges, no Spark) over one
task's share of a backlog (--tail-partitions partitions), reading its first,
second, third and last quarter as four batches do, each quarter with the
reader's consume() sizing and with a fixed 10,000 messages per call,
alternating: wall and CPU seconds, and the Message objects consume() returned
(a fetch brings the partition's tail past the range along).

    python scripts/bench_source.py --breakdown [--workload debezium|json|avro] [--topics 20] [--records 100000]

--breakdown: per record, where the source's time goes: fetch from the broker, copy into Arrow,
decode (scripts/perf/components/source_breakdown.py).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import uuid

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition

from scripts.perf.report import write_json
from scripts.perf.workload import produce_raw


def raw_consume(conf: dict, topics: list[str], partitions: int, expected: int) -> float:
    consumer = Consumer({**conf, "group.id": f"bench-{uuid.uuid4().hex[:6]}", "enable.auto.commit": "false",
                         "enable.partition.eof": "true", "auto.offset.reset": "earliest"})
    tps = [TopicPartition(t, p, 0) for t in topics for p in range(partitions)]
    consumer.assign(tps)
    started = time.perf_counter()
    seen = eof = 0
    nbytes = 0
    while eof < len(tps):
        batch = consumer.consume(10000, 0) or [m for m in [consumer.poll(1.0)] if m is not None]
        for msg in batch:
            err = msg.error()
            if err is None:
                seen += 1
                nbytes += len(msg.value())
            elif err.code() == KafkaError._PARTITION_EOF:
                eof += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    assert seen == expected, f"raw consumer saw {seen} of {expected}"
    return elapsed


def count_rows(batches):
    yield pa.RecordBatch.from_pydict({"n": [sum(b.num_rows for b in batches)]})


def spark_run(spark, options, checkpoint: str) -> tuple[float, int, int]:
    from router.source import kafka_stream

    total = [0]
    batches = [0]

    def sink(batch_df, batch_id):
        counted = batch_df.mapInArrow(count_rows, "n long").toArrow()
        total[0] += sum(counted.column("n").to_pylist())
        batches[0] += 1

    started = time.perf_counter()
    query = (
        kafka_stream(spark, options, force_python=True)
        .writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", checkpoint)
        .start()
    )
    query.awaitTermination()
    if query.exception():
        raise query.exception()
    return time.perf_counter() - started, total[0], batches[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--value-bytes", type=int, default=500)
    ap.add_argument("--bootstrap")
    ap.add_argument("--no-unpacked", action="store_true", help="skip run (c), one task per topic-partition")
    ap.add_argument("--tail", action="store_true", help="the reader alone over the quarters of a backlog")
    ap.add_argument("--tail-partitions", type=int, default=150)
    ap.add_argument("--rounds", type=int, default=3, help="--tail: repetitions of each measurement")
    ap.add_argument("--breakdown", action="store_true",
                    help="per record: fetch from the broker, copy into Arrow, decode (source_breakdown.py)")
    ap.add_argument("--workload", choices=("debezium", "json", "avro"), default="debezium",
                    help="--breakdown: the upsert mode's Debezium JSON events, the formats mode's plain JSON or "
                         "its Avro values (read raw)")
    ap.add_argument("--batches", type=int, default=4, help="--breakdown: slices each partition is read in")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

    from router.devstack.broker import LocalBroker, client_config

    broker = None
    if args.bootstrap:
        # the local broker's client settings (large receive buffer) are harmless elsewhere
        conf = client_config(args.bootstrap)
    else:
        broker = LocalBroker(tempfile.mkdtemp(prefix="bench-source-broker-"))
        broker.start()
        conf = client_config(broker.bootstrap)
    conf = {k: str(v) for k, v in conf.items()}
    try:
        if args.breakdown:
            from scripts.perf.components.source_breakdown import run_breakdown

            return run_breakdown(args, conf, broker)
        return run_tail(args, conf) if args.tail else run(args, conf)
    finally:
        if broker is not None:
            broker.stop()


def run_tail(args, conf: dict) -> int:
    import router.source.fetch as fetch
    from router.source import KafkaSourceOptions
    from router.source.offsets import Range

    topics = [f"bench-tail-{i:03d}" for i in range(args.topics)]
    per_partition = args.records // (args.topics * args.partitions)
    print(f"producing {args.records:,} records of {args.value_bytes} B over {args.topics} topics x "
          f"{args.partitions} partitions ...", flush=True)
    produce_raw(conf, topics, args.partitions, args.records, args.value_bytes)
    time.sleep(10)  # the local broker snapshots what it was sent; let that finish first
    share = [(t, p) for t in topics for p in range(args.partitions)][: args.tail_partitions]
    options = KafkaSourceOptions(conf["bootstrap.servers"], topics=tuple(topics),
                                 client_config={k: v for k, v in conf.items() if k != "bootstrap.servers"}).to_json()
    returned = [0]
    plain_next = fetch._next_messages

    def counting(consumer, timeout, chunk=fetch.CONSUME_CHUNK):
        messages = plain_next(consumer, timeout, chunk)
        returned[0] += len(messages)
        return messages

    fetch._next_messages = counting
    quarter = per_partition // 4
    sized_min = fetch.MIN_CONSUME_CHUNK
    runs: dict = {}
    for q in range(4):
        lo = q * quarter
        ranges = [Range(t, p, lo, lo + quarter) for t, p in share]
        for i in range(args.rounds):
            sides = (("sized", sized_min), ("fixed_10000", fetch.CONSUME_CHUNK))
            for label, minimum in sides[:: 1 if i % 2 else -1]:
                fetch.MIN_CONSUME_CHUNK = minimum
                returned[0] = 0
                wall, cpu = time.perf_counter(), time.process_time()
                rows = sum(b.num_rows for b in fetch.read_ranges(options, ranges))
                wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
                assert rows == quarter * len(share), f"read {rows} of {quarter * len(share)}"
                runs.setdefault(f"q{q + 1}", {}).setdefault(label, []).append(
                    {"wall_s": wall, "cpu_s": cpu, "messages": returned[0]})
    fetch.MIN_CONSUME_CHUNK = sized_min
    result = {"benchmark": "source_tail", "records": args.records, "partitions_read": len(share),
              "records_per_partition": per_partition, "records_per_read": quarter * len(share), "quarters": {}}
    for q, sides in runs.items():
        out = {label: {k: round(statistics.median(r[k] for r in rs), 3) for k in ("wall_s", "cpu_s", "messages")}
               for label, rs in sides.items()}
        out["cpu_ratio"] = round(out["fixed_10000"]["cpu_s"] / out["sized"]["cpu_s"], 2)
        out["wall_ratio"] = round(out["fixed_10000"]["wall_s"] / out["sized"]["wall_s"], 2)
        result["quarters"][q] = out
        print(f"{q}: sized {out['sized']} fixed {out['fixed_10000']} cpu x{out['cpu_ratio']} "
              f"wall x{out['wall_ratio']}", flush=True)
    if args.json_file:
        write_json(result, args.json_file)
    return 0


def run(args, conf: dict) -> int:
    from pyspark.sql import SparkSession

    from router.source import KafkaSourceOptions

    prefix = f"bench-{uuid.uuid4().hex[:6]}"
    topics = [f"{prefix}-{i:03d}" for i in range(args.topics)]
    n_tp = args.topics * args.partitions
    print(f"producing {args.records:,} records of {args.value_bytes} B over {args.topics} topics x "
          f"{args.partitions} partitions ...", flush=True)
    produced_in = produce_raw(conf, topics, args.partitions, args.records, args.value_bytes)
    print(f"  produced in {produced_in:.1f} s ({args.records / produced_in:,.0f} rec/s)")

    raw_s = raw_consume(conf, topics, args.partitions, args.records)
    raw_rate = args.records / raw_s
    print(f"(a) raw confluent-kafka, one process: {raw_s:.2f} s, {raw_rate:,.0f} rec/s")

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "4g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    bootstrap = conf["bootstrap.servers"]
    client = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    with tempfile.TemporaryDirectory(prefix="bench-source-ck-") as ck:
        # warm-up: JVM, Python workers and the first-batch planning are not part of the rate
        warm = KafkaSourceOptions(bootstrap, topics=(topics[0],), client_config=client)
        spark_run(spark, warm, f"{ck}/warm")

        options = KafkaSourceOptions(bootstrap, pattern=f"{prefix}-.*", client_config=client)
        packed_s, rows, batches = spark_run(spark, options, f"{ck}/packed")
        assert rows == args.records, f"source read {rows} of {args.records}"
        rate = rows / packed_s
        tasks = 2 * spark.sparkContext.defaultParallelism
        print(f"(b) icerouter-kafka via Spark availableNow, {tasks} packed tasks: {packed_s:.2f} s, "
              f"{rate:,.0f} rec/s, {batches} batch(es); ratio to (a): {rate / raw_rate:.2f}")

        empty = KafkaSourceOptions(bootstrap, pattern=f"{prefix}-.*", client_config=client, null_empty_headers=False)
        empty_s, rows, _ = spark_run(spark, empty, f"{ck}/empty")
        assert rows == args.records
        print(f"(b1) same, records without headers get [] instead of null: {empty_s:.2f} s, "
              f"{rows / empty_s:,.0f} rec/s; ratio to (a): {rows / empty_s / raw_rate:.2f}")

        lean = KafkaSourceOptions(bootstrap, pattern=f"{prefix}-.*", client_config=client, include_headers=False)
        lean_s, rows, _ = spark_run(spark, lean, f"{ck}/lean")
        assert rows == args.records
        print(f"(b2) same without the headers column: {lean_s:.2f} s, {rows / lean_s:,.0f} rec/s; "
              f"ratio to (a): {rows / lean_s / raw_rate:.2f}")

        if not args.no_unpacked:
            unpacked = KafkaSourceOptions(bootstrap, pattern=f"{prefix}-.*", client_config=client,
                                          target_tasks=n_tp, include_headers=False)
            one_s, rows, _ = spark_run(spark, unpacked, f"{ck}/unpacked")
            assert rows == args.records
            print(f"(c) as (b2) with one task per topic-partition ({n_tp} tasks): {one_s:.2f} s, "
                  f"{rows / one_s:,.0f} rec/s; packed (b2) is {one_s / lean_s:.2f}x faster")
    spark.stop()
    return 0

