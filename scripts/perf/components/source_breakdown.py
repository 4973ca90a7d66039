"""Where a record's time goes in the source: fetch from the broker, copy into Arrow, decode.

    python scripts/bench_source.py --breakdown [--workload debezium|json|avro] [--topics 20] [--records 100000]
                                   [--batches 4] [--rounds 3] [--json FILE]

The records of a live benchmark (debezium: the upsert mode's Debezium JSON events with their schema,
~2 KB; json: the formats mode's plain JSON, ~770 B) are produced over --topics x 3 partitions to a
local broker, which then settles. Each round, in one process:

* raw: one confluent-kafka consumer drains every partition (scripts/perf/workload.raw_consume);
* reader: router.source.fetch.read_ranges reads every partition in --batches slices, as the batches
  of a catch-up shared evenly do (each read starts where the last stopped: the broker sends each
  partition's whole tail with every fetch, whatever the consumer's fetch limits say);
* decode: registry.unframed.decode_unframed on each batch's values, as the route's format reads them
  (connect_json, json, raw).

Per record: wall microseconds of each, the broker's CPU, the reader's CPU split into the Python
thread (the consume loop and the Arrow copy, ``_BatchBuilder.flush``, timed apart) and librdkafka's
threads (process CPU - Python thread CPU). Medians over the rounds after the first (a warm-up).
"""

from __future__ import annotations

import statistics
import time

from scripts.perf.report import emit

WORKLOADS = ("debezium", "json", "avro")


def produce(conf: dict, broker, workload: str, topics: list[str], records: int) -> float:
    """The workload's records round-robin over `topics` x 3 partitions; seconds."""
    from scripts.perf import workload as data

    broker.create_topics(topics, partitions=3, timeout=120)
    if workload in ("json", "avro"):  # avro: the Avro values without their framing, read raw
        pool = data.json_pool() if workload == "json" else data.payload_pool()
        return data.produce_bulk(conf, {t: 0 for t in topics}, 3, records, pool, framed=False)
    from scripts.perf.live.upsert import make_sources, produce as produce_cdc

    sources = make_sources("", topics, fmt="json")
    return produce_cdc(conf, sources, lambda s: s.snapshot(records // len(topics)), 3)["seconds"]


def _ends(conf: dict, topics: list[str]) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**conf, "group.id": "bench-breakdown"})
    try:
        return {(t, p): consumer.get_watermark_offsets(TopicPartition(t, p), timeout=30)[1]
                for t in topics for p in range(3)}
    finally:
        consumer.close()


