"""Upsert commits into a v3 table (deletion vectors) against the same into a v2 table (position-delete files).

    python scripts/bench_v3_upsert.py [--rows 2000000] [--files 20] [--size 2000] [--batches 5]
                                      [--read-batches 100] [--json benchmarks/v3_upsert.json]

Two copies of one table (2M rows in 20 Parquet files, ids in ranges per file, own
SQLite catalog on icerouter's catalog class in a temp dir), one format v2 and one
v3, get the same batches of changed keys (70% updates, 20% inserts, 10% deletes),
committed the way the job commits them (catalog/commit.py `replaced_rows`: locate
the keys, position-delete files on v2 / deletion vectors merged with the file's
last vector on v3; new rows; one row delta), alternating per batch so that load on
the machine hits both alike. The ratio is v3's median over v2's.

Then reads: both tables take `--read-batches` more batches (their data files
collect deletes, each batch adds a small file) and are read whole by DuckDB and
by pyiceberg (the same files and deletes, as vectors against position-delete
files); the v3 table is then compacted the way `icerouter maintain` compacts it
and read again: the ratio is the read before compaction over the read after
(target <= 1.1).
At the end both tables must hold the same rows, and DuckDB must read them too.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from scripts.perf.components.upsert_commit import Keys, _rows, _schema, fill
from scripts.perf.report import emit

ROOT = Path(__file__).resolve().parents[3]


def _build(config, name: str, rows: int, files: int, version: int):
    from router.catalog import create_table

    table = create_table(config, f"bench.{name}", _schema(), properties={"format-version": str(version)})
    return fill(table, rows, files)


def commit(table, updates, inserts, deletes, version: int) -> dict:
    """One upsert batch as the job commits it; timed by phase."""
    from router.catalog.commit import replaced_rows
    from router.catalog.datafiles import write_data_files
    from router.catalog.row_delta import row_delta
    from router.catalog.sql import StagedTransaction
    from router.descriptors import UpsertWork

    changed = _rows(np.concatenate([updates, inserts]), version)
    keys = pa.table({"id": pa.array(np.concatenate([updates, inserts, deletes]), pa.int64())})
    t0, cpu = time.perf_counter(), time.process_time()
    data_files = write_data_files(table, changed)
    t1 = time.perf_counter()
    deletes_written = replaced_rows(table, UpsertWork(("id",), keys), data_files)
    t2 = time.perf_counter()
    with StagedTransaction(table) as tx:
        row_delta(tx, data_files, deletes_written, {"icerouter.job": "bench"},
                  removed_delete_files=deletes_written.replaced)
    t3 = time.perf_counter()
    assert deletes_written.rows == len(updates) + len(deletes), (deletes_written.rows, len(updates), len(deletes))
    return {"ms": (t3 - t0) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000, "write_data_ms": (t1 - t0) * 1000,
            "locate_and_write_deletes_ms": (t2 - t1) * 1000, "commit_ms": (t3 - t2) * 1000,
            "delete_files": len(deletes_written), "replaced": len(deletes_written.replaced)}


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 1)


def _reads(table, repeats: int = 3) -> dict:
    """Best of `repeats` full reads by DuckDB (count, sum) and by pyiceberg (every column)."""
    from router.cli.summary import duckdb_connect, metadata_path

    duck, scan, answer = [], [], None
    for _ in range(repeats):
        con = duckdb_connect(table.io.properties)
        t0 = time.perf_counter()
        answer = con.execute(f"SELECT count(*), sum(qty) FROM iceberg_scan('{metadata_path(table)}')").fetchone()
        duck.append(time.perf_counter() - t0)
        con.close()
        t0 = time.perf_counter()
        rows = table.scan().to_arrow().num_rows
        scan.append(time.perf_counter() - t0)
        assert rows == answer[0], (rows, answer)
    files = table.current_snapshot().summary
    return {"duckdb_ms": round(min(duck) * 1000, 1), "pyiceberg_ms": round(min(scan) * 1000, 1), "rows": int(answer[0]),
            "data_files": int(files["total-data-files"]), "delete_files": int(files["total-delete-files"])}


def run(rows: int, files: int, size: int, batches: int, read_batches: int) -> dict:
    from router.catalog import get_catalog
    from router.config import CatalogConfig
    from router.devstack.catalog import sqlite_catalog_properties
    from router.maintenance import compact, plan_compaction

    config = CatalogConfig("bench_v3", sqlite_catalog_properties(tempfile.mkdtemp(prefix="bench_v3_")))
    get_catalog(config).create_namespace("bench")
    started = time.perf_counter()
    tables = {v: _build(config, f"v{v}", rows, files, v) for v in (2, 3)}
    build_s = time.perf_counter() - started
    keys = Keys(rows)
    runs: dict[int, list[dict]] = {2: [], 3: []}
    for batch in range(1, batches + 1):
        updates, inserts, deletes = keys.batch(size)
        for v in ((2, 3) if batch % 2 else (3, 2)):
            runs[v].append(commit(tables[v], updates, inserts, deletes, batch))
        print(f"batch {batch}: v2 {runs[2][-1]['ms']:.0f} ms, v3 {runs[3][-1]['ms']:.0f} ms", file=sys.stderr)
    phases = ("ms", "cpu_ms", "write_data_ms", "locate_and_write_deletes_ms", "commit_ms")
    commits = {f"v{v}": {f"median_{k}": _median(runs[v], k) for k in phases} for v in (2, 3)}
    same = tables[2].refresh().scan().to_arrow().sort_by("id").equals(tables[3].refresh().scan().to_arrow().sort_by("id"))
    result = {
        "benchmark": "v3_upsert", "rows": rows, "files": files, "keys_per_batch": size, "batches": batches,
        "mix": {"updates": 0.7, "inserts": 0.2, "deletes": 0.1}, "build_seconds": round(build_s, 1),
        "python": platform.python_version(), "cpus": __import__("os").cpu_count(),
        "versions": {m: __import__(m).__version__ for m in ("pyiceberg", "pyarrow", "duckdb", "pyroaring")},
        "commit": commits,
        "commit_ratio_dv_over_position_deletes": round(commits["v3"]["median_ms"] / commits["v2"]["median_ms"], 2),
        "commit_runs": {f"v{v}": runs[v] for v in (2, 3)},
        "check": {"same_rows_v2_v3": same},
    }
    if read_batches:
        for batch in range(batches + 1, batches + read_batches + 1):
            changed = keys.batch(size)
            for v in (2, 3):
                commit(tables[v], *changed, batch)
        table = tables[3]
        position_deletes = _reads(tables[2].refresh())
        before = _reads(table.refresh())
        compacted = compact(table, plan_compaction(table, 128 * 1024 * 1024), 128 * 1024 * 1024)
        after = _reads(table.refresh())
        live = int(keys.live.sum())
        assert before["rows"] == after["rows"] == position_deletes["rows"] == live, (before, after, live)
        result["reads"] = {
            "upsert_batches_before": batches + read_batches, "with_deletion_vectors": before,
            "v2_with_position_delete_files": position_deletes, "compacted": after,
            "compaction": {"files_removed": compacted.files_removed, "files_added": compacted.files_added,
                           "rows_deleted": compacted.rows_deleted},
            # the DV table against the same table compacted (its small files and deletes gone): target <= 1.1
            "ratio_duckdb": round(before["duckdb_ms"] / after["duckdb_ms"], 2),
            "ratio_pyiceberg": round(before["pyiceberg_ms"] / after["pyiceberg_ms"], 2), "target": 1.1,
            # the same files and deletes, as deletion vectors against position-delete files
            "ratio_dv_over_position_deletes_duckdb": round(before["duckdb_ms"] / position_deletes["duckdb_ms"], 2),
            "ratio_dv_over_position_deletes_pyiceberg": round(
                before["pyiceberg_ms"] / position_deletes["pyiceberg_ms"], 2)}
    result["seconds"] = round(time.perf_counter() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--size", type=int, default=2_000, help="keys changed per batch")
    ap.add_argument("--batches", type=int, default=5, help="timed commit batches (each into both tables)")
    ap.add_argument("--read-batches", type=int, default=95, help="further batches into the v3 table before the reads")
    ap.add_argument("--json", dest="json_file", default=str(ROOT / "benchmarks" / "v3_upsert.json"))
    args = ap.parse_args(argv)
    return emit(run(args.rows, args.files, args.size, args.batches, args.read_batches), args.json_file)


if __name__ == "__main__":
    sys.exit(main())
