"""The memory of one inline small-file merge (router/catalog/merge_small.py), on a real SQLite
catalog: pure catalog work, no Spark.

    python scripts/bench_merge_memory.py [--files 24] [--file-kib 1250] [--reps 5] [--json FILE]

Identical tables (seeded data) each get `--files` one-file commits of about `--file-kib` KiB on disk
(a random hex key, a low-cardinality string, a sentence of vocabulary words, numbers: data that
compresses as event payloads do, not to nothing), merging off. Then each table gets one batch
committed by `commit_table` with merging at 16, in a fresh process per merge so that peaks do not
mix, by one of three paths in turn:

- old: the sources read whole (`pq.ParquetFile(...).read()` each, concatenated, combined,
  projected: the reader merge_small used before, carried here as `_old_write`) and written by
  `write_data_files`;
- new: the product's `_write_merged` (a batch at a time into a RollingWriter, the pool's freed
  pages released after the merge);
- new_no_release: the same without the release.

Per run: pyarrow's pool peak; the process's peak RSS over the commit (VmHWM, reset just before it:
ru_maxrss is no use here, a child's starts at its parent's RSS at exec) and how far it rose over
the RSS before the commit; the RSS right after the merge (after the product's release for `new`),
after the commit, and after an explicit release_unused; the merge's wall and CPU seconds (the
merged file written) and the whole commit's. Medians per path; ratios old / new.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from scripts.perf.report import emit

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "mem"
JOB = "bench-merge-memory"
MERGE_AT = 16
MODES = ("old", "new", "new_no_release")
MiB = 1 << 20

CHILD = r'''
import json, resource, sys, time
import pyarrow as pa
import pyarrow.parquet as pq

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize()


def hwm():
    """The process's peak RSS (VmHWM): ru_maxrss would also count the parent's RSS at exec."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))


def reset_hwm():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

from router.catalog import load_table
from router.catalog import merge_small
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from pyiceberg.io.pyarrow import _to_requested_schema, pyarrow_to_schema


def _old_read(table, files):
    """merge_small._read before the merge streamed (verbatim)."""
    schema, metadata = table.schema(), table.metadata
    by_schema = {}
    for f in files:
        with table.io.new_input(f.file_path).open() as stream:
            data = pq.ParquetFile(stream).read(use_threads=False)
        by_schema.setdefault(data.schema, []).append(data)
    out = []
    for file_arrow, tables in by_schema.items():
        file_schema = pyarrow_to_schema(file_arrow, metadata.name_mapping(), downcast_ns_timestamp_to_us=True,
                                        format_version=metadata.format_version)
        for batch in pa.concat_tables(tables).combine_chunks().to_batches():
            out.append(_to_requested_schema(schema, file_schema, batch, downcast_ns_timestamp_to_us=True))
    return pa.Table.from_batches(out) if len(out) else schema.as_arrow().empty_table()


def _old_write(table, files):
    return write_data_files(table, _old_read(table, files))


uri, warehouse, table_id, mode = sys.argv[1:5]
config = CatalogConfig("bench", {"type": "sql", "uri": uri, "warehouse": warehouse})
table = load_table(config, table_id)
batch = pq.read_table(sys.argv[5])  # the batch's rows, written by the parent
result = TableResult(table_id, data_files=write_data_files(table, batch), rows=batch.num_rows,
                     offsets={"t/0": [0, batch.num_rows - 1]})
pool = pa.default_memory_pool()
pool.release_unused()
measured = {}
write = _old_write if mode == "old" else merge_small._write_merged
release = merge_small._release_memory


def timed_release():
    started = time.perf_counter()
    release()
    measured["release_s"] = time.perf_counter() - started


merge_small._release_memory = (lambda: None) if mode == "new_no_release" else timed_release


def timed(table, files):
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        return write(table, files)
    finally:
        measured["merge_wall_s"] = time.perf_counter() - wall
        measured["merge_cpu_s"] = time.process_time() - cpu
        measured["rss_right_after_merge_mib"] = rss() / 2 ** 20


