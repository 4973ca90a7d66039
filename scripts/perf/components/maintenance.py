"""One scheduled maintenance run of a job table: icerouter's against the same run before its caches.

    python scripts/bench_maintenance.py [--tables 4] [--rounds 3] [--commits 100] [--retain 65] [--json FILE]

The job compacts each table on the driver once ~100 files arrived
(router/maintenance/run.py MaintenanceScheduler: expire, compact, expire the
replaced snapshots, delete the files compaction replaced once unreferenced),
while the table keeps the snapshots of the last minute: ~65 at a 1 s trigger.
Each round here commits `--commits` one-file appends to every table the way the
job's tasks do (router/catalog/commit.py, expiry keeping `--retain` snapshots),
then the job's scheduler (one per side) runs each table, due by its file count,
and the run is timed (wall and process CPU). Two copies of every table get the same commits; one copy's runs go
through today's code, the other's through the code as it was before: every
question "what do the retained snapshots reach?" read from disk again, and
pyiceberg's own transaction (a deep copy of the metadata per read) for expiry
and compaction. Runs alternate between the sides, in one process, so the ratio
is not disturbed by load.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.perf.config import SOAK_ROWS, bench_catalog, maintenance_config, narrow_rows, narrow_schema
from scripts.perf.report import emit


@contextlib.contextmanager
def as_before():
    """The maintenance code paths as they were: no cache of what manifests name, pyiceberg's transaction."""
    from pyiceberg.table import Transaction

    import router.catalog.expiry as expiry
    import router.catalog.reachable as reachable
    import router.maintenance.compaction as compaction

    saved = reachable._cached, expiry.StagedTransaction, compaction.StagedTransaction
    reachable._cached = lambda key, read: read()
    expiry.StagedTransaction = compaction.StagedTransaction = Transaction
    try:
        yield
    finally:
        reachable._cached, expiry.StagedTransaction, compaction.StagedTransaction = saved


def maintain(scheduler, name: str, files: int) -> dict:
    """The job's scheduled maintenance of one due table (MaintenanceScheduler.maybe_run), timed."""
    started, cpu = time.perf_counter(), time.process_time()
    [report] = scheduler.maybe_run([name], {name: files})
    if report.error:
        raise SystemExit(f"{name}: {report.error}")
    return {"ms": (time.perf_counter() - started) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
            "snapshots": report.snapshots_before, "files_removed": report.compaction.files_removed,
            "deleted": len(report.replaced_deleted)}


def run(tables: int, rounds: int, commits: int, retain: int) -> dict:
    from router.catalog import create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files
    from router.maintenance import MaintenanceScheduler

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-maintenance-"))
    catalog = bench_catalog(root)
    schema = narrow_schema()
    data = narrow_rows(schema, SOAK_ROWS)
    names = {side: [f"{side}.t{i:03d}" for i in range(tables)] for side in ("ours", "before")}
    for name in names["ours"] + names["before"]:
        create_table(catalog, name, schema)
    # the commits keep `retain` snapshots, as the job's 60 s age does at a 1 s trigger
    committing = MaintenanceConfig(retain_last_snapshots=retain, max_snapshot_age_seconds=0)
    # one scheduler per side, as the job's driver holds one (files its compaction replaced that retained
    # snapshots still read are deleted by a later run), due at any new file, never by the clock
    schedulers = {side: MaintenanceScheduler(maintenance_config(catalog, retain, 1), interval_seconds=10 ** 9,
                                             after_files=1) for side in ("ours", "before")}
    runs: dict[str, list[dict]] = {"ours": [], "before": []}
    batch = 0
    for round_ in range(rounds):
        for _ in range(commits):
            for name in names["ours"] + names["before"]:
                result = TableResult(name, data_files=write_data_files(load_table(catalog, name), data),
                                     rows=SOAK_ROWS, offsets={f"{name}/0": [batch * SOAK_ROWS,
                                                                            (batch + 1) * SOAK_ROWS - 1]})
                outcome = commit_table(catalog, result, "bench", batch, maintenance=committing, where="task")
                if outcome.status != "committed":
                    raise SystemExit(f"{name}: {outcome.error}")
            batch += 1
        for i in range(tables):
            order = ("ours", "before") if (round_ + i) % 2 else ("before", "ours")
            for side in order:
                with as_before() if side == "before" else contextlib.nullcontext():
                    run_ = maintain(schedulers[side], names[side][i], commits)
                runs[side].append({"round": round_, **run_})
        print(f"round {round_ + 1}/{rounds}: ours {statistics.mean(r['cpu_ms'] for r in runs['ours'][-tables:]):.0f} "
              f"ms CPU, before {statistics.mean(r['cpu_ms'] for r in runs['before'][-tables:]):.0f} ms CPU per run",
              file=sys.stderr)

    def summary(side: str) -> dict:
        rs = runs[side]
        return {"runs": len(rs), "mean_ms": round(statistics.mean(r["ms"] for r in rs), 1),
                "mean_cpu_ms": round(statistics.mean(r["cpu_ms"] for r in rs), 1),
                "cpu_ms_by_round": [round(statistics.mean(r["cpu_ms"] for r in rs if r["round"] == k), 1)
                                    for k in range(rounds)],
                "snapshots_at_run": round(statistics.mean(r["snapshots"] for r in rs), 1),
                "files_removed": sum(r["files_removed"] for r in rs), "deleted": sum(r["deleted"] for r in rs)}

    ours, before = summary("ours"), summary("before")
    return {"benchmark": "maintenance", "tables": tables, "rounds": rounds, "commits_per_round": commits,
            "retain_snapshots": retain, "rows_per_file": SOAK_ROWS, "ours": ours, "before": before,
            "cpu_ratio": round(before["mean_cpu_ms"] / ours["mean_cpu_ms"], 2),
            "wall_ratio": round(before["mean_ms"] / ours["mean_ms"], 2)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--commits", type=int, default=100, help="one-file appends per table between two runs")
    ap.add_argument("--retain", type=int, default=65, help="snapshots the commits keep")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    result = run(args.tables, args.rounds, args.commits, args.retain)
    return emit(result, args.json_file)

