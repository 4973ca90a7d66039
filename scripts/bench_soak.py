"""Soak mode: the driver's commit path alone, batch after batch, with the job's snapshot expiry.

Each batch writes one small data file per table (outside the timing), then
commits every table in parallel through `router.driver.commits.commit_all` and hands
each outcome to the job's `SnapshotExpirer`, exactly as the dispatcher does.
Without expiry every commit rewrites a longer snapshot list, so the latency of
the last batches against the first ones shows whether expiry keeps it flat.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import pyarrow as pa


def run_soak(args, root: Path) -> dict:
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from bench import load_average
    from router.driver.commits import commit_all
    from router.driver.housekeeping import SnapshotExpirer
    from router.config import CatalogConfig, MaintenanceConfig
    from router.catalog import create_table, load_table
    from router.descriptors import TableResult

    defaults = MaintenanceConfig()
    maintenance = MaintenanceConfig(
        expire_every_commits=args.expire_every or defaults.expire_every_commits,
        retain_last_snapshots=defaults.retain_last_snapshots,
        max_snapshot_age_seconds=(args.max_snapshot_age if args.max_snapshot_age is not None
                                  else defaults.max_snapshot_age_seconds))
    catalog = CatalogConfig("soak", {"type": "sql", "uri": f"sqlite:///{root / 'soak.db'}",
                                     "warehouse": (root / "warehouse").as_uri()})
    schema = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))
    names = [f"soak.t{i:03d}" for i in range(args.soak_tables)]
    for name in names:
        create_table(catalog, name, schema)
    expirer = SnapshotExpirer(catalog, maintenance)
    threads = args.commit_threads or 8
    result = {"mode": "soak", "batches": args.batches, "tables": len(names), "commit_threads": threads,
              "expire_every": maintenance.expire_every_commits, "retain_last": maintenance.retain_last_snapshots,
              "max_snapshot_age": maintenance.max_snapshot_age_seconds, "load_before": load_average()}
    per_batch, batch_wall = [], []
    for batch_id in range(args.batches):
        results = []
        for name in names:
            table = load_table(catalog, name)
            data = pa.table({"id": pa.array(range(batch_id * 100, batch_id * 100 + 100), pa.int64()),
                             "body": pa.array(["x" * 40] * 100)})
            files = list(_dataframe_to_data_files(table.metadata, data, table.io))
            results.append(TableResult(name, data_files=files, rows=100, offsets={"soak/0": [batch_id, batch_id]}))
        started = time.perf_counter()
        report = commit_all(catalog, results, "soak", batch_id, threads=threads)
        batch_wall.append(time.perf_counter() - started)
        for outcome in report.outcomes:
            expirer.after_commit(outcome)
        if report.failed:
            raise RuntimeError(f"batch {batch_id}: {report.failed[0].table}: {report.failed[0].error}")
        per_batch.append(statistics.mean(o.seconds for o in report.outcomes) * 1000)
        if batch_id % 50 == 49:
            print(f"  batch {batch_id + 1}: per-table commit {per_batch[-1]:.1f} ms", flush=True)
    first, last = statistics.mean(per_batch[:10]), statistics.mean(per_batch[-10:])
    result["commit_drift"] = {"first10_ms": round(first, 2), "last10_ms": round(last, 2),
                              "ratio": round(last / first, 3)}
    step = max(1, args.batches // 10)
    result["timeline"] = [{"from": i, "to": min(i + step, args.batches) - 1,
                           "mean_ms": round(statistics.mean(per_batch[i:i + step]), 2),
                           "batch_s": round(statistics.mean(batch_wall[i:i + step]), 4)}
                          for i in range(0, args.batches, step)]
    result["snapshots_at_end"] = round(statistics.mean(
        len(load_table(catalog, n, refresh=True).metadata.snapshots) for n in names), 1)
    result["load_after"] = load_average()
    return result