merge_small._write_merged = timed
startup_peak = hwm()
reset_hwm()  # the peak from here on is the commit's
before = {"pool_peak": pool.max_memory(), "rss": rss()}
outcome = commit_table(config, result, "bench-merge-memory", 0,
                       maintenance=MaintenanceConfig(merge_small_files_at=16, expire_every_commits=10 ** 6))
after_commit = rss()
assert outcome.status == "committed", outcome.error
peak_rss = hwm()
pool.release_unused()
merged = [t.file for t in load_table(config, table_id, refresh=True).scan().plan_files()]
print(json.dumps({
    "mode": mode, "merged_files": outcome.merged, "files_after": len(merged),
    "merged_file_bytes": max(f.file_size_in_bytes for f in merged),
    "rows": sum(f.record_count for f in merged),
    "pool_peak_before_mib": before["pool_peak"] / 2 ** 20, "pool_peak_mib": pool.max_memory() / 2 ** 20,
    "rss_before_mib": before["rss"] / 2 ** 20, "peak_rss_startup_mib": startup_peak / 2 ** 20,
    "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "peak_rss_mib": peak_rss / 2 ** 20, "peak_rss_growth_mib": (peak_rss - before["rss"]) / 2 ** 20,
    "rss_after_commit_mib": after_commit / 2 ** 20, "rss_after_release_mib": rss() / 2 ** 20,
    "commit_wall_s": outcome.seconds, "commit_cpu_s": outcome.process_cpu_seconds, **measured}))
