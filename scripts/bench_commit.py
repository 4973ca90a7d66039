"""One table commit: icerouter's (router/catalog/commit.py) against pyiceberg's own transaction.

    python scripts/bench_commit.py [--tables 100] [--batches 10] [--json FILE]
    python scripts/bench_commit.py --soak [--tables 20] [--batches 500] [--processes 2] [--json FILE]

Both sides commit the same content to their own copy of each table (append of
one data file + the offsets property and snapshot summary), interleaved batch
by batch in one process, so the ratio is not disturbed by load: ours through
router/catalog (our SqlCatalog, WAL-mode SQLite file), pyiceberg's through its
own SqlCatalog on its own SQLite file and its own transaction (fast append). Data files are written outside the timing. A cProfile of one
batch of ours is summarised (top functions by cumulative time).

--soak: the commit path alone over many commits, as the soak benchmark's live job
runs it (20 tables, one small file per table per batch, two worker processes
committing into one WAL SQLite catalog at once, the job's snapshot expiry rule
and manifest merging; the job's background maintenance in a third process, as
on the driver, compacting a table once about `--compact-after` files arrived)
but without Spark, broker or producer on the cores: the median and mean
per-table commit of the last 10 rounds against the first 10, and the same again
without the background maintenance. Rounds are not paced: each table commits
several times a second, so compactions meet far more concurrent appends than
at a 1 s trigger.
Expiry keeps `--retain` snapshots (60: what a table holds at a 1 s trigger with
the default 60 s snapshot age), so the metadata reaches the live job's size.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import io
import json
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


SOAK_ROWS = 100  # rows per table per batch: 2,000 records/s over 20 tables at a 1 s trigger


def soak_worker(root: str, names: list[str], rounds: int, retain: int, barrier, committed) -> list[list[float]]:
    """One process committing its tables `rounds` times (a Spark worker's part of a batch): per
    round, each table's commit in ms. Each round's files are announced on `committed`."""
    import pyarrow as pa

    from router.catalog import create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files

    catalog = soak_catalog(Path(root))
    schema = soak_schema()
    data = pa.table({f.name: pa.array(range(SOAK_ROWS), pa.int64()) if i % 2 else pa.array(["x" * 20] * SOAK_ROWS)
                     for i, f in enumerate(schema.fields)})
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
    background = BackgroundMaintenance(maintenance_config(soak_catalog(Path(root)), retain, compact_after))
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


def maintenance_config(catalog, retain: int, compact_after: int):
    """A job config on `catalog` whose maintenance compacts once `compact_after` files arrived (never
    by the clock) and keeps `retain` snapshots; its source and registry are never contacted."""
    from router.config import parse_config

    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["unused"]}, "registry": {"url": "http://127.0.0.1:9"},
        "catalog": {"name": catalog.name, "properties": dict(catalog.properties)},
        "maintenance": {"retain_last_snapshots": retain, "max_snapshot_age_seconds": 1,
                        "compact_after_files": max(compact_after, 0), "compact_interval_seconds": 10 ** 9}})


def soak_catalog(root: Path):
    from router.config import CatalogConfig

    return CatalogConfig("bench", {"type": "sql", "uri": f"sqlite:///{root / 'c.db'}",
                                   "warehouse": (root / "wh").as_uri()})


def soak_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(*[NestedField(i + 1, f"f{i}", LongType() if i % 2 else StringType(), required=False)
                    for i in range(10)])


def run_soak(tables: int, rounds: int, processes: int, retain: int, compact_after: int) -> dict:
    import multiprocessing

    from bench_soak import first_last, median_first_last

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-commit-soak-"))
    soak_catalog(root).load()  # the catalog file and its WAL mode exist before the workers race for them
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int)
    ap.add_argument("--batches", type=int)
    ap.add_argument("--soak", action="store_true", help="the commit path alone over many commits (see above)")
    ap.add_argument("--processes", type=int, default=2, help="--soak: committing processes")
    ap.add_argument("--retain", type=int, default=60, help="--soak: snapshots the expiry keeps")
    ap.add_argument("--compact-after", type=int, default=100,
                    help="--soak: maintenance.compact_after_files of the background maintenance (0: none)")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    if args.soak:
        soak = functools.partial(run_soak, args.tables or 20, args.batches or 500, args.processes, args.retain)
        result = soak(args.compact_after)
        if args.compact_after:  # the same without background maintenance, for a same-run comparison
            result = {"with_maintenance": result, "without_maintenance": soak(0)}
        print(json.dumps(result))
        if args.json_file:
            Path(args.json_file).write_text(json.dumps(result, indent=1))
        return 0
    args.tables, args.batches = args.tables or 100, args.batches or 10

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from router.catalog import DEFAULT_TABLE_PROPERTIES, create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import CatalogConfig
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files
    from router.progress import property_name

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-commit-"))
    catalog = CatalogConfig("bench", {"type": "sql", "uri": f"sqlite:///{root / 'c.db'}",
                                      "warehouse": (root / "wh").as_uri()})
    # pyiceberg alone: its own SqlCatalog class on its own SQLite file (rollback journal)
    plain = CatalogConfig("plain", {"type": "sql", "uri": f"sqlite:///{root / 'plain.db'}",
                                    "warehouse": (root / "wh").as_uri()}).load()
    schema = Schema(*[NestedField(i + 1, f"f{i}", LongType() if i % 2 else StringType(), required=False)
                      for i in range(20)])
    data = pa.table({f"f{i}": pa.array(range(2000), pa.int64()) if i % 2 else pa.array(["x" * 20] * 2000)
                     for i in range(20)})
    names = {side: [f"{side}.t{i:03d}" for i in range(args.tables)] for side in ("ours", "pyiceberg")}
    for name in names["ours"]:
        create_table(catalog, name, schema)
    plain.create_namespace("pyiceberg")
    theirs_tables = {name: plain.create_table(name, schema=schema, properties=DEFAULT_TABLE_PROPERTIES)
                     for name in names["pyiceberg"]}

    def result(name: str, batch: int) -> TableResult:
        table = theirs_tables[name] if name in theirs_tables else load_table(catalog, name)
        files = write_data_files(table, data)
        return TableResult(name, data_files=files, rows=data.num_rows, offsets={f"{name}/0": [batch * 2000,
                                                                                              batch * 2000 + 1999]})

    def theirs(r: TableResult, batch: int) -> None:
        table = theirs_tables[r.table]
        doc = json.dumps({"batch_id": batch, "offsets": {k: v[1] + 1 for k, v in r.offsets.items()}})
        with table.transaction() as tx:
            summary = {"icerouter.job": "bench", "icerouter.batch-id": str(batch), property_name("bench"): doc}
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for f in r.data_files:
                    append.append_data_file(f)
            tx.set_properties({property_name("bench"): doc})

    ms = {"ours": [], "pyiceberg": []}
    profile = None
    for batch in range(args.batches):
        pending = {side: [result(n, batch) for n in names[side]] for side in names}
        started = time.perf_counter()
        for r in pending["pyiceberg"]:
            theirs(r, batch)
        ms["pyiceberg"].append((time.perf_counter() - started) * 1000 / args.tables)
        profiler = cProfile.Profile() if batch == args.batches - 1 else None
        started = time.perf_counter()
        if profiler:
            profiler.enable()
        for r in pending["ours"]:
            outcome = commit_table(catalog, r, "bench", batch)
            if outcome.status != "committed":
                raise SystemExit(f"{r.table}: {outcome.error}")
        if profiler:
            profiler.disable()
            profile = profiler
        else:
            ms["ours"].append((time.perf_counter() - started) * 1000 / args.tables)
        print(f"batch {batch}: pyiceberg {ms['pyiceberg'][-1]:.2f} ms/commit, ours "
              f"{ms['ours'][-1] if ms['ours'] else float('nan'):.2f} ms/commit", flush=True)

    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(12)
    mean = {side: round(statistics.mean(values), 3) for side, values in ms.items()}
    result_doc = {"tables": args.tables, "batches": args.batches, "rows_per_file": data.num_rows,
                  "ms_per_commit": mean, "speedup": round(mean["pyiceberg"] / mean["ours"], 2),
                  "profile_ours_last_batch": [line for line in out.getvalue().splitlines()
                                              if "site-packages" in line or "router/" in line][:12]}
    print(json.dumps({k: v for k, v in result_doc.items() if k != "profile_ours_last_batch"}))
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(result_doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
