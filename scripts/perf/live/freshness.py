"""Freshness mode: a steady producer against the live job; commit time - record timestamp per record.

The producer runs in its own process and writes the (topic, partition, offset,
timestamp) of every acknowledged record; the job's dispatcher notes which
offsets each table covered in each batch and when that batch's commits ended.
Joining the two gives every record's latency without reading the tables back.
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import statistics
import time
from pathlib import Path

import numpy as np

from scripts.perf import workload as data
from scripts.perf.config import FAN_IN_TABLE, NAMESPACE, job_config
from scripts.perf.retention import BrokerRetention


def _ack_index(acks: np.ndarray, topics: list[str]) -> dict:
    """(topic, partition) -> (sorted offsets, timestamps in seconds)."""
    order = np.lexsort((acks[:, 2], acks[:, 1], acks[:, 0]))
    acks = acks[order]
    out = {}
    keys = acks[:, 0] * 1_000_000 + acks[:, 1]
    bounds = np.flatnonzero(np.diff(keys)) + 1
    for chunk in np.split(acks, bounds):
        if len(chunk):
            out[(topics[int(chunk[0, 0])], int(chunk[0, 1]))] = (chunk[:, 2], chunk[:, 3] / 1000.0)
    return out


def _record_latencies(batches, commits, acks: np.ndarray, topics: list[str], skip_tables: set):
    """(batch id, table, commit wall time - record timestamp of every produced record it committed)."""
    index = _ack_index(acks, topics)
    walls = {(c.batch_id, c.table): c.wall for c in commits if c.status == "committed"}
    for b in batches:
        for table, covered in b.offsets.items():
            wall = walls.get((b.batch_id, table))
            if table in skip_tables or wall is None:
                continue
            for key, (lo, hi) in covered.items():
                topic, part = key.rsplit("/", 1)
                entry = index.get((topic, int(part)))
                if entry is None:
                    continue
                offs, ts = entry
                i0, i1 = np.searchsorted(offs, lo, "left"), np.searchsorted(offs, hi, "right")
                yield b.batch_id, table, wall - ts[i0:i1]


def latencies(batches, commits, acks: np.ndarray, topics: list[str], skip_tables: set) -> dict[int, np.ndarray]:
    """Per batch id: commit wall time - record timestamp of every produced record it committed."""
    parts: dict[int, list] = {b.batch_id: [] for b in batches}
    for batch_id, _, values in _record_latencies(batches, commits, acks, topics, skip_tables):
        parts[batch_id].append(values)
    return {k: np.concatenate(v) if v else np.array([]) for k, v in parts.items()}


def class_latencies(batches, commits, acks: np.ndarray, topics: list[str], skip_tables: set,
                    classify) -> dict[str, dict]:
    """Percentiles of the records' latencies per class of table (`classify(table)` -> name)."""
    parts: dict[str, list] = {}
    for _, table, values in _record_latencies(batches, commits, acks, topics, skip_tables):
        parts.setdefault(classify(table), []).append(values)
    out = {}
    for name, chunks in sorted(parts.items()):
        values = np.concatenate(chunks)
        out[name] = {"records": int(values.size), "p50": round(float(np.percentile(values, 50)), 3),
                     "p95": round(float(np.percentile(values, 95)), 3), "max": round(float(values.max()), 3)}
    return out


def commit_work(batches, commits, dlq_table: str) -> dict:
    """Per batch after the first (which created the tables): table commits, and the commits' wall and CPU
    seconds summed (the work a batch spends committing, wherever it ran)."""
    per = {}
    for c in commits:
        if c.status == "committed" and c.table != dlq_table:
            row = per.setdefault(c.batch_id, [0, 0.0, 0.0])
            row[0] += 1
            row[1] += c.seconds
            row[2] += c.process_cpu_seconds
    rows = [per.get(b.batch_id, [0, 0.0, 0.0]) for b in batches[1:]]
    if not rows:
        return {}
    return {"batches": len(rows), "tables_per_batch": round(statistics.mean(r[0] for r in rows), 2),
            "commit_seconds_per_batch": round(statistics.mean(r[1] for r in rows), 3),
            "commit_cpu_seconds_per_batch": round(statistics.mean(r[2] for r in rows), 3)}


