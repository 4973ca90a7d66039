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
import tempfile
import time
from pathlib import Path

from scripts.perf.components.commit_soak import run_soak
from scripts.perf.config import bench_catalog, narrow_rows, narrow_schema
from scripts.perf.report import write_json


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int)
    ap.add_argument("--batches", type=int)
    ap.add_argument("--soak", action="store_true", help="the commit path alone over many commits (see above)")
    ap.add_argument("--processes", type=int, default=2, help="--soak: committing processes")
    ap.add_argument("--retain", type=int, default=60, help="--soak: snapshots the expiry keeps")
    ap.add_argument("--compact-after", type=int, default=100,
                    help="--soak: maintenance.compact_after_files of the background maintenance (0: none)")
    ap.add_argument("--keys", type=int, default=1,
                    help="topic-partitions each commit covers (a fan-in table's offsets document grows with them)")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    if args.soak:
        soak = functools.partial(run_soak, args.tables or 20, args.batches or 500, args.processes, args.retain)
        result = soak(args.compact_after)
        if args.compact_after:  # the same without background maintenance, for a same-run comparison
            result = {"with_maintenance": result, "without_maintenance": soak(0)}
        print(json.dumps(result))
        if args.json_file:
            write_json(result, args.json_file)
        return 0
    result = run_interleaved(args.tables or 100, args.batches or 10, args.keys)
    print(json.dumps({k: v for k, v in result.items() if k != "profile_ours_last_batch"}))
    if args.json_file:
        write_json(result, args.json_file)
    return 0


def run_interleaved(tables: int, batches: int, keys: int = 1) -> dict:
    """Ours and pyiceberg's commit of the same files, batch by batch; a cProfile of our last batch."""
    from router.catalog import DEFAULT_TABLE_PROPERTIES, create_table, load_table
    from router.catalog.commit import commit_table
    from router.descriptors import TableResult
    from router.catalog.datafiles import write_data_files
    from router.progress import property_name

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-commit-"))
    catalog = bench_catalog(root)
    # pyiceberg alone: its own SqlCatalog class on its own SQLite file (rollback journal)
    plain = bench_catalog(root, "plain", "plain.db").load()
    schema = narrow_schema(20)
    data = narrow_rows(schema, 2000)
    names = {side: [f"{side}.t{i:03d}" for i in range(tables)] for side in ("ours", "pyiceberg")}
    for name in names["ours"]:
        create_table(catalog, name, schema)
    plain.create_namespace("pyiceberg")
    theirs_tables = {name: plain.create_table(name, schema=schema, properties=DEFAULT_TABLE_PROPERTIES)
                     for name in names["pyiceberg"]}

    def result(name: str, batch: int) -> TableResult:
        table = theirs_tables[name] if name in theirs_tables else load_table(catalog, name)
        files = write_data_files(table, data)
        return TableResult(name, data_files=files, rows=data.num_rows,
                           offsets={f"{name}-{k:04d}/0": [batch * 2000, batch * 2000 + 1999] for k in range(keys)})

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
    for batch in range(batches):
        pending = {side: [result(n, batch) for n in names[side]] for side in names}
        started = time.perf_counter()
        for r in pending["pyiceberg"]:
            theirs(r, batch)
        ms["pyiceberg"].append((time.perf_counter() - started) * 1000 / tables)
        profiler = cProfile.Profile() if batch == batches - 1 else None
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
            ms["ours"].append((time.perf_counter() - started) * 1000 / tables)
        print(f"batch {batch}: pyiceberg {ms['pyiceberg'][-1]:.2f} ms/commit, ours "
              f"{ms['ours'][-1] if ms['ours'] else float('nan'):.2f} ms/commit", flush=True)

    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(12)
    mean = {side: round(statistics.mean(values), 3) for side, values in ms.items()}
    result_doc = {"tables": tables, "batches": batches, "rows_per_file": data.num_rows, "keys_per_commit": keys,
                  "ms_per_commit": mean, "speedup": round(mean["pyiceberg"] / mean["ours"], 2),
                  "profile_ours_last_batch": [line for line in out.getvalue().splitlines()
                                              if "site-packages" in line or "router/" in line][:12]}
    return result_doc