def one_round(conf: dict, options_json: str, broker_pid: int, topics: list[str], ends: dict, batches: int,
              fmt) -> dict:
    import router.source.fetch as fetch
    from registry.unframed import decode_unframed
    from router.source.offsets import Range
    from scripts.perf.probe import _cpu_seconds
    from scripts.perf.workload import raw_consume

    total = sum(ends.values())
    out = {}
    cpu, broker, wall = time.process_time(), _cpu_seconds(broker_pid), time.perf_counter()
    raw_consume(conf, topics, 3, total)
    out["raw"] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "broker_cpu": _cpu_seconds(broker_pid) - broker}

    timed = {"consume": 0.0, "flush": 0.0, "messages": 0}
    plain_next, plain_flush = fetch._next_messages, fetch._BatchBuilder.flush

    def next_messages(*a, **k):
        started = time.perf_counter()
        messages = plain_next(*a, **k)
        timed["consume"] += time.perf_counter() - started
        timed["messages"] += len(messages)
        return messages

    def flush(self, cur):
        started = time.perf_counter()
        batch = plain_flush(self, cur)
        timed["flush"] += time.perf_counter() - started
        return batch

    fetch._next_messages, fetch._BatchBuilder.flush = next_messages, flush
    read = []
    try:
        cpu, thread, broker = time.process_time(), time.thread_time(), _cpu_seconds(broker_pid)
        wall = time.perf_counter()
        for i in range(batches):
            ranges = [Range(t, p, end * i // batches, end * (i + 1) // batches) for (t, p), end in ends.items()]
            read.append(list(fetch.read_ranges(options_json, ranges)))
        out["reader"] = {"wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                         "python_thread_cpu": time.thread_time() - thread,
                         "broker_cpu": _cpu_seconds(broker_pid) - broker, **timed}
    finally:
        fetch._next_messages, fetch._BatchBuilder.flush = plain_next, plain_flush
    assert sum(b.num_rows for bs in read for b in bs) == total
    wall, decoded = time.perf_counter(), 0
    for batch in (b for bs in read for b in bs):
        result = decode_unframed(None, fmt, batch.column("value"), batch.column("key"))
        decoded += sum(g.batch.num_rows for g in result.groups)
    out["decode"] = {"wall": time.perf_counter() - wall, "rows": decoded}
    return out


def per_record(rounds: list[dict], total: int) -> dict:
    """Microseconds a record, medians of the rounds after the first."""
    steady = rounds[1:] or rounds

    def med(fn) -> float:
        return round(statistics.median(fn(r) for r in steady) * 1e6 / total, 2)

    return {
        "raw_consume": {"wall_us": med(lambda r: r["raw"]["wall"]), "client_cpu_us": med(lambda r: r["raw"]["cpu"]),
                        "broker_cpu_us": med(lambda r: r["raw"]["broker_cpu"])},
        "fetch": {"wall_us": med(lambda r: r["reader"]["wall"] - r["reader"]["flush"]),
                  "broker_cpu_us": med(lambda r: r["reader"]["broker_cpu"]),
                  "librdkafka_threads_cpu_us": med(lambda r: r["reader"]["cpu"] - r["reader"]["python_thread_cpu"]),
                  "python_consume_loop_cpu_us": med(lambda r: r["reader"]["python_thread_cpu"] - r["reader"]["flush"]),
                  "in_consume_calls_wall_us": med(lambda r: r["reader"]["consume"])},
        "copy_into_arrow": {"wall_us": med(lambda r: r["reader"]["flush"])},
        "decode": {"wall_us": med(lambda r: r["decode"]["wall"])},
        "messages_per_record": round(statistics.median(r["reader"]["messages"] for r in steady) / total, 2),
    }


def run_breakdown(args, conf: dict, broker) -> int:
    from registry.formats import ValueFormat
    from router.source import KafkaSourceOptions
    from scripts.perf.probe import load_average, settle_broker

    if broker is None:
        raise SystemExit("--breakdown starts its own broker (no --bootstrap)")
    topics = [f"breakdown.{i:03d}" for i in range(args.topics)]
    result = {"benchmark": "source_breakdown", "workload": args.workload, "topics": args.topics, "partitions": 3,
              "batches": args.batches, "rounds": args.rounds, "load_before": load_average()}
    print(f"producing {args.records:,} {args.workload} records over {args.topics} topics x 3 partitions ...",
          flush=True)
    result["produce_s"] = round(produce(conf, broker, args.workload, topics, args.records), 1)
    result["broker_settle_s"] = settle_broker(broker)
    ends = _ends(conf, topics)
    total = result["records"] = sum(ends.values())
    client = {k: v for k, v in conf.items() if k != "bootstrap.servers"}
    options = KafkaSourceOptions(conf["bootstrap.servers"], topics=tuple(topics), client_config=client).to_json()
    fmt = ValueFormat({"debezium": "connect_json", "json": "json", "avro": "raw"}[args.workload])
    rounds = []
    for i in range(args.rounds):
        rounds.append(one_round(conf, options, broker.pid, topics, ends, args.batches, fmt))
        print(f"  round {i}: raw {total / rounds[-1]['raw']['wall']:,.0f}/s, reader "
              f"{total / rounds[-1]['reader']['wall']:,.0f}/s, decode {total / rounds[-1]['decode']['wall']:,.0f}/s",
              flush=True)
    result["per_record"] = per_record(rounds, total)
    result["runs"] = [{k: {m: round(v, 3) for m, v in part.items()} for k, part in r.items()} for r in rounds]
    result["load_after"] = load_average()
    return emit(result, args.json_file)
