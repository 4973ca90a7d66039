"""icerouter at scale: hundreds of topics into Iceberg, against a hand-written baseline and the raw ceiling.

    python scripts/bench.py [--mode throughput|scale|freshness|soak|commit-scaling] [--topics N]
                            [--records M] [--commit-in tasks|driver] [--json FILE] [--workdir DIR] ...

throughput (default): N topics (200) x 3 partitions, M Avro records (2,000,000, ~490 B, 12
    fields) produced up front, routed one table per topic plus one fan-in table, the job run
    with availableNow from a clean checkpoint. Same run: raw confluent-kafka consume (ceiling)
    and the hand-written baseline (on fewer topics, compared as a rate).
scale: 500 topics -> 500 tables (no fan-in), same figures.
freshness: a producer at a steady rate (5,000 records/s over 200 topics) for --duration
    seconds (300) against the job with a 10 s trigger; reports commit time - record
    timestamp percentiles and per-table commit latency over time.
soak: the live job, --soak-tables topics (20) at --rate 2,000 records/s, 1 s trigger, until
    --batches (500): commit latency of the last 10 batches vs the first 10 (bench_soak.py).
commit-scaling: N topics (200) -> N tables in local[1] / local[2] / a 2 x 1-core standalone
    cluster, commits in tasks and on the driver: tables per second (bench_scaling.py).
--commit-in sets job.commit_in_tasks (tasks: in the Spark tasks, driver: on the driver).

A local broker (noida-db), the registry emulator and a SQLite catalog are started in
--workdir (a temporary directory by default) and stopped at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

import bench_data as data  # noqa: E402
from bench_report import render  # noqa: E402

# scale measures a batch that commits every table: its backlog is shared evenly (kafka.catch_up: even),
# where the job's default (turns) would commit a quarter of the tables per batch
MODE_DEFAULTS = {"throughput": {"topics": 200, "fan_in": True, "catch_up": "turns"},
                 "scale": {"topics": 500, "fan_in": False, "catch_up": "even"},
                 "freshness": {"topics": 200, "fan_in": True, "catch_up": "turns"},
                 "soak": {"topics": 0, "fan_in": False, "catch_up": "turns"},
                 "commit-scaling": {"topics": 200, "fan_in": False, "catch_up": "turns"}}
NAMESPACE = "bench"
CEILING_RUNS = 3
FAN_IN_TABLE = f"{NAMESPACE}.all_orders"


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=sorted(MODE_DEFAULTS), default="throughput")
    ap.add_argument("--topics", type=int, help="default 200 (500 in scale mode)")
    ap.add_argument("--partitions", type=int, default=3)
    ap.add_argument("--records", type=int, default=2_000_000)
    ap.add_argument("--batch-records", type=int, default=500_000, help="kafka.max_records_per_batch")
    ap.add_argument("--no-fan-in", action="store_true", help="no fan-in table (scale mode never has one)")
    ap.add_argument("--catch-up", choices=("turns", "even"),
                    help="kafka.catch_up: how a backlog beyond --batch-records is shared (default: turns; scale: even)")
    ap.add_argument("--baseline-topics", type=int, default=20, help="topics the baseline reads (0: skip)")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the raw confluent-kafka consume")
    ap.add_argument("--rate", type=float, help="records/s: freshness (default 5000), soak (default 2000)")
    ap.add_argument("--duration", type=float, default=300.0, help="freshness: producer seconds")
    ap.add_argument("--trigger", type=float, help="trigger seconds: freshness (default 10), soak (default 1)")
    ap.add_argument("--batches", type=int, default=500, help="soak: batches to run")
    ap.add_argument("--soak-tables", type=int, default=20, help="soak: topics, one table each")
    ap.add_argument("--broker-retention", type=float, default=30.0,
                    help="soak, freshness: delete records older than this many seconds, as Kafka's retention.ms would "
                         "(the local broker ignores it and its CPU grows with what it holds; 0: keep all)")
    ap.add_argument("--nice-load", type=int, default=0,
                    help="soak: run the broker and the producer at this nice value (a diagnostic: in production "
                         "they are machines of their own; the default 0 is the measurement)")
    ap.add_argument("--commit-in", choices=("tasks", "driver"), default="tasks",
                    help="job.commit_in_tasks: where tables are committed (commit-scaling runs both)")
    ap.add_argument("--scaling-batches", type=int, default=3, help="commit-scaling: measured batches")
    ap.add_argument("--scaling-records", type=int, default=100, help="commit-scaling: records per topic per batch")
    ap.add_argument("--scaling-configs", help="commit-scaling: comma-separated configuration names (default all)")
    ap.add_argument("--commit-threads", type=int, help="job.commit_threads (job default 8)")
    ap.add_argument("--expire-every", type=int, help="maintenance.expire_every_commits (job default)")
    ap.add_argument("--max-snapshot-age", type=int, help="maintenance.max_snapshot_age_seconds (job default)")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--json", dest="json_file", help="also write the results as JSON")
    ap.add_argument("--profile", help="py-spy the driver and Python workers during the job; collapsed stacks here")
    args = ap.parse_args(argv)
    defaults = MODE_DEFAULTS[args.mode]
    args.topics = args.topics or defaults["topics"]
    args.fan_in = defaults["fan_in"] and not args.no_fan_in
    args.catch_up = args.catch_up or defaults["catch_up"]
    args.trigger = args.trigger or (1.0 if args.mode == "soak" else 10.0)
    args.rate = args.rate or (2000.0 if args.mode == "soak" else 5000.0)
    return args


def commit_setting(commit_in: str) -> dict:
    """`job.commit_in_tasks` for the config dict (tasks: in the Spark tasks, driver: on the driver)."""
    return {"commit_in_tasks": commit_in == "tasks"}


def job_config(args, root: Path, bootstrap: str, registry_url: str, client: dict, *,
               pattern: str = r"orders\..*", spark: dict | None = None, commit_in: str | None = None):
    """The job's config for a run; `spark` replaces the job.spark settings (master and all)."""
    from router.config import parse_config

    routes = [{"name": "per-topic", "topic": pattern, "table": NAMESPACE + ".{topic}"}]
    if args.fan_in:
        routes.append({"name": "fan-in", "topic": pattern, "table": FAN_IN_TABLE})
    maintenance = {}
    if args.expire_every:
        maintenance["expire_every_commits"] = args.expire_every
    if args.max_snapshot_age:
        maintenance["max_snapshot_age_seconds"] = args.max_snapshot_age
    return parse_config({
        "kafka": {"bootstrap_servers": bootstrap, "pattern": pattern, "client": client,
                  "max_records_per_batch": args.batch_records, "catch_up": args.catch_up},
        "registry": {"url": registry_url},
        "catalog": {"name": "bench", "properties": {
            "type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": (root / "warehouse").as_uri()}},
        "job": {"name": "bench", "checkpoint": str(root / "checkpoint"), "trigger_seconds": args.trigger,
                **({"commit_threads": args.commit_threads} if args.commit_threads else {}),
                **commit_setting(commit_in or args.commit_in),
                "spark": spark or {"spark.master": "local[2]", "spark.driver.memory": "4g"}},
        "tables": {"allowed_namespaces": [NAMESPACE, "ops", "warm"]},
        "routes": routes,
        "maintenance": maintenance,
    })


