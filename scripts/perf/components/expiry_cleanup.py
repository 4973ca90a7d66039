"""What deleting the expired snapshots' files costs the job's commits that expire
(router/catalog/reachable.py), on a real SQLite catalog: pure catalog work, no Spark.

    python scripts/bench_expiry_cleanup.py [--tables 4] [--commits 200] [--json FILE]

Twin tables get the same one-file commits the job's tasks make (commit_table,
inline small-file merging at `--merge-at`, expiry every `--every` commits
keeping `--retain`), one twin with the clean-up (the product) and one without
it (before: the expired snapshots' files stay), turn about in one process. Per
expiring commit: wall ms and process CPU ms of the whole commit on each side,
the clean-up's own ms, and the manifest lists and manifests it read from disk
(the caches answer the rest). At the end, files on disk per table on each side.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

from scripts.perf.config import bench_catalog, narrow_rows, narrow_schema
from scripts.perf.report import emit


def _summary(values: list[float]) -> dict:
    values = sorted(values)
    return {"n": len(values), "median": round(statistics.median(values), 3), "mean": round(statistics.fmean(values), 3),
            "p95": round(values[int(0.95 * (len(values) - 1))], 3), "max": round(values[-1], 3)}


def _files_on_disk(table) -> int:
    root = urlparse(table.location()).path
    return sum(len([n for n in names if not n.endswith(".metadata.json")]) for _, _, names in os.walk(root))


def run(tables: int, commits: int, every: int, retain: int, merge_at: int, rows: int) -> dict:
    import router.catalog.commit as commit_module
    import router.catalog.reachable as reachable
    from router.catalog import create_table, load_table
    from router.catalog.datafiles import write_data_files
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult

    catalog = bench_catalog(Path(tempfile.mkdtemp(prefix="bench-expiry-")))
    schema = narrow_schema()
    data = narrow_rows(schema, rows)
    rule = MaintenanceConfig(expire_every_commits=every, retain_last_snapshots=retain, max_snapshot_age_seconds=0,
                             merge_small_files_at=merge_at)
    names = {side: [f"{side}.t{i}" for i in range(tables)] for side in ("before", "after")}
    for side in names.values():
        for name in side:
            create_table(catalog, name, schema)
    from router.catalog import manifest_lists

    # lists: read from disk (a list this process wrote is answered from memory, catalog/manifest_lists.py);
    # manifests: read from disk (what the clean-up's cache did not hold)
    reads = {"lists": 0, "manifests": 0}
    real_list, real_manifest, real_delete = reachable._read_list, reachable._read_manifest, commit_module.delete_expired_files
    disk_list = manifest_lists._pyiceberg["manifests"]

    def read_list_from_disk(io, path):
        reads["lists"] += 1
        return disk_list(io, path)

    def count_list(io, path):
        manifest_lists._pyiceberg["manifests"] = read_list_from_disk
        try:
            return real_list(io, path)
        finally:
            manifest_lists._pyiceberg["manifests"] = disk_list

    def count_manifest(io, manifest):
        reads["manifests"] += 1
        return real_manifest(io, manifest)

    cleanup_ms: list[float] = []

    def timed_delete(table, base, expired):
        started = time.perf_counter()
        try:
            return real_delete(table, base, expired)
        finally:
            cleanup_ms.append((time.perf_counter() - started) * 1000)

    reachable._read_list, reachable._read_manifest = count_list, count_manifest
    wall = {"before": [], "after": []}
    cpu = {"before": [], "after": []}
    per_expiry_reads = {"lists": [], "manifests": []}
    deleted = 0
    try:
        for batch in range(commits):
            for side in (("before", "after") if batch % 2 else ("after", "before")):
                commit_module.delete_expired_files = timed_delete if side == "after" else (lambda *a: 0)
                for name in names[side]:
                    table = load_table(catalog, name)
                    result = TableResult(name, data_files=write_data_files(table, data), rows=rows,
                                         offsets={"t/0": [batch * rows, (batch + 1) * rows - 1]})
                    seen = dict(reads)
                    outcome = commit_module.commit_table(catalog, result, "bench", batch, maintenance=rule,
                                                         where="task")
                    if outcome.status != "committed":
                        raise SystemExit(f"{name}: {outcome.error}")
                    if outcome.expired:
                        wall[side].append(outcome.seconds * 1000)
                        cpu[side].append(outcome.process_cpu_seconds * 1000)
                        if side == "after":
                            deleted += outcome.expired_files
                            for k in reads:
                                per_expiry_reads[k].append(reads[k] - seen[k])
    finally:
        reachable._read_list, reachable._read_manifest = real_list, real_manifest
        commit_module.delete_expired_files = real_delete
    disk = {side: [_files_on_disk(load_table(catalog, n, refresh=True)) for n in names[side]] for side in names}
    live = [len(load_table(catalog, n).metadata.snapshots) for n in names["after"]]
    out = {"benchmark": "expiry_cleanup", "tables": tables, "commits_per_table": commits, "expire_every_commits": every,
           "retain_last_snapshots": retain, "merge_small_files_at": merge_at, "rows_per_commit": rows,
           "expiring_commits_per_side": len(wall["after"]),
           "before": {"wall_ms": _summary(wall["before"]), "process_cpu_ms": _summary(cpu["before"]),
                      "files_on_disk_per_table": max(disk["before"])},
           "after": {"wall_ms": _summary(wall["after"]), "process_cpu_ms": _summary(cpu["after"]),
                     "cleanup_ms": _summary(cleanup_ms),
                     "manifest_lists_read_per_expiry": _summary(per_expiry_reads["lists"]),
                     "manifests_read_per_expiry": _summary(per_expiry_reads["manifests"]),
                     "files_deleted": deleted, "files_on_disk_per_table": max(disk["after"]),
                     "snapshots_per_table_at_end": max(live)}}
    # one commit in `every` expires: the clean-up's share of every commit of a table
    out["cleanup_ms_per_commit_amortised"] = round(out["after"]["cleanup_ms"]["mean"] / every, 3)
    out["ratio_median_wall"] = round(out["after"]["wall_ms"]["median"] / out["before"]["wall_ms"]["median"], 3)
    out["ratio_mean_wall"] = round(out["after"]["wall_ms"]["mean"] / out["before"]["wall_ms"]["mean"], 3)
    out["ratio_median_cpu"] = round(out["after"]["process_cpu_ms"]["median"] / out["before"]["process_cpu_ms"]["median"], 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--commits", type=int, default=200)
    parser.add_argument("--every", type=int, default=10, help="expire_every_commits")
    parser.add_argument("--retain", type=int, default=5, help="retain_last_snapshots")
    parser.add_argument("--merge-at", type=int, default=16, help="merge_small_files_at")
    parser.add_argument("--rows", type=int, default=100)
    parser.add_argument("--json", dest="json_file")
    args = parser.parse_args(argv)
    return emit(run(args.tables, args.commits, args.every, args.retain, args.merge_at, args.rows), args.json_file)