'''


def _data(file_index: int, rows: int):
    """One file's rows, the same for every table (seeded)."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng(1000 + file_index)
    words = np.array([f"w{n:x}{'abcdefgh'[n % 8] * (n % 7)}" for n in range(4096)])
    picks = words[rng.integers(0, len(words), size=(rows, 14))]
    sentences = [" ".join(row) for row in picks]
    keys = [f"{a:016x}{b:016x}" for a, b in rng.integers(0, 2 ** 63, size=(rows, 2)).tolist()]
    first = file_index * rows
    return pa.table({
        "id": pa.array(np.arange(first, first + rows), pa.int64()),
        "ts": pa.array(1_700_000_000_000_000 + rng.integers(0, 86_400_000_000, size=rows), pa.timestamp("us")),
        "key": pa.array(keys, pa.string()),
        "category": pa.array(rng.choice(["alpha", "beta", "gamma", "delta", "epsilon"], size=rows), pa.string()),
        "payload": pa.array(sentences, pa.string()),
        "amount": pa.array(rng.normal(100, 30, size=rows), pa.float64()),
        "qty": pa.array(rng.integers(0, 1000, size=rows), pa.int32()),
    })


def _fill(config, table_id: str, datasets, write=None, job: str = JOB) -> int:
    """`datasets` committed one file each, merging off; bytes on disk of the table's files.
    `write(table, data)` gives the data files (default: `write_data_files`, as a task writes)."""
    from router.catalog import create_table, load_table
    from router.catalog.commit import commit_table
    from router.catalog.datafiles import write_data_files
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    from pyiceberg.schema import Schema
    from pyiceberg.types import DoubleType, IntegerType, LongType, NestedField, StringType, TimestampType

    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "ts", TimestampType()),
                    NestedField(3, "key", StringType()), NestedField(4, "category", StringType()),
                    NestedField(5, "payload", StringType()), NestedField(6, "amount", DoubleType()),
                    NestedField(7, "qty", IntegerType()))
    create_table(config, table_id, schema)
    write = write or write_data_files
    off = MaintenanceConfig(merge_small_files_at=0)
    offset = 10 ** 9
    for n, data in enumerate(datasets):
        table = load_table(config, table_id, refresh=True)
        result = TableResult(table_id, data_files=write(table, data), rows=data.num_rows,
                             offsets={"f/0": [offset + n * data.num_rows, offset + (n + 1) * data.num_rows - 1]})
        outcome = commit_table(config, result, job, n, maintenance=off)
        if outcome.status != "committed":
            raise SystemExit(f"{table_id}: {outcome.error}")
    return sum(t.file.file_size_in_bytes for t in load_table(config, table_id, refresh=True).scan().plan_files())


def _run_child(code: str, args: list[str], what: str, timeout: float = 600) -> dict:
    """Run `code` in a fresh Python process (so that its memory peaks are its own); its last line of output as JSON."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, cwd=REPO,
                         timeout=timeout)
    if out.returncode != 0:
        raise SystemExit(f"{what} failed: {out.stderr.strip().splitlines()[-1:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _child(uri: str, warehouse: str, table_id: str, mode: str, batch_file: Path) -> dict:
    return _run_child(CHILD, [uri, warehouse, table_id, mode, str(batch_file)], f"{mode} merge")


def _median(runs: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in runs), 3)


def run(files: int, file_kib: int, reps: int) -> dict:
    import pyarrow.parquet as pq

    from scripts.perf.config import bench_catalog

    root = Path(tempfile.mkdtemp(prefix="bench-merge-memory-"))
    config = bench_catalog(root)
    props = config.properties
    # rows per file for about `file_kib` on disk: a probe table's one file
    probe_rows = 4000
    probe = _fill(config, f"{NAMESPACE}.probe", [_data(0, probe_rows)])
    rows = max(100, int(probe_rows * file_kib * 1024 / probe))
    datasets = [_data(i, rows) for i in range(files)]
    batch_file = root / "batch.parquet"
    pq.write_table(_data(files, 100), batch_file)
    order = [MODES[(i + rep) % len(MODES)] for rep in range(reps) for i in range(len(MODES))]
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    on_disk = 0
    for n, mode in enumerate(order):
        table_id = f"{NAMESPACE}.t{n}"
        on_disk = _fill(config, table_id, datasets)
        got = _child(props["uri"], props["warehouse"], table_id, mode, batch_file)
        if got["merged_files"] != files or got["rows"] != files * rows + 100:
            raise SystemExit(f"{mode}: merged {got['merged_files']} files, {got['rows']} rows: not the whole table")
        runs[mode].append(got)
    keys = ("pool_peak_mib", "peak_rss_mib", "peak_rss_growth_mib", "rss_before_mib", "rss_right_after_merge_mib",
            "rss_after_commit_mib", "rss_after_release_mib", "merge_wall_s", "merge_cpu_s", "commit_wall_s",
            "commit_cpu_s", "merged_file_bytes")
    medians = {m: {k: _median(runs[m], k) for k in keys} for m in MODES}
    old, new = medians["old"], medians["new"]
    in_memory = sum(d.nbytes for d in datasets)
    return {
        "benchmark": "merge_memory", "files": files, "rows_per_file": rows,
        "source_bytes_on_disk_mib": round(on_disk / MiB, 2), "source_arrow_bytes_mib": round(in_memory / MiB, 2),
        "merge_small_files_at": MERGE_AT, "reps": reps, "median": medians,
        "ratio_old_new": {k: round(old[k] / new[k], 3) for k in
                          ("pool_peak_mib", "peak_rss_growth_mib", "peak_rss_mib", "merge_wall_s", "merge_cpu_s",
                           "commit_wall_s")},
        # what the process keeps of the merge once it is written: the product releases the pool's freed pages
        "rss_held_after_merge_mib": {m: round(statistics.median(r["rss_right_after_merge_mib"] - r["rss_before_mib"]
                                                                for r in runs[m]), 1) for m in MODES},
        "release_ms": _median([{"ms": r["release_s"] * 1000} for r in runs["new"]], "ms"),
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=24, help="source files merged")
    parser.add_argument("--file-kib", type=int, default=1250, help="about this many KiB on disk per source file")
    parser.add_argument("--reps", type=int, default=5, help="merges per path")
    parser.add_argument("--json", dest="json_file")
    args = parser.parse_args(argv)
    return emit(run(args.files, args.file_kib, args.reps), args.json_file)
