"""Throughput and scale modes: a backlog produced up front, the job run once with availableNow over it.

throughput: N topics (200) x 3 partitions, M Avro records (2,000,000, ~490 B, 12 fields),
routed one table per topic plus one fan-in table, the job run with availableNow from a clean
checkpoint after a warm-up query. Same run: raw confluent-kafka consume (the ceiling) and
the hand-written baseline (scripts/perf/baseline.py, on fewer topics, compared as a rate).
scale: 500 topics -> 500 tables (no fan-in), same figures.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import NAMESPACE, catalog_properties, job_config
from scripts.perf.services import Stack

CEILING_RUNS = 3


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
        "catalog": {"name": "bench", "properties": catalog_properties(root)},
        "job": {"name": "warmup", "checkpoint": str(root / "checkpoint-warmup")},
        "tables": {"allowed_namespaces": ["warm", "ops"]},
        "routes": [{"name": "warm", "topic": r"warmup\.orders\d+", "table": "warm.orders"}],
    })
    query, _ = start_query(spark, config, available_now=True)
    query.awaitTermination()


class MetricsCost:
    """--metrics: times the dispatcher's metric updates and a scrape every second during the run.

    A scrape's wall time, seen by the scraper, includes waiting for a core and the
    GIL on a machine the job keeps busy; what the job pays is the CPU its handler
    thread spends (``time.thread_time`` around ``do_GET``), reported beside it.
    """

    def __init__(self, dispatcher) -> None:
        import threading

        from router.driver import metrics as metrics_module

        self.metrics, self.update_s, self.scrapes, self.scrape_s, self.bytes = dispatcher.metrics, 0.0, 0, 0.0, 0
        self.handler_cpu_s = 0.0
        handler = metrics_module._Handler
        self._restore = (handler, handler.do_GET)
        serve = handler.do_GET

        def counted(this):
            t0 = time.thread_time()
            try:
                return serve(this)
            finally:
                self.handler_cpu_s += time.thread_time() - t0

        handler.do_GET = counted
        observe = self.metrics.observe_batch

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                return observe(*a, **k)
            finally:
                self.update_s += time.perf_counter() - t0

        self.metrics.observe_batch = timed
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def loop(self) -> None:
        import urllib.request

        while not self.done.wait(1.0):
            t0 = time.perf_counter()
            body = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics.port}/metrics", timeout=10).read()
            self.scrape_s += time.perf_counter() - t0
            self.scrapes += 1
            self.bytes = len(body)

    def start(self) -> "MetricsCost":
        self.thread.start()
        return self

    def stop(self, job_seconds: float) -> dict:
        self.done.set()
        self.thread.join(15)
        handler, serve = self._restore
        handler.do_GET = serve
        spent = self.update_s + self.scrape_s
        return {"update_seconds": round(self.update_s, 4), "scrapes": self.scrapes,
                "scrape_seconds": round(self.scrape_s, 4), "scrape_bytes": self.bytes,
                "handler_cpu_seconds": round(self.handler_cpu_s, 4),
                "job_seconds": round(job_seconds, 3), "share_of_job_time": round(spent / job_seconds, 5),
                # the job's own cost: update wall (on the batch's thread) + the handler's CPU, against one core
                "job_cpu_share_of_one_core": round((self.update_s + self.handler_cpu_s) / job_seconds, 5)}


def run_throughput(args, stack: Stack, root: Path) -> dict:
    from router.driver.job import build_spark, start_query
    from router.source import KafkaSourceOptions
    from scripts.perf.baseline import run_baseline
    from scripts.perf.probe import (CpuSampler, MemorySampler, RecordingDispatcher, batch_rows, cpu_per_second,
                                    data_file_stats, load_average, settle_broker)

    result: dict = {"mode": args.mode, "topics": args.topics, "partitions": args.partitions,
                    "records": args.records, "fan_in": args.fan_in, "batch_records": args.batch_records,
                    "catch_up": args.catch_up, "commit_in": args.commit_in, "group_commit": args.group_commit,
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
    result["broker_settle_seconds"] = settle_broker(stack.broker)
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
    result["broker_settle_seconds_after_warm_up"] = settle_broker(stack.broker)
    print(f"  the broker settled {result['broker_settle_seconds_after_warm_up']:.0f} s after the warm-up", flush=True)

    print(f"running the job (availableNow, clean checkpoint) over {args.records:,} records ...", flush=True)
    memory = MemorySampler().start()
    profiler = None
    if args.profile:
        from scripts.perf.pyspy import Profiler

        profiler = Profiler(Path(args.profile)).start()
    cpu = CpuSampler()
    cpu_before = cpu.sample()
    t_start = time.time()
    query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher,
                                    listeners=[lambda s: print("  " + s.line(), flush=True)])
    scraping = MetricsCost(dispatcher).start() if getattr(dispatcher, "metrics", None) is not None else None
    query.awaitTermination()
    t_end = time.time()
    if scraping is not None:
        result["metrics"] = scraping.stop(t_end - t_start)
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
