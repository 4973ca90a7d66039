"""Read time of an upsert table after 100 change batches, against the same table compacted.

    python scripts/bench_upsert_read.py [--rows 2000000] [--files 20] [--batches 100]
                                        [--batch-keys 2000 10000] [--runs 3] [--format-versions 2 3]
                                        [--json benchmarks/upsert_read.json]

An upsert table (key `id`, identifier field, format v2, created as the job
creates tables) is loaded with `--rows` rows in `--files` commits, then takes
`--batches` change batches of `--batch-keys` keys each (70% updates of live
keys, 20% new keys, 10% deletes of live keys; one table per size given, the
read cost grows with the rows the deletes leave dead) through the job's commit path:
the images are written as the tasks write them (router/catalog/datafiles.py)
and handed to router/catalog/commit.py `commit_table` in a `TableResult`
carrying `UpsertWork`, which locates the replaced rows and commits position
deletes and images in one row delta per batch. The table then holds the
initial files, one small image file and one position-delete file per batch.

That snapshot is compacted as `icerouter maintain` does (router/maintenance
plan_compaction + compact: deletes applied, delete files dropped); the old
snapshot stays readable (nothing is expired), so both are read alternately in
one process, `--runs` times each: DuckDB's iceberg_scan (`SELECT *` into Arrow,
a fresh connection per read) on each snapshot's metadata file, and pyiceberg's
`scan(snapshot_id=...).to_arrow()`. Every read must return exactly the live rows
the batches leave (count, distinct keys, sums of id and qty): a wrong read fails
the run. Target: DuckDB after the batches <= 2x the compacted table.

The job does not let an upsert table go 100 batches without compaction: its
scheduler compacts a table once `maintenance.compact_after_files` data and
delete files were committed to it. So the same batches also go into a second
table maintained that way (`--read-every`: DuckDB reads it every N batches),
and the worst of those reads against the compacted table is reported too.

`--format-versions 2 3` (the default) runs every table as format v2 (position-delete files) and
as v3 (deletion vectors), interleaved per size; v2 is reported at the top level, v3 under `v3`
(target: its maintained table's last read <= 1.1x the compacted one).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from scripts.perf.config import bench_catalog
from scripts.perf.report import emit

ROOT = Path(__file__).resolve().parents[3]
SEED = 20_261_126
JOB = "bench-read"
TARGET_RATIO = 2.0
V3_TARGET_RATIO = 1.1
MIX = {"updates": 0.7, "inserts": 0.2, "deletes": 0.1}


def _schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestamptzType

    return Schema(NestedField(1, "id", LongType(), required=True),
                  NestedField(2, "updated_at", TimestamptzType(), required=False),
                  NestedField(3, "name", StringType(), required=False),
                  NestedField(4, "region", StringType(), required=False),
                  NestedField(5, "amount", DoubleType(), required=False),
                  NestedField(6, "qty", IntegerType(), required=False),
                  identifier_field_ids=[1])


REGIONS = np.array(["eu", "us", "apac"])


def _rows(arrow_schema: pa.Schema, ids: np.ndarray, version: int) -> pa.Table:
    """Row images of `ids` at `version`: qty = (id + version) % 1000 lets a reader's sum be checked."""
    ids = np.asarray(ids, dtype=np.int64)
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "updated_at": pa.array((1_700_000_000_000_000 + ids * 1_000 + version).astype("datetime64[us]"),
                               pa.timestamp("us", tz="UTC")),
        "name": pa.array([f"customer {i} v{version}" for i in ids.tolist()], pa.string()),
        "region": pa.array(REGIONS[(ids + version) % 3], pa.string()),
        "amount": pa.array(ids * 0.25 + version, pa.float64()),
        "qty": pa.array((ids + version) % 1000, pa.int32()),
    }).cast(arrow_schema)


