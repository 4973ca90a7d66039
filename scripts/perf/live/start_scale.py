"""scale1000 mode: the job's start and its batches with 1,000 tables that already hold offsets.

N topics (1,000) x --partitions (1), one table per topic. A setup run (a process of its own)
creates the tables and commits offsets to all of them; then each measured start is a new
process (start_child.py) that finds N tables with offsets and a checkpoint, as a restarted
job does, over a backlog of --start-batches (3) batches that each touch every table
(kafka.catch_up: even). Measured per start: process start -> first batch running and its
parts, the peak memory of the driver, the JVM and the Python workers (sampled together),
and the commit work of each N-table batch: `task_commit_s` (the tasks' commit seconds
summed over the tasks), `commit_s` (the driver's commit phase, wall) and `commit_work_s`
(commit_s + task_commit_s / executor cores).

After the setup run, a restart over one batch ("warm") leaves what a job's earlier restarts leave
on its host: the driver JVM's class archive (router/driver/jvm_classes.py), which the measured
starts of the checkout's code map (`jvm_classes` per start: mapped, recording or jars).

--before-ref REV also runs the starts with REV's product code (router/, registry/, evolution/
unpacked from git into the working directory), alternating with the checkout's, on the same
catalog: a "before" against an "after" in one run.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from scripts import REPO
from scripts.perf import workload as data

PRODUCT = ("router", "registry", "evolution")
CHILD_TIMEOUT = 1800.0


def unpack(ref: str, into: Path) -> Path:
    """REV's product packages from git, in `into`; returns the folder to put on PYTHONPATH."""
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, *PRODUCT], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


def _child(spec: dict, code: Path, root: Path, label: str) -> dict:
    """Run start_child.py with `code` first on the path (cwd outside any checkout); its result."""
    out = root / f"start-{label}.json"
    spec_file = root / f"start-{label}.spec.json"
    paths = [str(code)] + ([str(REPO)] if code != REPO else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths + [p for p in [os.environ.get("PYTHONPATH")] if p])}
    spec_file.write_text(json.dumps({**spec, "out": str(out), "t0": time.time()}))
    proc = subprocess.run([sys.executable, "-m", "scripts.perf.live.start_child", str(spec_file)], cwd=str(root),
                          env=env, timeout=CHILD_TIMEOUT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{label}: the job's process failed (exit {proc.returncode}): "
                           + "\n".join(proc.stderr.strip().splitlines()[-15:]))
    return json.loads(out.read_text())


def _summary(run: dict, topics: int) -> dict:
    marks, parts = run["marks_s"], run["parts_s"]
    full = [b for b in run["batches"] if b["tables"] >= topics]
    out = {"start_s": marks.get("first_batch_running"),
           # seconds of each step; with `launch` (overlapped) the catalog steps ran during build_spark
           "overlapped": run.get("launch", False),
           "jvm_classes": run.get("jvm_classes", "jars"),
           "parts_s": {"python_and_imports": marks["imports"], **parts,
                       "query_started_to_first_batch": round(marks["first_batch_running"] - marks["query_started"], 3)
                       if "first_batch_running" in marks else None},
           "memory_peak_mb": run["memory_peak_mb"],
           "full_batches": len(full)}
    if full:
        out["commit_per_full_batch"] = {k: round(statistics.mean(b[k] for b in full), 3)
                                        for k in ("task_commit_s", "commit_s", "commit_work_s", "total_s")}
    return out


def run_scale_start(args, stack, root: Path) -> dict:
    from scripts.perf.probe import load_average

    n = args.topics
    per_batch = args.records_per_table
    result: dict = {"mode": args.mode, "topics": n, "partitions": args.partitions, "records_per_table_per_batch":
                    per_batch, "batches_per_start": args.start_batches, "commit_in": args.commit_in,
                    "load_before": load_average()}
    topics = [f"orders.{i:04d}" for i in range(n)]
    print(f"setting up {n} topics x {args.partitions} partitions ...", flush=True)
    stack.broker.create_topics(topics, partitions=args.partitions, timeout=600)
    ids = data.register_topics(stack.registry_url, topics)
    pool = data.payload_pool()
    batch_records = n * args.partitions * per_batch
    job_args = {"batch_records": batch_records, "catch_up": "even", "trigger": 10.0, "fan_in": False,
                "commit_in": args.commit_in, "commit_threads": args.commit_threads, "expire_every": args.expire_every,
                "max_snapshot_age": args.max_snapshot_age, "compact_after_files": args.compact_after_files,
                "mode": args.mode}  # scale1000: job.jvm_class_archive on (scripts/perf/config.py)
    spec = {"root": str(root), "bootstrap": stack.bootstrap, "registry_url": stack.registry_url,
            "client": stack.client, "pattern": r"orders\..*", "args": job_args, "profile": bool(args.profile)}
    codes = [("after", REPO)]
    if args.before_ref:
        codes.insert(0, ("before", unpack(args.before_ref, root / "code-before")))
        result["before_ref"] = args.before_ref
    print(f"setup: {batch_records:,} records, the job creates {n} tables ...", flush=True)
    data.produce_bulk(stack.conf, ids, args.partitions, batch_records, pool)
    setup = _child(spec, REPO, root, "setup")
    result["setup"] = _summary(setup, n)
    # a restart over one batch, as the job's host has seen: its driver JVM records the class archive
    # that the measured starts of this checkout's code map (a first run records none)
    data.produce_bulk(stack.conf, ids, args.partitions, batch_records, pool)
    print("a restart over one batch (the class archive) ...", flush=True)
    result["warm"] = _summary(_child(spec, REPO, root, "warm"), n)
    runs: dict[str, list] = {label: [] for label, _ in codes}
    for repeat in range(args.start_repeats):
        for label, code in codes:
            data.produce_bulk(stack.conf, ids, args.partitions, batch_records * args.start_batches, pool)
            print(f"start {repeat + 1} with the {label} code ({code}) ...", flush=True)
            run = _child(spec, code, root, f"{label}-{repeat}")
            summary = _summary(run, n)
            if run.get("profile_top"):
                summary["profile_top"] = run["profile_top"]
            runs[label].append(summary)
            print(f"  start {summary['start_s']} s: {summary['parts_s']}; "
                  f"all processes {summary['memory_peak_mb']['all_mb']:.0f} MB; "
                  f"per {n}-table batch {summary.get('commit_per_full_batch')}", flush=True)
    result["starts"] = runs
    for label, found in runs.items():
        work = [r["commit_per_full_batch"]["commit_work_s"] for r in found if "commit_per_full_batch" in r]
        result[label] = {"start_s_median": statistics.median(r["start_s"] for r in found),
                         "memory_all_mb_max": max(r["memory_peak_mb"]["all_mb"] for r in found),
                         "commit_work_s_median": statistics.median(work) if work else None}
    if "before" in result:
        result["start_ratio_before_over_after"] = round(result["before"]["start_s_median"]
                                                        / result["after"]["start_s_median"], 2)
    result["load_after"] = load_average()
    return result
