"""Manifest lists and manifests read with cached reader trees (router/catalog/avro_readers.py) against
pyiceberg's own open, alternating in one process.

    python scripts/bench_avro_readers.py [--manifests 32] [--tables 4] [--rounds 200] [--json FILE]

scan: one table with `--manifests` unmerged one-file manifests; its manifest
list and every manifest are read (what a manifest merge, compaction planning
and maintenance's reachable-files scan do), each side `--reps` times per turn.

commits: twin tables get the same one-file commits the job's tasks make
(router/catalog/commit.py: manifests merged at 24-40, expiry keeping `--retain`
snapshots); one twin commits with the cached readers, the other with
pyiceberg's open, turn about. Per commit: the process CPU (pyiceberg reads and
merges manifests on its thread pool) and the wall time; merge commits apart.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from scripts.perf.config import SOAK_ROWS, bench_catalog, narrow_rows, narrow_schema
from scripts.perf.report import emit


def _side(cached: bool) -> None:
    from router.catalog import avro_readers

    (avro_readers.install if cached else avro_readers.uninstall)()


def run_scan(manifests: int, turns: int, reps: int) -> dict:
    from pyiceberg.manifest import _manifests

    from router.catalog import create_table, load_table

    catalog = bench_catalog(Path(tempfile.mkdtemp(prefix="bench-avro-")))
    table_id = "bench.scan"
    create_table(catalog, table_id, narrow_schema(), properties={"commit.manifest-merge.enabled": "false"})
    table = load_table(catalog, table_id)
    data = narrow_rows(narrow_schema(), 10, text="x")
    for _ in range(manifests):
        table.append(data)
    snapshot = table.current_snapshot()

    def scan() -> int:
        return sum(len(m.fetch_manifest_entry(table.io)) for m in _manifests(table.io, snapshot.manifest_list))

    times = {True: [], False: []}
    for _ in range(turns):
        for cached in (False, True):
            _side(cached)
            started = time.perf_counter()
            for _ in range(reps):
                entries = scan()
            times[cached].append((time.perf_counter() - started) / reps * 1000)
            assert entries == manifests, entries
    base, ours = statistics.median(times[False]), statistics.median(times[True])
    return {"mode": "scan", "manifests": manifests, "turns": turns, "reps": reps,
            "pyiceberg_ms": round(base, 3), "cached_ms": round(ours, 3), "ratio": round(base / ours, 2)}


def _summary(values: list[float]) -> dict:
    values = sorted(values)
    return {"n": len(values), "median": round(statistics.median(values), 3), "mean": round(statistics.fmean(values), 3),
            "p95": round(values[int(0.95 * (len(values) - 1))], 3), "max": round(values[-1], 3)}


def run_commits(tables: int, rounds: int, retain: int) -> dict:
    from router.catalog import create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files

    catalog = bench_catalog(Path(tempfile.mkdtemp(prefix="bench-avro-")))
    schema = narrow_schema()
    data = narrow_rows(schema, SOAK_ROWS)
    names = {cached: [f"{'cached' if cached else 'pyiceberg'}.t{i}" for i in range(tables)] for cached in (True, False)}
    for side in names.values():
        for i, name in enumerate(side):  # twins merge at the same count (spread over 24-40 as in the job)
            create_table(catalog, name, schema, properties={"commit.manifest.min-count-to-merge": str(24 + 4 * (i % 5))})
    maintenance = MaintenanceConfig(retain_last_snapshots=retain, max_snapshot_age_seconds=0)
    cpu = {True: [], False: []}
    wall = {True: [], False: []}
    merges = {True: [], False: []}
    for batch in range(rounds):
        for cached in ((False, True) if batch % 2 else (True, False)):
            _side(cached)
            for name in names[cached]:
                table = load_table(catalog, name)
                before = len(table.current_snapshot().manifests(table.io)) if table.current_snapshot() else 0
                result = TableResult(name, data_files=write_data_files(table, data), rows=SOAK_ROWS,
                                     offsets={"t/0": [batch * SOAK_ROWS, (batch + 1) * SOAK_ROWS - 1]})
                outcome = commit_table(catalog, result, "bench", batch, maintenance=maintenance, where="task")
                if outcome.status != "committed":
                    raise SystemExit(f"{name}: {outcome.error}")
                after = len(table.current_snapshot().manifests(table.io))
                cpu[cached].append(outcome.process_cpu_seconds * 1000)
                wall[cached].append(outcome.seconds * 1000)
                if after <= before:
                    merges[cached].append(outcome.process_cpu_seconds * 1000)
    out = {"mode": "commits", "tables": tables, "rounds": rounds, "retain_snapshots": retain, "rows_per_file": SOAK_ROWS}
    for cached, label in ((False, "pyiceberg"), (True, "cached")):
        window = len(names[cached]) * 10
        out[label] = {"process_cpu_ms": _summary(cpu[cached]), "wall_ms": _summary(wall[cached]),
                      "merge_commits_cpu_ms": _summary(merges[cached]) if merges[cached] else None,
                      "first_10_rounds_median_cpu_ms": round(statistics.median(cpu[cached][:window]), 3),
                      "last_10_rounds_median_cpu_ms": round(statistics.median(cpu[cached][-window:]), 3)}
    out["ratio_median_cpu"] = round(out["pyiceberg"]["process_cpu_ms"]["median"] / out["cached"]["process_cpu_ms"]["median"], 2)
    out["ratio_mean_cpu"] = round(out["pyiceberg"]["process_cpu_ms"]["mean"] / out["cached"]["process_cpu_ms"]["mean"], 2)
    if merges[True] and merges[False]:
        out["ratio_merge_cpu"] = round(out["pyiceberg"]["merge_commits_cpu_ms"]["median"]
                                       / out["cached"]["merge_commits_cpu_ms"]["median"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--manifests", type=int, default=32)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--reps", type=int, default=10)
    parser.add_argument("--tables", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--retain", type=int, default=65)
    parser.add_argument("--json", dest="json_file")
    args = parser.parse_args(argv)
    result = {"scan": run_scan(args.manifests, args.turns, args.reps),
              "commits": run_commits(args.tables, args.rounds, args.retain)}
    return emit(result, args.json_file)