def commit_drift(rows: list[dict]) -> dict | None:
    """Per-table commit latency of the first 10 vs the last 10 batches that committed tables; and
    of the first vs the last tenth of them (the soak's measure), per batch the tables' mean and
    median, with the mean of every tenth between."""
    used = [r for r in rows if r["tables"]]
    if len(used) < 20:
        return None
    means = [r["table_mean_ms"] for r in used]
    first, last = statistics.mean(means[:10]), statistics.mean(means[-10:])
    out = {"first10_ms": round(first, 1), "last10_ms": round(last, 1), "ratio": round(last / first, 3)}
    tenth = len(used) // 10
    head, tail = used[:tenth], used[-tenth:]
    for key, name, average in (("table_mean_ms", "mean", statistics.mean),
                               ("table_p50_ms", "median", statistics.median)):
        a, b = average(r[key] for r in head), average(r[key] for r in tail)
        out[f"first_last_tenth_{name}_ms"] = [round(a, 1), round(b, 1)]
        out[f"first_last_tenth_{name}_ratio"] = round(b / a, 3)
    out["mean_ms_by_tenth"] = [round(statistics.mean(r["table_mean_ms"] for r in used[i * tenth:(i + 1) * tenth]), 1)
                             for i in range(10)]
    return out


def commit_tail(commits, top: int = 25) -> dict:
    """Where the per-table commit time beyond the typical commit goes: the share of commit seconds
    taken by commits that merged small files, that expired snapshots, and by the fan-in table; the
    slowest commits with what each did."""
    done = [c for c in commits if c.status == "committed" and c.batch_id > 0]
    if not done:
        return {}
    total = sum(c.seconds for c in done)
    typical = statistics.median(c.seconds for c in done)

    def share(rows) -> dict:
        rows = list(rows)
        return {"commits": len(rows), "seconds_share": round(sum(c.seconds for c in rows) / total, 3),
                "mean_ms": round(statistics.mean(c.seconds for c in rows) * 1000, 1) if rows else 0.0,
                "cpu_mean_ms": round(statistics.mean(c.process_cpu_seconds for c in rows) * 1000, 1) if rows else 0.0}

    return {"commits": len(done), "seconds": round(total, 1), "median_ms": round(typical * 1000, 2),
            "merging": share(c for c in done if c.merged), "expiring": share(c for c in done if c.expired),
            "fan_in": share(c for c in done if c.table == FAN_IN_TABLE),
            "retried": share(c for c in done if c.attempts > 1),
            "plain": share(c for c in done if not c.merged and not c.expired and c.attempts == 1
                           and c.table != FAN_IN_TABLE),
            "slowest": [{"batch": c.batch_id, "table": c.table, "ms": round(c.seconds * 1000, 1),
                         "cpu_ms": round(c.process_cpu_seconds * 1000, 1), "merged": c.merged,
                         "expired": c.expired, "expired_files": c.expired_files, "attempts": c.attempts}
                        for c in sorted(done, key=lambda c: -c.seconds)[:top]]}


def live_files(db: Path, namespace: str) -> dict[str, tuple[int, int]]:
    """(data files of the current snapshot: what a reader opens, snapshots kept) of each table, read
    from the catalog's metadata pointers and the metadata JSON directly (no pyiceberg in the sampling
    thread)."""
    import json
    import sqlite3
    from urllib.parse import urlparse

    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        rows = conn.execute("SELECT table_name, metadata_location FROM iceberg_tables WHERE table_namespace = ?",
                            (namespace,)).fetchall()
    out = {}
    for name, location in rows:
        try:
            with open(urlparse(location).path) as fh:
                meta = json.load(fh)
        except (OSError, ValueError):
            continue
        current = next((s for s in meta.get("snapshots", []) if s["snapshot-id"] == meta.get("current-snapshot-id")),
                       None)
        out[name] = (int((current or {}).get("summary", {}).get("total-data-files", 0)), len(meta.get("snapshots", [])))
    return out


def metadata_file_counts(warehouse: Path, namespace: str) -> list[int]:
    """Files under each table's metadata directory (metadata JSON, manifest lists, manifests)."""
    from scripts.perf.probe import namespace_dir  # the probe imports the dispatcher: not at module load

    root = namespace_dir(warehouse, namespace)
    if not root.is_dir():
        return []
    return [sum(1 for p in (t / "metadata").iterdir() if p.is_file()) for t in root.iterdir() if (t / "metadata").is_dir()]