class Stack:
    """Broker + registry emulator for one benchmark run."""

    def __init__(self, root: Path):
        from router.devstack.broker import LocalBroker, client_config
        from router.devstack.registry_server import RegistryServer

        self.root = root
        self.broker = LocalBroker(data_dir=str(root / "broker"), tied_to_parent=True)
        self.registry = RegistryServer(data_file=str(root / "registry.json"))
        self._client_config = client_config

    def __enter__(self):
        self.bootstrap = self.broker.start()
        self.registry_url = self.registry.start()
        self.conf = {k: str(v) for k, v in self._client_config(self.bootstrap).items()}
        self.client = {k: v for k, v in self.conf.items() if k != "bootstrap.servers"}
        return self

    def __exit__(self, *exc):
        self.registry.stop()
        self.broker.stop(remove_data=True)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def warm_up(spark, args, stack: Stack, root: Path) -> None:
    """A tiny run of the job on its own topic: Python workers, imports and the catalog are warm afterwards."""
    from router.config import parse_config
    from router.driver.job import start_query

    # a topic per task slot and then some: a task keeps a topic's partitions together, so one topic
    # would start one Python worker and leave the others to start inside the measured run (~1.5 s)
    topics = [f"warmup.orders{i}" for i in range(8)]
    ids = data.register_topics(stack.registry_url, topics)
    stack.broker.create_topics(topics, partitions=1)
    data.produce_bulk(stack.conf, ids, 1, 8000, data.payload_pool(64))
    config = parse_config({
        "kafka": {"bootstrap_servers": stack.bootstrap, "topics": topics, "client": stack.client},
        "registry": {"url": stack.registry_url},
        "catalog": {"name": "bench", "properties": {
            "type": "sql", "uri": f"sqlite:///{root / 'catalog.db'}", "warehouse": (root / "warehouse").as_uri()}},
        "job": {"name": "warmup", "checkpoint": str(root / "checkpoint-warmup")},
        "tables": {"allowed_namespaces": ["warm", "ops"]},
        "routes": [{"name": "warm", "topic": r"warmup\.orders\d+", "table": "warm.orders"}],
    })
    query, _ = start_query(spark, config, available_now=True)
    query.awaitTermination()


