"""Upsert commit work per batch: position deletes + one row delta against pyiceberg's copy-on-write upsert.

    python scripts/bench_upsert_commit.py [--rows 2000000] [--files 20] [--sizes 2000 20000]
                                          [--batches 3] [--json benchmarks/upsert_commit.json]

Three copies of one table (2M rows in 20 Parquet files, ids in ranges per file,
own SQLite catalog in a temp dir) get the same batches of changed keys: 70%
updates of live ids, 20% new ids, 10% deletes of live ids. Per batch:

- ours (router/catalog: locate_keys -> write_position_deletes -> write_data_files
  -> one row delta committed with the job's offsets property, as the job will):
  timed by phase. "warm" keeps the process's caches (the job is a long-lived
  process: the key lookups of files it located in before are kept), "cold"
  forgets this copy's cache entries before every batch.
- pyiceberg 0.12: `Table.upsert(rows, join_cols=["id"])` for updates and inserts,
  then `Table.delete(In("id", deleted))`: copy-on-write, rewriting every file a
  changed key is in.

All run in one process, alternating per batch, so load on the machine hits all
alike. At the end the three tables must hold the same rows (pyiceberg reads
them; DuckDB reads ours).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.perf.report import emit

ROOT = Path(__file__).resolve().parents[3]

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

SEED = 20_261_125


def _schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestamptzType

    return Schema(NestedField(1, "id", LongType(), required=False),
                  NestedField(2, "ts", TimestamptzType(), required=False),
                  NestedField(3, "name", StringType(), required=False),
                  NestedField(4, "amount", DoubleType(), required=False),
                  NestedField(5, "qty", IntegerType(), required=False))


def _rows(ids: np.ndarray, version: int) -> pa.Table:
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "ts": pa.array((1_700_000_000_000_000 + ids * 1_000_000 + version).astype("datetime64[us]"),
                       pa.timestamp("us", tz="UTC")),
        "name": pa.array([f"customer-{i}-v{version}" for i in ids.tolist()], pa.string()),
        "amount": pa.array(ids * 0.25 + version, pa.float64()),
        "qty": pa.array((ids + version) % 1000, pa.int32()),
    })


def _build(catalog, name: str, rows: int, files: int):
    from router.catalog import DEFAULT_TABLE_PROPERTIES

    table = catalog.create_table(f"bench.{name}", schema=_schema(), properties=dict(DEFAULT_TABLE_PROPERTIES))
    return fill(table, rows, files)


def fill(table, rows: int, files: int):
    """`rows` keys 0.. in `files` data files, appended in one commit: the table an upsert batch starts from."""
    from router.catalog.datafiles import write_data_files
    from router.catalog.sql import StagedTransaction

    written = []
    for i in range(files):
        written += write_data_files(table, _rows(np.arange(i * rows // files, (i + 1) * rows // files), 0))
    with StagedTransaction(table) as tx:
        with tx.update_snapshot().fast_append() as append:
            for f in written:
                append.append_data_file(f)
    return table


class Keys:
    """Live ids and the batches of changed keys (70% updates, 20% inserts, 10% deletes), seeded."""

    def __init__(self, rows: int):
        self.rng = np.random.default_rng(SEED)
        self.live = np.ones(rows, dtype=bool)
        self.next_id = rows

    def batch(self, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_upd, n_ins = int(size * 0.7), int(size * 0.2)
        n_del = size - n_upd - n_ins
        candidates = np.flatnonzero(self.live)
        chosen = self.rng.choice(candidates, n_upd + n_del, replace=False)
        updates, deletes = np.sort(chosen[:n_upd]), np.sort(chosen[n_upd:])
        inserts = np.arange(self.next_id, self.next_id + n_ins, dtype=np.int64)
        self.next_id += n_ins
        self.live = np.concatenate([self.live, np.ones(n_ins, dtype=bool)])
        self.live[deletes] = False
        return updates, inserts, deletes


def _forget(table) -> None:
    """Drop this table's entries from the process caches (snapshot index, positions, key lookups)."""
    import router.catalog.locate as locate
    import router.catalog.snapshot_files as files

    location, uuid = table.metadata.location, str(table.metadata.table_uuid)
    with files._lock:
        for key in [k for k in files._snapshots if k[0] == uuid]:
            del files._snapshots[key]
        for key in [k for k in files._positions if k[0].startswith(location)]:  # (path, blob offset)
            del files._positions[key]
        for key in [k for k in files._merged if k.startswith(location)]:
            del files._merged[key]
    with locate._lock:
        for key in [k for k in locate._file_key_cache if k[0].startswith(location)]:
            del locate._file_key_cache[key]


