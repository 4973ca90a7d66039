"""Formats mode: the live job on the same records framed as Avro, as plain JSON and read raw, one run.

The throughput workload's records (12 fields, ~490 B as Avro) are produced twice: Avro with the
registry's framing to `fmtavro.NNN`, and the same records as plain JSON objects (~800 B) to
`fmtjson.NNN`. After a warm-up the job drains each backlog with availableNow from a clean
checkpoint, one table per topic, in turn, --format-rounds times (5; each format leads a round in turn,
the broker settles after every drain; the machine's drift hits every format):
`registry` on the Avro topics, `json` (columns inferred) on the JSON topics, and `raw` on the Avro
topics (key and value bytes). Each rate is reported as a ratio to the Avro rate of the same run
(medians over the rounds; targets: inferred JSON >= 0.8x, raw >= 1.5x), with each drain's CPU seconds
by role (broker, Spark's Python workers, JVM, driver). Every table must hold exactly its topic's records.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import catalog_properties, group_commit
from scripts.perf.services import Stack

TARGETS = {"json": 0.80, "raw": 1.50}
TOPIC_SETS = {"avro": "fmtavro", "json": "fmtjson", "raw": "fmtavro"}
ROUTE_FORMATS = {"avro": None, "json": "json", "raw": "raw"}


def produce_unframed(conf: dict, topics: list[str], partitions: int, records: int, pool: list[bytes]) -> float:
    """produce_bulk's round robin, the values as they are (no registry framing)."""
    return data.produce_bulk(conf, {t: 0 for t in topics}, partitions, records, pool, framed=False)


def drain(spark, stack: Stack, root: Path, fmt: str, run: int, topics: list[str], args) -> dict:
    from router.catalog import load_table
    from router.config import parse_config
    from router.driver.job import start_query
    from scripts.perf.probe import RecordingDispatcher

    namespace = f"fmt_{fmt}_{run}"
    prefix = TOPIC_SETS[fmt]
    route = {"name": fmt, "topic": rf"{prefix}\.\d+", "table": f"{namespace}.{{topic}}"}
    if ROUTE_FORMATS[fmt]:
        route["format"] = ROUTE_FORMATS[fmt]
    config = parse_config({
        "kafka": {"bootstrap_servers": stack.bootstrap, "topics": topics, "client": stack.client,
                  "max_records_per_batch": args.batch_records},
        "registry": {"url": stack.registry_url},
        "catalog": {"name": "bench", "properties": catalog_properties(root)},
        "job": {"name": f"bench_{namespace}", "checkpoint": str(root / f"checkpoint-{namespace}"),
                "commit_consumer_group": group_commit(args)},
        "tables": {"allowed_namespaces": [namespace, "ops"], "metadata_columns": True},
        "routes": [route],
        "dlq": {"table": f"ops.dead_letters_{namespace}"},
    })
    query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    read = sum(b.stats.records for b in dispatcher.batches)
    first, last = dispatcher.batches[0].started, dispatcher.batches[-1].ended
    rows = sum(int(s.summary["added-records"]) for t in topics
               for s in load_table(config.catalog, f"{namespace}.{t.replace('.', '_')}", refresh=True).snapshots()
               if "added-records" in s.summary.additional_properties)
    dead = sum(b.stats.dead_letters for b in dispatcher.batches)
    if read != args.records or rows != args.records or dead:
        raise SystemExit(f"{fmt} run {run}: read {read:,}, wrote {rows:,}, {dead} dead letters; "
                         f"expected {args.records:,} records in the tables")
    return {"records": read, "batches": len(dispatcher.batches), "seconds": round(last - first, 3),
            "records_per_s": round(read / (last - first)),
            "task_source_s": round(sum(b.stats.task_seconds.get("source", 0.0) for b in dispatcher.batches), 3),
            "task_decode_s": round(sum(b.stats.task_seconds.get("decode", 0.0) for b in dispatcher.batches), 3),
            "task_write_s": round(sum(b.stats.task_seconds.get("write", 0.0) for b in dispatcher.batches), 3)}