def batch_rows(batches, cores: int = 2) -> list[dict]:
    """Per batch. `commit_work_s`: the driver's commit phase plus the commit seconds of the tasks spread
    over the executor cores, the commit's share of the batch wherever it ran (tasks or driver)."""
    rows = []
    for b in batches:
        s = b.stats
        t = s.task_seconds
        work = s.commit_seconds + t.get("commit", 0.0) / cores
        rows.append({
            "batch": s.batch_id, "records": s.records, "rows_written": s.rows_written,
            "tables": s.tables_committed, "source_s": t.get("source", 0.0), "decode_s": t.get("decode", 0.0),
            "evolve_s": t.get("evolve", 0.0), "write_s": t.get("write", 0.0),
            "dispatch_s": round(s.dispatch_seconds, 3), "commit_s": round(s.commit_seconds, 3),
            "total_s": round(s.total_seconds, 3),
            "task_commit_s": round(t.get("commit", 0.0), 3), "commit_work_s": round(work, 3),
            "tables_per_s": round(s.tables_committed / work, 1) if work else 0.0,
            "dead_letters": s.dead_letters, "failed": s.tables_failed})
    return rows


def run_throughput(args, stack: Stack, root: Path) -> dict:
    from bench_baseline import run_baseline
    from bench_probe import (CpuSampler, MemorySampler, RecordingDispatcher, cpu_per_second, data_file_stats,
                             wait_until_idle)
    from router.driver.job import build_spark, start_query
    from router.source import KafkaSourceOptions

    result: dict = {"mode": args.mode, "topics": args.topics, "partitions": args.partitions,
                    "records": args.records, "fan_in": args.fan_in, "batch_records": args.batch_records,
                    "catch_up": args.catch_up, "commit_in": args.commit_in,
                    "load_before": load_average()}
    topics = [f"orders.{i:03d}" for i in range(args.topics)]
    print(f"setting up {args.topics} topics x {args.partitions} partitions ...", flush=True)
    stack.broker.create_topics(topics, partitions=args.partitions, timeout=120)
    ids = data.register_topics(stack.registry_url, topics)
    pool = data.payload_pool()
    result["value_bytes_mean"] = round(statistics.mean(len(p) for p in pool) + 5, 1)
    print(f"producing {args.records:,} records (~{result['value_bytes_mean']:.0f} B) ...", flush=True)
    seconds = data.produce_bulk(stack.conf, ids, args.partitions, args.records, pool)
    result["produce_records_per_s"] = round(args.records / seconds)
    # the broker persists what was produced for a while; the ceiling and the job are measured after it
    result["broker_settle_seconds"] = wait_until_idle(stack.broker.pid)
    print(f"  the broker settled {result['broker_settle_seconds']:.0f} s after the production", flush=True)

    if not args.no_ceiling:
        print("raw confluent-kafka consume (ceiling) ...", flush=True)
        # in its own process, so its buffers do not count as the driver's memory
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        # the median of CEILING_RUNS drains: one drain on this broker measured 210,000-512,000 records/s
        # across a day's runs, and the share of it is a target
        cpu = CpuSampler()
        before = cpu.sample()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            raws = [pool.submit(data.raw_consume, stack.conf, topics, args.partitions, args.records).result()
                    for _ in range(CEILING_RUNS)]
        raw = statistics.median(raws)
        # cores: the broker's share (the consumer's own process lives between the two samples: machine_busy only)
        result["ceiling"] = {"seconds": round(raw, 3), "records_per_s": round(args.records / raw),
                             "runs_records_per_s": [round(args.records / r) for r in raws],
                             "cores": cpu_per_second(before, cpu.sample())}

    config = job_config(args, root, stack.bootstrap, stack.registry_url, stack.client)
    spark = build_spark(config)
    print("warming up Spark workers ...", flush=True)
    warm_up(spark, args, stack, root)
    # the warm-up produced to a topic of its own: the broker rewrites its whole store once more
    result["broker_settle_seconds_after_warm_up"] = wait_until_idle(stack.broker.pid)
    print(f"  the broker settled {result['broker_settle_seconds_after_warm_up']:.0f} s after the warm-up", flush=True)

    print(f"running the job (availableNow, clean checkpoint) over {args.records:,} records ...", flush=True)
    memory = MemorySampler().start()
    profiler = None
    if args.profile:
        from bench_profile import Profiler

        profiler = Profiler(Path(args.profile)).start()
    cpu = CpuSampler()
    cpu_before = cpu.sample()
    t_start = time.time()
    query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher,
                                    listeners=[lambda s: print("  " + s.line(), flush=True)])
    query.awaitTermination()
    t_end = time.time()
    result["cores"] = cpu_per_second(cpu_before, cpu.sample())  # who took the 2 cores while the job ran
    if profiler is not None:
        result["profile"] = profiler.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    result["memory_peak_mb"] = memory.stop()
    records = sum(b.stats.records for b in dispatcher.batches)
    first, last = dispatcher.batches[0].started, dispatcher.batches[-1].ended
    ours = {"records_read": records, "rows_written": sum(b.stats.rows_written for b in dispatcher.batches),
            "batches": len(dispatcher.batches), "seconds": round(last - first, 3),
            "records_per_s": round(records / (last - first)),
            "seconds_from_query_start": round(t_end - t_start, 3),
            "tables_committed": sum(b.stats.tables_committed for b in dispatcher.batches),
            "commit_seconds": round(sum(b.stats.commit_seconds for b in dispatcher.batches), 3),
            "task_commit_seconds": round(sum(b.stats.task_seconds.get("commit", 0.0) for b in dispatcher.batches), 3),
            "dead_letters": sum(b.stats.dead_letters for b in dispatcher.batches),
            "failed_tables": sum(b.stats.tables_failed for b in dispatcher.batches)}
    cores = spark.sparkContext.defaultParallelism
    ours["commit_work_seconds"] = round(ours["commit_seconds"] + ours["task_commit_seconds"] / cores, 3)
    ours["tables_per_commit_s"] = round(ours["tables_committed"] / ours["commit_work_seconds"], 1)
    result["ours"] = ours
    result["executor_cores"] = cores
    result["batches"] = batch_rows(dispatcher.batches, cores)
    commits = [c.seconds for c in dispatcher.commits if c.status == "committed"]
    result["commit_latency_s"] = {"p50": round(statistics.median(commits), 4),
                                  "max": round(max(commits), 4)} if commits else {}
    result["files"] = data_file_stats(root / "warehouse", NAMESPACE)
    if records != args.records:
        print(f"WARNING: the job read {records:,} of {args.records:,} records", flush=True)

    if args.baseline_topics:
        chosen = topics[: args.baseline_topics]
        print(f"hand-written baseline over {len(chosen)} topics ...", flush=True)
        options = KafkaSourceOptions(bootstrap=stack.bootstrap, topics=tuple(chosen),
                                     client_config=stack.client, max_records_per_trigger=args.batch_records)
        result["baseline"] = run_baseline(spark, options, chosen, stack.registry_url, config.catalog.load(),
                                          "baseline", str(root / "checkpoint-baseline"))
    spark.stop()
    result["load_after"] = load_average()
    return result


def main(argv: list[str] | None = None) -> int:
    import signal

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker and clean up on kill
    root = Path(args.workdir or tempfile.mkdtemp(prefix="icerouter-bench-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    print(f"icerouter bench, mode {args.mode}, working in {root}; load average {load_average()}", flush=True)
    try:
        with Stack(root) as stack:
            if args.mode == "freshness":
                from bench_fresh import run_freshness

                result = run_freshness(args, stack, root)
            elif args.mode == "soak":
                from bench_soak import run_soak

                result = run_soak(args, stack, root)
            elif args.mode == "commit-scaling":
                from bench_scaling import run_commit_scaling

                result = run_commit_scaling(args, stack, root)
            else:
                result = run_throughput(args, stack, root)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print(render(result))
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(result, indent=1, default=str))
        print(f"results written to {args.json_file}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