class Truth:
    """The version of every key (-1: deleted) and the seeded batches of changed keys."""

    def __init__(self, rows: int):
        self.rng = np.random.default_rng(SEED)
        self.version = np.zeros(rows, dtype=np.int64)

    def batch(self, size: int, version: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        n_upd, n_ins = int(size * MIX["updates"]), int(size * MIX["inserts"])
        n_del = size - n_upd - n_ins
        chosen = self.rng.choice(np.flatnonzero(self.version >= 0), n_upd + n_del, replace=False)
        updates, deletes = np.sort(chosen[:n_upd]), np.sort(chosen[n_upd:])
        start = len(self.version)
        inserts = np.arange(start, start + n_ins, dtype=np.int64)
        self.version = np.concatenate([self.version, np.zeros(n_ins, dtype=np.int64)])
        self.version[updates] = version
        self.version[inserts] = version
        self.version[deletes] = -1
        return updates, inserts, deletes

    def summary(self) -> tuple[int, int, int, int]:
        """(rows, distinct ids, sum of id, sum of qty) of the live rows."""
        live = np.flatnonzero(self.version >= 0)
        qty = (live + self.version[live]) % 1000
        return len(live), len(live), int(live.sum()), int(qty.sum())


def _summary(data: pa.Table) -> tuple[int, int, int, int]:
    ids = data.column("id")
    return (data.num_rows, len(pc.unique(ids)), int(pc.sum(ids).as_py() or 0),
            int(pc.sum(data.column("qty").cast(pa.int64())).as_py() or 0))


def _commit(catalog, name: str, arrow_schema, ids, touched, deletes: int, version: int, batch_id: int, offset: int):
    """One batch as the tasks hand it over: images written, then commit_table with the keys they replace."""
    from router.catalog import load_table
    from router.catalog.commit import commit_table
    from router.catalog.datafiles import write_data_files
    from router.descriptors import TableResult, UpsertWork

    table = load_table(catalog, name)
    t0 = time.perf_counter()
    images = _rows(arrow_schema, ids, version)
    files = write_data_files(table, images) if images.num_rows else []
    t1 = time.perf_counter()
    result = TableResult(name, files, images.num_rows, offsets={"changes/0": [offset, offset + len(touched) - 1]},
                         upsert=UpsertWork(("id",), pa.table({"id": pa.array(touched, pa.int64())}), deletes))
    outcome = commit_table(catalog, result, JOB, batch_id)
    if outcome.status != "committed":
        raise SystemExit(f"batch {batch_id}: commit {outcome.status}: {outcome.error}")
    return outcome, t1 - t0


def build(catalog, name: str, rows: int, files: int, batches: int, batch_keys: int,
          after_batch=None, format_version: int = 2) -> tuple[Truth, dict]:
    """The table: `rows` in `files` snapshot commits, then `batches` change batches; timings.
    `after_batch(batch, outcome, truth)` runs after each change batch's commit."""
    from evolution.arrow import iceberg_to_arrow
    from router.catalog import create_table

    table = create_table(catalog, name, _schema(), properties={"format-version": str(format_version)})
    arrow_schema = iceberg_to_arrow(table.schema())
    truth = Truth(rows)
    offset, batch_id, timings = 0, 0, {"load_s": 0.0, "batches": []}
    started = time.perf_counter()
    for i in range(files):  # Debezium's snapshot: `r` events of new keys (located in no file)
        ids = np.arange(i * rows // files, (i + 1) * rows // files, dtype=np.int64)
        outcome, _ = _commit(catalog, name, arrow_schema, ids, ids, 0, 0, batch_id, offset)
        if outcome.deleted_rows:
            raise SystemExit(f"snapshot commit {i} deleted {outcome.deleted_rows} rows")
        offset, batch_id = offset + len(ids), batch_id + 1
    timings["load_s"] = round(time.perf_counter() - started, 2)
    for b in range(1, batches + 1):
        updates, inserts, deletes = truth.batch(batch_keys, b)
        touched = np.concatenate([updates, inserts, deletes])
        outcome, write_s = _commit(catalog, name, arrow_schema, np.concatenate([updates, inserts]), touched,
                                   len(deletes), b, batch_id, offset)
        if outcome.deleted_rows != len(updates) + len(deletes):
            raise SystemExit(f"batch {b}: {outcome.deleted_rows} rows deleted, {len(updates) + len(deletes)} replaced")
        timings["batches"].append({"write_ms": round(write_s * 1000, 1), "commit_ms": round(outcome.seconds * 1000, 1),
                                   "commit_cpu_ms": round(outcome.cpu_seconds * 1000, 1)})
        offset, batch_id = offset + len(touched), batch_id + 1
        if after_batch is not None:
            after_batch(b, outcome, truth)
        if b % 10 == 0:
            print(f"{name} batch {b}: commit {outcome.seconds * 1000:.0f} ms", file=sys.stderr)
    return truth, timings


def state(table, snapshot_id: int) -> dict:
    summary = table.metadata.snapshot_by_id(snapshot_id).summary
    names = {"total-data-files": "data_files", "total-delete-files": "delete_files",
             "total-records": "rows_in_data_files", "total-position-deletes": "position_deletes",
             "total-files-size": "bytes"}
    return {name: int(summary.get(k) or 0) for k, name in names.items()}


def read_duckdb(metadata_file: str, io_properties) -> tuple[float, tuple]:
    from router.cli.summary import duckdb_connect

    con = duckdb_connect(io_properties)
    try:
        started = time.perf_counter()
        data = con.execute(f"SELECT * FROM iceberg_scan('{metadata_file}')").to_arrow_table()
        seconds = time.perf_counter() - started
    finally:
        con.close()
    return seconds, _summary(data)


def read_pyiceberg(table, snapshot_id: int) -> tuple[float, tuple]:
    started = time.perf_counter()
    data = table.scan(snapshot_id=snapshot_id).to_arrow()
    return time.perf_counter() - started, _summary(data)


def _name(batch_keys: int, format_version: int, suffix: str = "") -> str:
    return f"bench.customers_{batch_keys}{'' if format_version == 2 else f'_v{format_version}'}{suffix}"


def run_size(catalog, rows: int, files: int, batches: int, batch_keys: int, runs: int,
             format_version: int = 2) -> dict:
    """One table: built, its last snapshot compacted, both read `runs` times by DuckDB and pyiceberg."""
    from router.catalog import load_table
    from router.cli.summary import metadata_path
    from router.config import MaintenanceConfig
    from router.maintenance import compact, plan_compaction

    name = _name(batch_keys, format_version)
    started = time.perf_counter()
    truth, timings = build(catalog, name, rows, files, batches, batch_keys, format_version=format_version)
    build_s = time.perf_counter() - started
    table = load_table(catalog, name, refresh=True)
    before_id, before_file = table.metadata.current_snapshot_id, metadata_path(table)
    target = MaintenanceConfig().target_file_size_bytes
    t0 = time.perf_counter()
    groups = plan_compaction(table, target)
    compaction = compact(table, groups, target)
    compact_s = time.perf_counter() - t0
    table = load_table(catalog, name, refresh=True)
    after_id, after_file = table.metadata.current_snapshot_id, metadata_path(table)
    if after_id == before_id:
        raise SystemExit("compaction planned nothing: no compacted table to compare with")
    expected = truth.summary()
    reads: dict[str, list[float]] = {k: [] for k in ("duckdb_batches", "duckdb_compacted",
                                                     "pyiceberg_batches", "pyiceberg_compacted")}
    for r in range(runs):  # alternating, so load on the machine hits both alike
        for kind, read in (("duckdb_batches", lambda: read_duckdb(before_file, table.io.properties)),
                           ("duckdb_compacted", lambda: read_duckdb(after_file, table.io.properties)),
                           ("pyiceberg_batches", lambda: read_pyiceberg(table, before_id)),
                           ("pyiceberg_compacted", lambda: read_pyiceberg(table, after_id))):
            seconds, found = read()
            if found != expected:
                raise SystemExit(f"{name} {kind}: read (rows, distinct ids, sum id, sum qty) {found}, "
                                 f"expected {expected}")
            reads[kind].append(round(seconds, 4))
            print(f"{name} run {r}: {kind} {seconds:.3f} s", file=sys.stderr)
    median = {k: round(statistics.median(v), 4) for k, v in reads.items()}
    duck_ratio = round(median["duckdb_batches"] / median["duckdb_compacted"], 2)
    commits = [b["commit_ms"] for b in timings["batches"]]
    after = state(table, before_id)
    return {
        "batch_keys": batch_keys, "build_seconds": round(build_s, 1), "load_seconds": timings["load_s"],
        "batch_commit_ms": {"median": round(statistics.median(commits), 1), "max": max(commits),
                            "first10_median": round(statistics.median(commits[:10]), 1),
                            "last10_median": round(statistics.median(commits[-10:]), 1)},
        "batch_write_ms_median": round(statistics.median(b["write_ms"] for b in timings["batches"]), 1),
        "after_batches": after,
        "dead_row_share": round(after["position_deletes"] / after["rows_in_data_files"], 3),
        "compaction": {"seconds": round(compact_s, 2), "groups": len(groups), "files_removed": compaction.files_removed,
                       "files_added": compaction.files_added, "rows_deleted": compaction.rows_deleted,
                       "delete_files_removed": len(compaction.removed_delete_files)},
        "compacted": state(table, after_id),
        "live_rows": expected[0],
        "read_seconds_median": median, "read_seconds_runs": reads,
        "duckdb_ratio": duck_ratio, "duckdb_within_target": duck_ratio <= TARGET_RATIO,
        "pyiceberg_ratio": round(median["pyiceberg_batches"] / median["pyiceberg_compacted"], 2),
        "check": {"every_read_matched_the_truth": True, "expected_rows_ids_sum_id_sum_qty": list(expected)},
        "compacted_metadata": after_file,  # for the maintained table's reads (taken out of the report)
    }


def run_maintained(catalog, rows: int, files: int, batches: int, batch_keys: int, read_every: int,
                   reads: int, compacted: tuple[str, tuple], format_version: int = 2) -> dict:
    """The same batches (same seed) into a table the job's scheduler maintains: after each commit,
    `MaintenanceScheduler.maybe_run` with the default `maintenance` settings (due once
    `compact_after_files` data and delete files were committed; the job runs it on its background
    thread, here it runs in line). DuckDB reads the current snapshot every `read_every` batches
    (median of `reads`); each read is checked against the truth at that batch and set against
    `compacted` (the metadata file of the compacted table after all batches, which holds at least as many
    live rows, and what its read must find), read alternately with it so that load on the machine hits
    both alike."""
    from router.catalog import load_table
    from router.cli.summary import metadata_path
    from router.config import MaintenanceConfig
    from router.maintenance import MaintenanceScheduler

    name = _name(batch_keys, format_version, "_maintained")
    settings = MaintenanceConfig()
    config = SimpleNamespace(catalog=catalog, maintenance=settings)  # all of RouterConfig the scheduler reads
    scheduler = MaintenanceScheduler(config, interval_seconds=0, after_files=settings.compact_after_files)
    # the job spreads each table's threshold by a hash of its name; here every table (v2 and v3 alike)
    # compacts after the same batches, at `compact_after_files` itself
    scheduler.files_threshold = lambda _name: settings.compact_after_files
    checkpoints: list[dict] = []
    runs: list[dict] = []

    def after_batch(b: int, outcome, truth: Truth) -> None:
        for report in scheduler.maybe_run([name], {name: outcome.files + outcome.delete_files}):
            if report.error:
                raise SystemExit(f"{name}: scheduled maintenance failed: {report.error}")
            runs.append({"after_batch": b, "files": [report.files_before, report.files_after],
                         "delete_files": [report.delete_files_before, report.delete_files_after],
                         "seconds": round(report.seconds, 2)})
        if b % read_every:
            return
        table = load_table(catalog, name, refresh=True)
        times, baseline = [], []
        for _ in range(reads):
            seconds, found = read_duckdb(metadata_path(table), table.io.properties)
            if found != truth.summary():
                raise SystemExit(f"{name} batch {b}: DuckDB read {found}, expected {truth.summary()}")
            times.append(seconds)
            seconds, found = read_duckdb(compacted[0], table.io.properties)
            if found != compacted[1]:
                raise SystemExit(f"{name} batch {b}: DuckDB read the compacted table as {found}")
            baseline.append(seconds)
        seconds, base = statistics.median(times), statistics.median(baseline)
        st = state(table, table.metadata.current_snapshot_id)
        checkpoints.append({"batch": b, "duckdb_seconds": round(seconds, 4), "compacted_seconds": round(base, 4),
                            "ratio": round(seconds / base, 2),
                            "data_files": st["data_files"], "delete_files": st["delete_files"]})

    build(catalog, name, rows, files, batches, batch_keys, after_batch, format_version)
    worst = max(checkpoints, key=lambda c: c["ratio"])
    return {"compact_after_files": settings.compact_after_files, "maintenance_runs": runs,
            "checkpoints": checkpoints, "worst_ratio": worst["ratio"], "worst_at_batch": worst["batch"],
            "last_ratio": checkpoints[-1]["ratio"], "within_target": worst["ratio"] <= TARGET_RATIO}


def _summaries(results: dict) -> dict:
    maintained = {k: r["maintained"] for k, r in results.items() if "maintained" in r}
    return {"duckdb_ratio": {k: r["duckdb_ratio"] for k, r in results.items()},
            "pyiceberg_ratio": {k: r["pyiceberg_ratio"] for k, r in results.items()},
            "duckdb_ratio_maintained_worst": {k: m["worst_ratio"] for k, m in maintained.items()},
            "duckdb_ratio_maintained_last": {k: m["last_ratio"] for k, m in maintained.items()}}


def run(rows: int, files: int, batches: int, sizes: list[int], runs: int, read_every: int,
        versions: list[int]) -> dict:
    """Every size for every format version, versions interleaved per size (same seeded batches)."""
    load_before = [round(x, 2) for x in os.getloadavg()]
    work = Path(tempfile.mkdtemp(prefix="bench_upsert_read_"))
    started = time.perf_counter()
    results: dict[int, dict] = {v: {} for v in versions}
    try:
        catalog = bench_catalog(work, name="bench_upsert_read")
        for size in sizes:
            for v in versions:
                results[v][str(size)] = run_size(catalog, rows, files, batches, size, runs, v)
        for size in sizes:
            for v in versions:
                result = results[v][str(size)]
                expected = tuple(result["check"]["expected_rows_ids_sum_id_sum_qty"])
                compacted = (result.pop("compacted_metadata"), expected)
                if read_every:
                    result["maintained"] = run_maintained(catalog, rows, files, batches, size, read_every, runs,
                                                          compacted, v)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report = {
        "benchmark": "upsert_read", "rows": rows, "initial_files": files, "batches": batches, "mix": MIX,
        "python": platform.python_version(), "cpus": os.cpu_count(),
        "versions": {m: __import__(m).__version__ for m in ("pyiceberg", "pyarrow", "duckdb")},
        "format_versions": versions, "duckdb_target_ratio": TARGET_RATIO,
    }
    first, *others = versions
    report.update(_summaries(results[first]))  # format v2 (position-delete files) unless told otherwise
    report["results"] = results[first]
    for v in others:  # v3: deletion vectors; the maintained table's last read against the compacted one <= 1.1
        report[f"v{v}"] = {**_summaries(results[v]), "maintained_last_target": V3_TARGET_RATIO,
                           "results": results[v]}
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["load_before"], report["load_after"] = load_before, [round(x, 2) for x in os.getloadavg()]
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000, help="rows loaded before the change batches")
    ap.add_argument("--files", type=int, default=20, help="commits (and files) the initial rows arrive in")
    ap.add_argument("--batches", type=int, default=100)
    ap.add_argument("--batch-keys", type=int, nargs="+", default=[2_000, 10_000],
                    help="keys changed per batch (70/20/10); one table per size")
    ap.add_argument("--runs", type=int, default=3, help="reads of each snapshot by each reader")
    ap.add_argument("--read-every", type=int, default=10,
                    help="maintained table: a DuckDB read every N batches (0: no maintained table)")
    ap.add_argument("--format-versions", type=int, nargs="+", default=[2, 3], choices=(2, 3),
                    help="one table per size per format version, the first one reported at the top level")
    ap.add_argument("--json", dest="json_file", default=str(ROOT / "benchmarks" / "upsert_read.json"))
    args = ap.parse_args(argv)
    return emit(run(args.rows, args.files, args.batches, args.batch_keys, args.runs, args.read_every,
                    args.format_versions), args.json_file)


if __name__ == "__main__":
    sys.exit(main())