class FileSampler:
    """Every `interval` seconds: data files per table on disk and in the current snapshots."""

    def __init__(self, root: Path, t0: float, interval: float = 60.0, memory=None, held=None):
        import threading

        self.root, self.t0, self.interval, self.rows = root, t0, interval, []
        self.memory, self.held = memory, held  # a MemorySampler; a callable: what the bench itself keeps
        # ICEROUTER_BENCH_TRACEMALLOC=1 (a diagnostic; it slows every allocation of the driver): per
        # sample, the source lines whose Python allocations grew most since the first sample
        self.trace, self._first = os.environ.get("ICEROUTER_BENCH_TRACEMALLOC") == "1", None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-files", daemon=True)

    def start(self) -> "FileSampler":
        self._thread.start()
        return self

    def sample(self) -> None:
        from scripts.perf.probe import data_file_stats

        disk = data_file_stats(self.root / "warehouse", NAMESPACE)
        try:
            found = list(live_files(self.root / "catalog.db", NAMESPACE).values())
        except Exception as exc:  # a locked or busy catalog file: this sample has no live counts
            print(f"  files sample: {exc}", flush=True)
            found = []
        live, snapshots = [n for n, _ in found], [k for _, k in found]
        metadata = metadata_file_counts(self.root / "warehouse", NAMESPACE)
        self.rows.append({"t": round(time.time() - self.t0, 1), "disk_per_table_max": disk["files_per_table_max"],
                          "disk_per_table_mean": disk["files_per_table_mean"],
                          "live_per_table_max": max(live) if live else None,
                          "live_per_table_mean": round(statistics.mean(live), 2) if live else None,
                          "snapshots_per_table_max": max(snapshots) if snapshots else None,
                          "metadata_files_per_table_max": max(metadata) if metadata else None,
                          "metadata_files_per_table_mean": round(statistics.mean(metadata), 2) if metadata else None})
        if self.memory is not None:  # a timeline, to tell growth from a spike (the peaks alone cannot)
            from scripts.perf.probe import driver_heap

            self.rows[-1]["memory"] = {**self.memory.sample(), **driver_heap(), **(self.held() if self.held else {})}
            if self.trace:
                self.rows[-1]["memory"]["grown_since_first_sample"] = self._traced_growth()
        print(f"  files per table at {self.rows[-1]['t']:.0f} s: {self.rows[-1]}", flush=True)

    def _traced_growth(self, top: int = 12) -> list[str]:
        import tracemalloc

        if not tracemalloc.is_tracing():
            tracemalloc.start(4)
        now = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        if self._first is None:
            self._first = now
            return []
        stats = now.compare_to(self._first, "traceback")
        return [f"{s.size_diff / 2**20:+.1f} MB {s.count_diff:+d} at "
                + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in reversed(list(s.traceback)))
                for s in stats[:top]]

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=30)
        self.sample()
        return self.rows


def spark_phases(query) -> dict:
    """Median and p95 of Spark's own per-batch durations (the query's recent progress, last 100
    batches): what a batch costs outside the foreachBatch function (addBatch is that function)."""
    phases: dict[str, list[int]] = {}
    for progress in query.recentProgress:
        for name, ms in (progress.get("durationMs") or {}).items():
            phases.setdefault(name, []).append(int(ms))
    return {name: {"p50": float(np.percentile(v, 50)), "p95": float(np.percentile(v, 95)), "batches": len(v)}
            for name, v in sorted(phases.items())}