def ours(table, updates, inserts, deletes, version: int, batch_id: int) -> dict:
    """One upsert batch the way the job commits it: locate, position deletes, new rows, one row delta."""
    import json

    from router.catalog.deletes import write_position_deletes
    from router.catalog.locate import locate_keys
    from router.catalog.row_delta import row_delta
    from router.catalog.sql import StagedTransaction
    from router.catalog.datafiles import write_data_files

    changed = _rows(np.concatenate([updates, inserts]), version)
    keys = pa.table({"id": pa.array(np.concatenate([updates, inserts, deletes]), pa.int64())})
    t0, cpu = time.perf_counter(), time.process_time()
    located = locate_keys(table, keys, ["id"])
    t1 = time.perf_counter()
    delete_files = write_position_deletes(table, located.select(["file_path", "pos"]))
    t2 = time.perf_counter()
    data_files = write_data_files(table, changed)
    t3 = time.perf_counter()
    doc = json.dumps({"batch_id": batch_id, "offsets": {"changes/0": batch_id * 1000}})
    with StagedTransaction(table) as tx:
        tx.set_properties({"icerouter.offsets.bench": doc})
        row_delta(tx, data_files, delete_files, {"icerouter.job": "bench", "icerouter.offsets.bench": doc})
    t4 = time.perf_counter()
    assert located.num_rows == len(updates) + len(deletes), (located.num_rows, len(updates), len(deletes))
    return {"ms": (t4 - t0) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
            "locate_ms": (t1 - t0) * 1000, "write_deletes_ms": (t2 - t1) * 1000,
            "write_data_ms": (t3 - t2) * 1000, "commit_ms": (t4 - t3) * 1000,
            "delete_files": len(delete_files), "data_files": len(data_files)}


def pyiceberg_upsert(table, updates, inserts, deletes, version: int) -> dict:
    from pyiceberg.expressions import In

    changed = _rows(np.concatenate([updates, inserts]), version)
    before = {s.snapshot_id for s in table.metadata.snapshots}
    t0, cpu = time.perf_counter(), time.process_time()
    result = table.upsert(changed, join_cols=["id"])
    t1 = time.perf_counter()
    table.delete(In("id", deletes.tolist()))
    t2 = time.perf_counter()
    assert (result.rows_updated, result.rows_inserted) == (len(updates), len(inserts)), result
    rewritten = sum(int((s.summary or {}).get("deleted-data-files") or 0)
                    for s in table.metadata.snapshots if s.snapshot_id not in before)
    return {"ms": (t2 - t0) * 1000, "cpu_ms": (time.process_time() - cpu) * 1000,
            "upsert_ms": (t1 - t0) * 1000, "delete_ms": (t2 - t1) * 1000, "files_rewritten": rewritten}


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 1)


def _contents(table) -> pa.Table:
    return table.refresh().scan().to_arrow().sort_by("id")


def _duckdb_summary(table) -> tuple:
    from router.cli.summary import duckdb_connect, metadata_path

    con = duckdb_connect(table.io.properties)
    try:
        return con.execute(f"SELECT count(*), count(DISTINCT id), sum(id), sum(qty) "
                           f"FROM iceberg_scan('{metadata_path(table)}')").fetchone()
    finally:
        con.close()


