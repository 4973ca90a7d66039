"""Commit-scaling mode: do table commits get faster with more executor cores?

Committing on the driver is serialised by its GIL whatever the cores, so tables
per second should stay flat from local[1] to local[2] to a cluster; committing
in the Spark tasks (`job.commit_in_tasks`) should grow with the cores. Each
configuration runs the job over its own N topics (1 partition, one table per
topic, no fan-in): one warm-up batch that creates the tables, then
--scaling-batches measured batches, each produced before an availableNow run.
Every configuration runs in a fresh process (its own SparkSession, JVM and so
honest peak memory), with a new catalog and checkpoint; broker and registry
are shared. The standalone cluster (2 workers x 1 core) is started once.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import time
import traceback
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import job_config

# name, master ("cluster": the standalone cluster), where tables are committed
CONFIGURATIONS = (
    ("local1-driver", "local[1]", "driver"),
    ("local1-tasks", "local[1]", "tasks"),
    ("local2-driver", "local[2]", "driver"),
    ("local2-tasks", "local[2]", "tasks"),
    ("cluster2x1-tasks", "cluster", "tasks"),
    ("cluster2x1-driver", "cluster", "driver"),
)
CONFIG_TIMEOUT = 3600.0


def measure(spec: dict, conn) -> None:
    """In a fresh process: the job for one configuration; sends ("ok", result) or ("error", text)."""
    try:
        conn.send(("ok", _measure(spec)))
    except BaseException:
        conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


def _measure(spec: dict) -> dict:
    from router.driver.job import build_spark, start_query
    from scripts.perf.probe import MemorySampler, RecordingDispatcher, batch_rows

    args, root = spec["args"], Path(spec["root"])
    config = job_config(args, root, spec["bootstrap"], spec["registry_url"], spec["client"],
                        pattern=spec["pattern"], spark=spec["spark"], commit_in=spec["commit_in"])
    spark = build_spark(config)
    memory = MemorySampler(executor_roots=spec["worker_pids"]).start()
    batches, commits, runs = [], [], []
    try:
        for run in range(1 + args.scaling_batches):  # run 0: the warm-up batch that creates the tables
            data.produce_bulk(spec["conf"], spec["ids"], 1, len(spec["ids"]) * args.scaling_records, spec["pool"])
            started = time.time()
            query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher)
            query.awaitTermination()
            if query.exception() is not None:
                raise RuntimeError(str(query.exception()).splitlines()[0])
            runs.append({"run": run, "batches": len(dispatcher.batches), "seconds": round(time.time() - started, 3)})
            if run:
                batches += dispatcher.batches
                commits += dispatcher.commits
            print(f"  {spec['name']} {'warm-up' if run == 0 else 'measured'}: "
                  + "; ".join(b.stats.line() for b in dispatcher.batches), flush=True)
        cores = spark.sparkContext.defaultParallelism
    finally:
        peak = memory.stop()
        spark.stop()
    return summarise(batches, commits, config.dlq.table) | {"memory_peak_mb": peak, "runs": runs,
                                                            "batches": batch_rows(batches, cores)}


def summarise(batches, commits, dlq_table: str) -> dict:
    """Per measured batch means; tables per second of batch time = all tables / all batch seconds."""
    if not batches:
        raise RuntimeError("no measured batch ran")
    stats = [b.stats for b in batches]
    tables = sum(s.tables_committed for s in stats)
    total = sum(s.total_seconds for s in stats)
    latency = [c.seconds for c in commits if c.status == "committed" and c.table != dlq_table]
    return {"measured_batches": len(stats), "records_per_batch": round(statistics.mean(s.records for s in stats)),
            "tables_per_batch": round(tables / len(stats), 1),
            "batch_s": round(total / len(stats), 3),
            "tables_per_s": round(tables / total, 1) if total else None,
            "dispatch_s": round(statistics.mean(s.dispatch_seconds for s in stats), 3),
            "commit_s": round(statistics.mean(s.commit_seconds for s in stats), 3),
            "failed_tables": sum(s.tables_failed for s in stats),
            "table_commit_p50_ms": round(statistics.median(latency) * 1000, 1) if latency else None}


def _cluster(root: Path):
    """(cluster, None) or (None, why it could not start)."""
    from router.devstack.spark_cluster import LocalSparkCluster

    cluster = LocalSparkCluster(str(root / "spark-cluster"), workers=2, cores=1, memory="1g", tied_to_parent=True)
    try:
        cluster.start()
    except Exception as exc:  # recorded in the results: the local configurations still run
        return None, f"{type(exc).__name__}: {str(exc).strip()[:600]}"
    return cluster, None


def _chosen(args) -> list[tuple]:
    if not args.scaling_configs:
        return list(CONFIGURATIONS)
    names = [n.strip() for n in args.scaling_configs.split(",") if n.strip()]
    known = {c[0]: c for c in CONFIGURATIONS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"--scaling-configs: unknown {unknown} (known: {', '.join(known)})")
    return [known[n] for n in names]


def run_commit_scaling(args, stack, root: Path) -> dict:
    from scripts.perf.probe import load_average

    result = {"mode": "commit-scaling", "topics": args.topics, "records_per_topic": args.scaling_records,
              "measured_batches": args.scaling_batches, "load_before": load_average(), "configurations": []}
    pool = data.payload_pool()
    cluster = cluster_error = None
    ctx = multiprocessing.get_context("spawn")
    try:
        for index, (name, master, commit_in) in enumerate(_chosen(args)):
            entry = {"name": name, "master": master, "commit_in": commit_in}
            result["configurations"].append(entry)
            if master == "cluster":
                if cluster is None and cluster_error is None:
                    print("starting the standalone cluster (2 workers x 1 core) ...", flush=True)
                    cluster, cluster_error = _cluster(root)
                if cluster is None:
                    entry.update(status="skipped", reason=f"standalone cluster did not start: {cluster_error}")
                    print(f"{name}: skipped: {entry['reason']}", flush=True)
                    continue
                spark = {**cluster.spark_settings(), "spark.driver.memory": "4g"}
                workers = cluster.pids[1:]  # the master first, then the workers
                entry["master"] = cluster.master_url
            else:
                spark, workers = {"spark.master": master, "spark.driver.memory": "4g"}, []
            prefix = f"cs{index}"
            topics = [f"{prefix}.orders_{i:03d}" for i in range(args.topics)]
            stack.broker.create_topics(topics, partitions=1, timeout=120)
            ids = data.register_topics(stack.registry_url, topics)
            spec = {"name": name, "args": args, "root": str(root / name), "bootstrap": stack.bootstrap,
                    "registry_url": stack.registry_url, "client": stack.client, "conf": stack.conf,
                    "pattern": prefix + r"\..*", "spark": spark, "commit_in": commit_in, "worker_pids": workers,
                    "ids": ids, "pool": pool}
            print(f"{name}: {args.topics} tables on {entry['master']}, commits in the {commit_in} ...", flush=True)
            started = time.time()
            entry.update(_run_child(ctx, spec))
            entry["seconds"] = round(time.time() - started, 1)
            if entry["status"] == "ok":
                print(f"{name}: {entry['tables_per_batch']} tables per batch in {entry['batch_s']:.2f} s: "
                      f"{entry['tables_per_s']} tables/s", flush=True)
            else:
                print(f"{name}: FAILED: {entry['reason'].strip().splitlines()[-1]}", flush=True)
    finally:
        if cluster is not None:
            cluster.stop(remove_data=True)
    result["load_after"] = load_average()
    return result


def _run_child(ctx, spec: dict) -> dict:
    os.makedirs(spec["root"], exist_ok=True)
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=measure, args=(spec, child), name=f"bench-{spec['name']}")
    proc.start()
    child.close()
    try:
        if not parent.poll(CONFIG_TIMEOUT):
            return {"status": "failed", "reason": f"no result within {CONFIG_TIMEOUT:.0f} s"}
        kind, payload = parent.recv()
    except EOFError:
        return {"status": "failed", "reason": f"the measuring process died (exit code {proc.exitcode})"}
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    if kind == "ok":
        return {"status": "ok", **payload}
    return {"status": "failed", "reason": payload}