def run_formats(args, stack: Stack, root: Path) -> dict:
    from router.config import parse_config
    from router.driver.job import build_spark
    from scripts.perf.live.throughput import warm_up
    from scripts.perf.probe import CpuSampler, cpu_seconds, load_average, settle_broker

    formats = [f for f in args.formats.split(",") if f]
    if "avro" not in formats:
        formats.insert(0, "avro")  # the baseline of every ratio
    result: dict = {"mode": "formats", "topics": args.topics, "partitions": args.partitions,
                    "records_per_format": args.records, "batch_records": args.batch_records, "formats": formats,
                    "load_before": load_average()}
    pools = {"fmtavro": data.payload_pool(), "fmtjson": data.json_pool()}
    sets = {TOPIC_SETS[f] for f in formats}
    topics = {prefix: [f"{prefix}.{i:03d}" for i in range(args.topics)] for prefix in sets}
    result["value_bytes_mean"] = {p: round(statistics.mean(len(v) for v in pools[p]) + (5 if p == "fmtavro" else 0), 1)
                                  for p in sets}
    for prefix in sorted(sets):
        print(f"producing {args.records:,} records to {args.topics} {prefix} topics ...", flush=True)
        stack.broker.create_topics(topics[prefix], partitions=args.partitions, timeout=120)
        if prefix == "fmtavro":
            ids = data.register_topics(stack.registry_url, topics[prefix])
            data.produce_bulk(stack.conf, ids, args.partitions, args.records, pools[prefix])
        else:
            produce_unframed(stack.conf, topics[prefix], args.partitions, args.records, pools[prefix])
    result["broker_settle_seconds"] = settle_broker(stack.broker)

    spark = build_spark(parse_config({"kafka": {"bootstrap_servers": stack.bootstrap, "topics": ["x"]},
                                      "registry": {"url": stack.registry_url},
                                      "job": {"spark": {"spark.driver.memory": "4g"}}}))
    print("warming up Spark workers ...", flush=True)
    warm_up(spark, args, stack, root)
    settle_broker(stack.broker)
    runs: dict[str, list[dict]] = {f: [] for f in formats}
    result["rounds"] = args.format_rounds
    result["group_commit"] = args.group_commit
    cpu = CpuSampler()
    for run in range(args.format_rounds):
        for fmt in formats[run % len(formats):] + formats[:run % len(formats)]:  # each format leads a round
            before = cpu.sample()
            runs[fmt].append(drain(spark, stack, root, fmt, run, topics[TOPIC_SETS[fmt]], args))
            # where the drain's CPU went (query start included): the broker's share tells its rounds apart
            runs[fmt][-1]["cpu_seconds"] = cpu_seconds(before, cpu.sample())
            print(f"  {fmt} run {run}: {runs[fmt][-1]['records_per_s']:,} records/s", flush=True)
            # what the broker does after a run (a group commit rewrites its store) must not land in the next
            runs[fmt][-1]["broker_settle_after_s"] = settle_broker(stack.broker)
    spark.stop()
    rates = {fmt: statistics.median(r["records_per_s"] for r in rs) for fmt, rs in runs.items()}
    # the ratio of each round's rates too: a round's formats ran back to back on the same machine state
    result["ratio_per_round"] = {fmt: [round(r["records_per_s"] / a["records_per_s"], 3)
                                       for r, a in zip(rs, runs["avro"])] for fmt, rs in runs.items()}
    result["runs"] = runs
    result["records_per_s"] = {fmt: round(v) for fmt, v in rates.items()}
    result["ratio_to_avro"] = {fmt: round(v / rates["avro"], 3) for fmt, v in rates.items()}
    result["targets"] = {f: t for f, t in TARGETS.items() if f in rates}
    result["within_targets"] = {f: result["ratio_to_avro"][f] >= t for f, t in result["targets"].items()}
    result["load_after"] = load_average()
    return result


def combine(results: list[dict]) -> dict:
    """Several formats runs of the same code as one result: every round of every run, the ratios as the
    median of the rounds' ratios (a round's formats ran back to back), the rates as medians of all drains.

    One run of 5 rounds decided nothing here: three runs of one build gave JSON x0.66, x0.88 and x0.82."""
    formats = results[0]["formats"]
    runs = {f: [r for res in results for r in res["runs"][f]] for f in formats}
    per_round = {f: [v for res in results for v in res["ratio_per_round"][f]] for f in formats}
    out = {key: results[0][key] for key in ("mode", "topics", "partitions", "records_per_format", "batch_records",
                                            "formats", "value_bytes_mean", "group_commit")}
    out.update(runs_combined=len(results), rounds=sum(res["rounds"] for res in results),
               load_before=results[0]["load_before"], load_after=results[-1]["load_after"],
               ratio_per_run={f: [res["ratio_to_avro"][f] for res in results] for f in formats},
               ratio_per_round=per_round, runs=runs,
               records_per_s={f: round(statistics.median(r["records_per_s"] for r in rs)) for f, rs in runs.items()},
               ratio_to_avro={f: round(statistics.median(v), 3) for f, v in per_round.items()})
    out["targets"] = {f: t for f, t in TARGETS.items() if f in out["ratio_to_avro"]}
    out["within_targets"] = {f: out["ratio_to_avro"][f] >= t for f, t in out["targets"].items()}
    return out


if __name__ == "__main__":  # python -m scripts.perf.live.formats combine RUN.json ... --json OUT.json
    import argparse
    import json

    ap = argparse.ArgumentParser(description="combine formats runs of one build into one result")
    ap.add_argument("action", choices=("combine",))
    ap.add_argument("runs", nargs="+", help="results of `scripts/bench.py --mode formats --json`")
    ap.add_argument("--json", dest="json_file", required=True)
    args = ap.parse_args()
    combined = combine([json.loads(Path(p).read_text()) for p in args.runs])
    Path(args.json_file).write_text(json.dumps(combined, indent=1) + "\n")
    print({f: combined["ratio_to_avro"][f] for f in combined["formats"]}, "over", combined["rounds"], "rounds")