def run(rows: int, files: int, sizes: list[int], batches: int) -> dict:
    from router.catalog import get_catalog
    from router.config import CatalogConfig
    from router.devstack.catalog import sqlite_catalog_properties

    work = tempfile.mkdtemp(prefix="bench_upsert_")
    catalog = get_catalog(CatalogConfig("bench_upsert", sqlite_catalog_properties(work)))
    catalog.create_namespace("bench")
    started = time.perf_counter()
    tables = {name: _build(catalog, name, rows, files) for name in ("warm", "cold", "pyiceberg")}
    build_s = time.perf_counter() - started
    keys = Keys(rows)
    results: dict = {}
    batch_id = 0
    for size in sizes:
        runs: dict[str, list[dict]] = {"warm": [], "cold": [], "pyiceberg": []}
        for _ in range(batches):
            batch_id += 1
            updates, inserts, deletes = keys.batch(size)
            runs["warm"].append(ours(tables["warm"], updates, inserts, deletes, batch_id, batch_id))
            _forget(tables["cold"])
            runs["cold"].append(ours(tables["cold"], updates, inserts, deletes, batch_id, batch_id))
            runs["pyiceberg"].append(pyiceberg_upsert(tables["pyiceberg"], updates, inserts, deletes, batch_id))
            print(f"size {size} batch {batch_id}: warm {runs['warm'][-1]['ms']:.0f} ms, "
                  f"cold {runs['cold'][-1]['ms']:.0f} ms, pyiceberg {runs['pyiceberg'][-1]['ms']:.0f} ms",
                  file=sys.stderr)
        phases = ("ms", "cpu_ms", "locate_ms", "write_deletes_ms", "write_data_ms", "commit_ms")
        results[str(size)] = {
            "ours_warm": {f"median_{k}": _median(runs["warm"], k) for k in phases},
            "ours_cold": {f"median_{k}": _median(runs["cold"], k) for k in phases},
            "pyiceberg": {f"median_{k}": _median(runs["pyiceberg"], k)
                          for k in ("ms", "cpu_ms", "upsert_ms", "delete_ms")},
            "pyiceberg_files_rewritten_per_batch": [r["files_rewritten"] for r in runs["pyiceberg"]],
            "runs": runs,
        }
        r = results[str(size)]
        r["speedup_warm"] = round(r["pyiceberg"]["median_ms"] / r["ours_warm"]["median_ms"], 1)
        r["speedup_cold"] = round(r["pyiceberg"]["median_ms"] / r["ours_cold"]["median_ms"], 1)
    contents = {name: _contents(t) for name, t in tables.items()}
    same = contents["warm"].equals(contents["cold"]) and contents["warm"].equals(contents["pyiceberg"])
    live = int(keys.live.sum())
    duck = _duckdb_summary(tables["warm"])
    summary = tables["warm"].current_snapshot().summary
    return {
        "benchmark": "upsert_commit", "rows": rows, "files": files, "batches_per_size": batches,
        "mix": {"updates": 0.7, "inserts": 0.2, "deletes": 0.1}, "build_seconds": round(build_s, 1),
        "python": platform.python_version(), "cpus": __import__("os").cpu_count(),
        "versions": {m: __import__(m).__version__ for m in ("pyiceberg", "pyarrow", "duckdb")},
        "results": results,
        "check": {"same_rows_in_all_three": same, "live_rows": live, "rows_read": contents["warm"].num_rows,
                  "duckdb_count_distinct_sum": [int(v) for v in duck[:3]],
                  "duckdb_agrees": (duck[0], duck[1]) == (live, live) and int(duck[3]) == int(
                      pc.sum(contents["pyiceberg"].column("qty")).as_py()),
                  "ours_total_delete_files": int(summary["total-delete-files"]),
                  "ours_total_position_deletes": int(summary["total-position-deletes"]),
                  "ours_total_data_files": int(summary["total-data-files"])},
        "seconds": round(time.perf_counter() - started, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=20)
    ap.add_argument("--sizes", type=int, nargs="+", default=[2_000, 20_000])
    ap.add_argument("--batches", type=int, default=3, help="batches per size")
    ap.add_argument("--json", dest="json_file", default=str(ROOT / "benchmarks" / "upsert_commit.json"))
    args = ap.parse_args(argv)
    result = run(args.rows, args.files, args.sizes, args.batches)
    return emit(result, args.json_file)


if __name__ == "__main__":
    sys.exit(main())