def run_freshness(args, stack, root: Path) -> dict:
    from router.driver.job import build_spark, start_query, stop_between_batches
    from scripts.perf.probe import (CpuSampler, MemorySampler, RecordingDispatcher, batch_rows, cpu_per_second,
                                    data_file_stats, load_average)

    result = {"mode": "freshness", "topics": args.topics, "partitions": args.partitions, "rate": args.rate,
              "duration": args.duration, "trigger": args.trigger, "fan_in": args.fan_in,
              "commit_in": args.commit_in,
              "load_before": load_average()}
    topics = [f"orders.{i:03d}" for i in range(args.topics)]
    stack.broker.create_topics(topics, partitions=args.partitions, timeout=120)
    ids = data.register_topics(stack.registry_url, topics)
    pool = data.payload_pool()
    warm = args.topics * args.partitions
    data.produce_bulk(stack.conf, ids, args.partitions, warm, pool)  # first batch creates every table

    config = job_config(args, root, stack.bootstrap, stack.registry_url, stack.client)
    m = config.maintenance
    result["maintenance_config"] = {"merge_small_files_at": m.merge_small_files_at, "compact_after_files": m.compact_after_files,
                                    "expire_every_commits": m.expire_every_commits,
                                    "retain_last_snapshots": m.retain_last_snapshots,
                                    "transient_file_codec": m.transient_file_codec}
    spark = build_spark(config)
    memory = MemorySampler().start()
    recording = functools.partial(RecordingDispatcher, keep_offsets=True)
    query, dispatcher = start_query(spark, config, make_dispatcher=recording,
                                    listeners=[lambda s: print("  " + s.line(), flush=True)])
    deadline = time.monotonic() + 600
    while not dispatcher.batches and time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        time.sleep(0.5)
    print(f"tables created; producing {args.rate:,.0f} records/s for {args.duration:.0f} s ...", flush=True)
    acks_file = str(root / "acks.npz")
    producer = multiprocessing.get_context("spawn").Process(
        target=data.produce_steady, args=(stack.conf, ids, args.partitions, args.rate, args.duration, pool,
                                          acks_file), kwargs={"hot": args.hot_topics, "hot_share": args.hot_share})
    t_produce = time.time()
    retention = None
    if args.broker_retention:
        retention = BrokerRetention(stack.broker, topics, args.partitions, args.broker_retention,
                                    dispatcher.batches).start()
    profiler = None
    if args.profile:
        from scripts.perf.pyspy import Profiler

        profiler = Profiler(Path(args.profile)).start()
    files = FileSampler(root, t_produce, memory=memory,
                        held=lambda: {"recorded_batches": len(dispatcher.batches),
                                      "recorded_commits": len(dispatcher.commits)}).start()
    cpu = CpuSampler()
    cpu_before = cpu.sample()
    producer.start()
    while producer.is_alive():  # sampled while it runs: a process first seen after it exited counts for nothing
        producer.join(5)
        cpu.sample()
    result["cores_while_producing"] = cpu_per_second(cpu_before, cpu.sample())  # where the 2 cores went
    loaded = np.load(acks_file)
    acks = loaded["acks"]
    expected = warm + len(acks)
    deadline = time.monotonic() + max(120.0, 6 * args.trigger)
    while sum(b.stats.records for b in dispatcher.batches) < expected and time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        time.sleep(0.5)
    result["spark_phases_ms"] = spark_phases(query)
    stop_between_batches(query)
    result["files_over_time"] = files.stop()
    if profiler is not None:
        result["profile"] = profiler.stop()
    result["memory_peak_mb"] = memory.stop()
    if retention is not None:
        result["broker_retention"] = retention.stop()
    cores = spark.sparkContext.defaultParallelism
    spark.stop()
    read = sum(b.stats.records for b in dispatcher.batches)
    if read < expected:
        print(f"WARNING: the job committed {read:,} of {expected:,} records before the wait ended", flush=True)

    per_batch = latencies(dispatcher.batches, dispatcher.commits, acks, topics, {FAN_IN_TABLE, config.dlq.table})
    everything = np.concatenate([v for v in per_batch.values() if len(v)]) if acks.size else np.array([])
    result["acked"] = int(len(acks))
    result["latency_s"] = {"records": int(everything.size),
                           "p50": round(float(np.percentile(everything, 50)), 3) if everything.size else None,
                           "p95": round(float(np.percentile(everything, 95)), 3) if everything.size else None,
                           "max": round(float(everything.max()), 3) if everything.size else None}
    if args.hot_topics:  # an estate: each class of table, and the commit work per batch
        hot = {f"{NAMESPACE}.orders_{i:03d}" for i in range(args.hot_topics)}
        result["estate"] = {"hot_topics": args.hot_topics, "hot_share": args.hot_share,
                            "cold_commit_after": args.cold_commit_after,
                            "latency_s": class_latencies(dispatcher.batches, dispatcher.commits, acks, topics,
                                                         {FAN_IN_TABLE, config.dlq.table},
                                                         lambda t: "hot" if t in hot else "cold"),
                            "commit_work": commit_work(dispatcher.batches, dispatcher.commits, config.dlq.table)}
    timeline = []
    for b in dispatcher.batches:
        done = [c for c in dispatcher.commits if c.batch_id == b.batch_id and c.status == "committed"]
        mine = [c.seconds * 1000 for c in done]
        cpu = [c.process_cpu_seconds * 1000 for c in done]  # wall minus this: waits (cores, locks, disk)
        lat = per_batch.get(b.batch_id, np.array([]))
        timeline.append({"batch": b.batch_id, "t": round(b.ended - t_produce, 1), "records": b.stats.records,
                         "tables": b.stats.tables_committed, "commit_s": round(b.stats.commit_seconds, 3),
                         "table_p50_ms": round(statistics.median(mine), 1) if mine else 0.0,
                         "table_mean_ms": round(statistics.mean(mine), 1) if mine else 0.0,
                         "table_max_ms": round(max(mine), 1) if mine else 0.0,
                         "table_cpu_p50_ms": round(statistics.median(cpu), 1) if cpu else 0.0,
                         "table_cpu_mean_ms": round(statistics.mean(cpu), 1) if cpu else 0.0,
                         "retried": sum(c.attempts > 1 for c in done),
                         "p95_s": round(float(np.percentile(lat, 95)), 2) if lat.size else 0.0})
    result["timeline"] = timeline
    result["commit_tail"] = commit_tail(dispatcher.commits)
    result["commit_drift"] = commit_drift(timeline[1:])  # batch 0 created the tables
    result["batches"] = batch_rows(dispatcher.batches, cores)
    result["files"] = data_file_stats(root / "warehouse", NAMESPACE)
    result["maintenance"] = dict(dispatcher.compactor.totals)  # the job's background compaction runs
    result["load_after"] = load_average()
    return result
