"""Soak mode: the live job for hundreds of short batches; does committing get slower as tables age?

Every table commit appends a snapshot, and pyiceberg rewrites the whole snapshot
list on each commit, so without expiry the commit latency keeps growing. Here the
real job runs (Spark, fused source, SQLite catalog, the job's snapshot expiry and
background maintenance) over --soak-tables topics, one table each, fed by a
steady producer in its own process with a short trigger, until --batches batches
have committed. The last 10 batches are compared with the first 10 (batch 0,
which creates the tables, left out): per-table commit latency, the driver's
commit phase and the whole batch.

The cores each process took (the job's JVM, its Python workers, the broker, the
producer) are sampled every 10 batches: on a 2-core machine a slower commit can
be the job's own cost growing or another process taking the cores.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import NAMESPACE, job_config
from scripts.perf.retention import BrokerRetention
from scripts.perf.stats import first_last, median_first_last

CPU_EVERY = 10  # batches between two CPU samples of the run's processes


def _mean_ms(values: list[float]) -> float | None:
    return round(statistics.mean(values), 2) if values else None


def per_batch_rows(batches, commits, skip: set, t0: float) -> list[dict]:
    """One row per batch: records, committed tables, mean/max per-table commit (ms), commit phase, total."""
    by_batch: dict[int, list] = {}
    for c in commits:
        if c.status == "committed" and c.table not in skip:
            by_batch.setdefault(c.batch_id, []).append(c)
    rows = []
    for b in batches:
        mine = by_batch.get(b.batch_id, [])
        wall = [c.seconds * 1000 for c in mine]
        s = b.stats
        rows.append({"batch": b.batch_id, "t": round(b.ended - t0, 1), "records": s.records,
                     "tables": s.tables_committed, "table_mean_ms": _mean_ms(wall),
                     "table_ms": [round(v, 2) for v in wall],
                     "table_cpu_mean_ms": _mean_ms([c.cpu_seconds * 1000 for c in mine]),
                     "table_process_cpu_mean_ms": _mean_ms([c.process_cpu_seconds * 1000 for c in mine]),
                     "table_max_ms": round(max(wall), 2) if wall else None, "commit_s": round(s.commit_seconds, 4),
                     "total_s": round(s.total_seconds, 4), "lag": s.lag,
                     # commits that lost a swap to another committer (compaction) and went again
                     "retried": sum(c.attempts > 1 for c in mine)})
    return rows


def timeline(rows: list[dict], steps: int = 10) -> list[dict]:
    """The run cut into `steps` equal spans of batches: means per span."""
    size = max(1, -(-len(rows) // steps))
    out = []
    for i in range(0, len(rows), size):
        span = rows[i:i + size]
        means = [r["table_mean_ms"] for r in span if r["table_mean_ms"] is not None]
        cpu = [r["table_cpu_mean_ms"] for r in span if r.get("table_cpu_mean_ms") is not None]
        lags = [r["lag"] for r in span if r["lag"] is not None]
        out.append({"from": span[0]["batch"], "to": span[-1]["batch"], "t": span[-1]["t"],
                    "records": round(statistics.mean(r["records"] for r in span)),
                    "table_mean_ms": round(statistics.mean(means), 2) if means else None,
                    "table_cpu_ms": round(statistics.mean(cpu), 2) if cpu else None,
                    "commit_s": round(statistics.mean(r["commit_s"] for r in span), 4),
                    "total_s": round(statistics.mean(r["total_s"] for r in span), 4),
                    "lag": max(lags) if lags else None})
    return out


def cores_timeline(samples: list, per_second, steps: int = 10) -> list[dict]:
    """Cores used by each process role over `steps` equal spans of the run: which process took
    the machine when batches slow down (scripts/perf/probe.py CpuSampler)."""
    if len(samples) < 2:
        return []
    stride = max(1, (len(samples) - 1) // steps)
    return [{"from": samples[i][0], "to": samples[j][0], **per_second(samples[i][1], samples[j][1])}
            for i, j in zip(range(0, len(samples) - stride, stride), range(stride, len(samples), stride))]


def snapshot_counts(catalog, tables: list[str]) -> dict:
    """Snapshots each table holds at the end, read back through pyiceberg."""
    from router.catalog import load_table

    counts = {t: len(load_table(catalog, t, refresh=True).metadata.snapshots) for t in tables}
    values = list(counts.values())
    return {"tables": len(values), "mean": round(statistics.mean(values), 1) if values else 0,
            "min": min(values, default=0), "max": max(values, default=0)}


def niced_produce(nice: int, *args) -> None:
    """The steady producer, at a lower CPU priority with `--nice-load` (0: unchanged)."""
    os.nice(nice)
    data.produce_steady(*args)


def run_soak(args, stack, root: Path) -> dict:
    from router.driver.job import build_spark, start_query, stop_between_batches
    from scripts.perf.probe import CpuSampler, MemorySampler, RecordingDispatcher, cpu_per_second, load_average

    config = job_config(args, root, stack.bootstrap, stack.registry_url, stack.client)
    m = config.maintenance
    result = {"mode": "soak", "batches": args.batches, "tables": args.soak_tables, "rate": args.rate,
              "trigger": args.trigger, "commit_in": args.commit_in, "commit_threads": config.job.commit_threads,
              "expire_every": m.expire_every_commits, "retain_last": m.retain_last_snapshots,
              "max_snapshot_age": m.max_snapshot_age_seconds, "load_before": load_average()}
    topics = [f"orders.{i:03d}" for i in range(args.soak_tables)]
    stack.broker.create_topics(topics, partitions=1, timeout=120)
    ids = data.register_topics(stack.registry_url, topics)
    pool = data.payload_pool()
    data.produce_bulk(stack.conf, ids, 1, len(topics), pool)  # batch 0 creates every table

    spark = build_spark(config)
    memory = MemorySampler().start()
    cpu, cpu_samples = CpuSampler(), []  # (batch id, sample) every CPU_EVERY batches
    verbose = args.batches <= 50

    def show(s):
        if s.batch_id % CPU_EVERY == 0:
            cpu_samples.append((s.batch_id, cpu.sample()))
        if verbose or s.batch_id < 3 or s.batch_id % 25 == 0:
            print("  " + s.line(), flush=True)

    query, dispatcher = start_query(spark, config, make_dispatcher=RecordingDispatcher, listeners=[show])
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    produce_args = (stack.conf, ids, 1, args.rate, 10 * 86400, pool, None, stop)
    if args.nice_load:  # the broker and the producer yield the cores to the job (a diagnostic)
        for tid in os.listdir(f"/proc/{stack.broker.pid}/task"):  # Linux nice values are per thread
            os.setpriority(os.PRIO_PROCESS, int(tid), args.nice_load)
        result["nice_load"] = args.nice_load
    producer = ctx.Process(target=niced_produce, args=(args.nice_load,) + produce_args, name="bench-soak-producer")
    retention = None
    if args.broker_retention:
        retention = BrokerRetention(stack.broker, topics, 1, args.broker_retention, dispatcher.batches).start()
    t0 = time.time()
    # a stuck job must not hang the run for ever: ~20x the time the batches should take
    deadline = time.monotonic() + max(600.0, 20 * args.batches * args.trigger)
    error = None
    try:
        while len(dispatcher.batches) < args.batches:
            if query.exception() is not None:
                error = str(query.exception()).splitlines()[0]
                break
            if time.monotonic() > deadline:
                error = f"deadline passed after {len(dispatcher.batches)} batches"
                break
            if dispatcher.batches and producer.pid is None:
                print(f"tables created; producing {args.rate:,.0f} records/s until {args.batches} batches "
                      f"have committed ...", flush=True)
                producer.start()
            if producer.pid is not None and not producer.is_alive():
                error = f"the producer exited ({producer.exitcode})"
                break
            time.sleep(0.2)
    finally:
        stop.set()
        if producer.pid is not None:
            producer.join(60)
            if producer.is_alive():
                producer.kill()
        stop_between_batches(query)
        result["memory_peak_mb"] = memory.stop()
        if retention is not None:
            result["broker_retention"] = retention.stop()
    seconds = time.time() - t0
    if error:
        spark.stop()
        raise RuntimeError(f"soak stopped: {error}")

    skip = {config.dlq.table}
    rows = per_batch_rows(dispatcher.batches[: args.batches], dispatcher.commits, skip, t0)
    steady = [r for r in rows[1:] if r["table_mean_ms"] is not None]  # batch 0 created the tables
    result["maintenance"] = dict(dispatcher.compactor.totals)  # the job's background compaction runs
    result["ran_batches"] = len(rows)
    result["seconds"] = round(seconds, 1)
    result["records"] = sum(r["records"] for r in rows)
    result["commit_drift"] = first_last([r["table_mean_ms"] for r in steady])
    result["commit_median_drift"] = median_first_last([r["table_ms"] for r in steady])
    # the commits' own CPU time: flat while wall time grows means the machine, not the commit, got slower
    result["commit_cpu_drift"] = first_last([r["table_cpu_mean_ms"] for r in steady])
    result["commit_process_cpu_drift"] = first_last([r["table_process_cpu_mean_ms"] for r in steady])
    result["commit_phase_drift"] = first_last([r["commit_s"] for r in steady])
    result["batch_drift"] = first_last([r["total_s"] for r in steady])
    result["retried_commits"] = {"total": sum(r["retried"] for r in steady),
                                 "drift": first_last([r["retried"] for r in steady])}
    dlq = [c.seconds * 1000 for c in dispatcher.commits if c.table in skip and c.status == "committed"]
    result["dlq_commit_drift"] = first_last(dlq[1:])
    result["timeline"] = timeline(rows[1:])
    result["cores_timeline"] = cores_timeline(cpu_samples, cpu_per_second)
    if result["cores_timeline"]:  # who took the 2 cores at the start and at the end
        first, last = result["cores_timeline"][0], result["cores_timeline"][-1]
        result["cores_first_last"] = {k: [first[k], last[k]] for k in first if k not in ("from", "to")}
    tables = sorted({c.table for c in dispatcher.commits if c.status == "committed" and c.table not in skip})
    result["snapshots_at_end"] = snapshot_counts(config.catalog, [t for t in tables if t.startswith(NAMESPACE + ".")])
    result["dlq_snapshots_at_end"] = snapshot_counts(config.catalog, sorted(skip & {c.table for c in dispatcher.commits}))
    result["per_batch"] = rows
    spark.stop()
    result["load_after"] = load_average()
    return result
