"""One table commit: icerouter's (router/catalog/commit.py) against pyiceberg's own transaction.

    python scripts/bench_commit.py [--tables 100] [--batches 10] [--json FILE]

Both sides commit the same content to their own copy of each table (append of
one data file + the offsets property and snapshot summary), interleaved batch
by batch in one process, so the ratio is not disturbed by load: ours through
router/catalog (our SqlCatalog, WAL-mode SQLite file), pyiceberg's through its
own SqlCatalog on its own SQLite file and its own transaction (fast append). Data files are written outside the timing. A cProfile of one
batch of ours is summarised (top functions by cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=100)
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)

    import pyarrow as pa
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    from router.catalog import DEFAULT_TABLE_PROPERTIES, create_table, load_table
    from router.catalog.commit import commit_table
    from router.config import CatalogConfig
    from router.descriptors import TableResult
    from router.executor.datafiles import write_data_files
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
