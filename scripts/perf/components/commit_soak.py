"""The commit path alone over many commits, as the soak benchmark's live job runs it (bench_commit.py --soak).

20 tables, one small file per table per batch, two worker processes committing
into one WAL SQLite catalog at once, the job's snapshot expiry rule and manifest
merging; the job's background maintenance in a third process, as on the driver,
compacting a table once about `compact_after` files arrived; no Spark, broker or
producer on the cores. Reports the mean and median per-table commit of the last
10 rounds against the first 10.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from scripts.perf.config import SOAK_ROWS, bench_catalog, maintenance_config, narrow_rows, narrow_schema
from scripts.perf.stats import first_last, median_first_last


def soak_worker(root: str, names: list[str], rounds: int, retain: int, barrier, committed) -> list[list[float]]:
    """One process committing its tables `rounds` times (a Spark worker's part of a batch): per
    round, each table's commit in ms. Each round's files are announced on `committed`."""
    from router.catalog import create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files

    catalog = bench_catalog(Path(root))
    schema = narrow_schema()
    data = narrow_rows(schema, SOAK_ROWS)
    for name in names:
        create_table(catalog, name, schema)
    maintenance = MaintenanceConfig(retain_last_snapshots=retain, max_snapshot_age_seconds=0)
    barrier.wait()
    out = []
    for batch in range(rounds):
        results = [TableResult(n, data_files=write_data_files(load_table(catalog, n), data), rows=SOAK_ROWS,
                               offsets={f"{n}/0": [batch * SOAK_ROWS, (batch + 1) * SOAK_ROWS - 1]}) for n in names]
        ms = []
        for r in results:
            outcome = commit_table(catalog, r, "bench", batch, maintenance=maintenance, where="task")
            if outcome.status != "committed":
                raise SystemExit(f"{r.table}: {outcome.error}")
            ms.append(outcome.seconds * 1000)
        out.append(ms)
        committed.put({n: 1 for n in names})
    committed.put(None)
    return out


def soak_maintainer(root: str, retain: int, compact_after: int, committed, workers: int, totals) -> None:
    """The driver's part: the job's background maintenance (router/driver/housekeeping.py), told
    after every round what was committed, in a process of its own as in the job."""
    import logging
    import threading

    from router.driver.housekeeping import BackgroundMaintenance

    logging.basicConfig(level=logging.WARNING, format="maintenance %(name)s: %(message)s")
    background = BackgroundMaintenance(maintenance_config(bench_catalog(Path(root)), retain, compact_after))
    background.enabled = compact_after > 0
    while workers:
        files = committed.get()
        if files is None:
            workers -= 1
        else:
            background.submit(files)
    for thread in threading.enumerate():
        if thread.name == "icerouter-maintenance":
            thread.join()
    totals.update(background.totals)


def run_soak(tables: int, rounds: int, processes: int, retain: int, compact_after: int) -> dict:
    import multiprocessing

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-commit-soak-"))
    bench_catalog(root).load()  # the catalog file and its WAL mode exist before the workers race for them
    names = [f"soak.t{i:03d}" for i in range(tables)]
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    barrier, committed, totals = manager.Barrier(processes), manager.Queue(), manager.dict()
    maintainer = ctx.Process(target=soak_maintainer, args=(str(root), retain, compact_after, committed, processes,
                                                           totals), name="bench-maintenance")
    maintainer.start()
    started = time.perf_counter()
    with ctx.Pool(processes) as pool:
        parts = pool.starmap(soak_worker, [(str(root), names[i::processes], rounds, retain, barrier, committed)
                                           for i in range(processes)])
    maintainer.join()
    maintenance = dict(totals)
    per_round = [[v for part in parts for v in part[b]] for b in range(rounds)]
    means = [statistics.mean(r) for r in per_round[1:]]  # round 0 appends to empty tables
    spans = [per_round[1:][i:i + rounds // 10] for i in range(0, rounds - 1, max(1, rounds // 10))]
    return {"mode": "soak", "tables": tables, "rounds": rounds, "processes": processes, "retain_snapshots": retain,
            "rows_per_file": SOAK_ROWS, "seconds": round(time.perf_counter() - started, 1),
            "compact_after_files": compact_after, "maintenance": maintenance,
            "commit_drift": first_last(means), "commit_median_drift": median_first_last(per_round[1:]),
            "timeline_median_ms": [round(statistics.median(v for r in span for v in r), 2) for span in spans]}
