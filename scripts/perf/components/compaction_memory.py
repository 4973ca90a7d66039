"""The memory of one compaction (router/maintenance/compaction.py) of big files, on a real SQLite
catalog: pure catalog work, no Spark.

    python scripts/bench_compaction_memory.py [--files 4] [--file-mib 24] [--reps 3] [--json FILE]

Identical tables each get `--files` one-file commits of about `--file-mib` MiB on disk, the size of
the fan-in table's files that the job's compaction picks up. Rows are drawn from a pool of 2,000
(the live benchmarks' producers draw payloads from a pool too; event streams repeat their values),
so Parquet holds them about 20x smaller than Arrow does, as in the freshness run's fan-in table
(a 97 MiB file of 5.2 million rows, ~3 GB in Arrow). Each table is then compacted
into one file, in a fresh process per run so that peaks do not mix, by one of two readers in turn:

- windows: the reader compaction used before (pyiceberg's `ArrowScan.to_record_batches` over
  windows of 32 MiB on disk: every file of a window read whole, in pyiceberg's thread pool, before
  its first batch; a file larger than the window is a window of its own), carried here verbatim;
- stream: the product's (`_stream_files`: one file after the other, a batch at a time).

Per run: pyarrow's pool peak, the process's peak RSS over the compaction (VmHWM reset just before)
and its rise, the RSS after it, wall and CPU seconds. Medians per reader; ratios windows / stream.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from scripts.perf.components.merge_memory import _fill, _run_child
from scripts.perf.report import emit

NAMESPACE = "cmem"
JOB = "bench-compaction-memory"
MODES = ("windows", "stream")
MiB = 1 << 20

CHILD = r'''
import json, sys, time
import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan
from pyiceberg.table import FileScanTask

from router.catalog import load_table
from router.catalog.rolling import RollingWriter
from router.config import CatalogConfig
from router.maintenance import compaction, compaction_plan

def rss():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * 4096

def hwm():
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith("VmHWM:"))

def reset_hwm():
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")

WINDOW_BYTES = 32 * 1024 * 1024

def _read_windows(tasks, window_bytes):
    window, size = [], 0
    for task in tasks:
        if window and size + task.file.file_size_in_bytes > window_bytes:
            yield window
            window, size = [], 0
        window.append(task)
        size += task.file.file_size_in_bytes
    if window:
        yield window

def windows_write_group(table, group, target_file_size_bytes, buffer_bytes):
    """compaction._write_group before it streamed (verbatim, less the error handling)."""
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    writer = RollingWriter(table, target_file_size_bytes, buffer_bytes=buffer_bytes)
    deletes = group.deletes or ((),) * len(group.files)
    tasks = [FileScanTask(f, delete_files=set(d)) for f, d in zip(group.files, deletes)]
    for window in _read_windows(tasks, WINDOW_BYTES):
        for batch in scan.to_record_batches(window):
            writer.write(batch)
    writer.close()
    return writer

uri, warehouse, table_id, mode = sys.argv[1:5]
config = CatalogConfig("bench", {"type": "sql", "uri": uri, "warehouse": warehouse})
table = load_table(config, table_id)
groups = compaction_plan.plan_compaction(table, 1 << 30)
assert len(groups) == 1, groups
if mode == "windows":
    compaction._write_group = windows_write_group
pool = pa.default_memory_pool()
pool.release_unused()
before_rss, before_pool = rss(), pool.max_memory()
reset_hwm()
wall, cpu = time.perf_counter(), time.process_time()
result = compaction.compact(table, groups, 1 << 30)
wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
peak = hwm()
print(json.dumps({"mode": mode, "files_removed": result.files_removed, "files_added": result.files_added,
                  "rows": result.rows, "pool_peak_mib": (pool.max_memory()) / 2 ** 20,
                  "pool_peak_before_mib": before_pool / 2 ** 20,
                  "rss_before_mib": before_rss / 2 ** 20, "peak_rss_mib": peak / 2 ** 20,
                  "peak_rss_growth_mib": (peak - before_rss) / 2 ** 20, "rss_after_mib": rss() / 2 ** 20,
                  "wall_s": wall, "cpu_s": cpu}))
'''


def _child(uri: str, warehouse: str, table_id: str, mode: str) -> dict:
    return _run_child(CHILD, [uri, warehouse, table_id, mode], f"{mode} compaction", timeout=900)


def _pooled(file_index: int, rows: int):
    """`rows` rows drawn from a seeded pool of 2,000, with ids of their own."""
    import numpy as np
    import pyarrow as pa

    from scripts.perf.components.merge_memory import _data

    pool = _data(0, 2000)
    picks = np.random.default_rng(file_index).integers(0, pool.num_rows, size=rows)
    data = pool.take(pa.array(picks))
    first = file_index * rows
    return data.set_column(0, "id", pa.array(np.arange(first, first + rows), pa.int64()))


def _rolling(table, data) -> list:
    """One file written as compaction writes its output (row groups of ROW_GROUP_BUFFER_BYTES of Arrow):
    what the next compaction reads back."""
    from router.catalog.rolling import RollingWriter

    writer = RollingWriter(table, 1 << 62)
    for batch in data.to_batches(max_chunksize=65536):
        writer.write(batch)
    return writer.close()


def run(files: int, file_mib: int, reps: int) -> dict:
    from scripts.perf.config import bench_catalog

    root = Path(tempfile.mkdtemp(prefix="bench-compaction-memory-"))
    config = bench_catalog(root)
    props = config.properties
    probe_rows = 200_000
    probe = _fill(config, f"{NAMESPACE}.probe", [_pooled(0, probe_rows)], write=_rolling, job=JOB)
    rows = max(1000, int(probe_rows * file_mib * MiB / probe))
    datasets = [_pooled(i, rows) for i in range(files)]
    in_memory = sum(d.nbytes for d in datasets)
    order = [MODES[(i + rep) % len(MODES)] for rep in range(reps) for i in range(len(MODES))]
    runs: dict[str, list[dict]] = {m: [] for m in MODES}
    on_disk = 0
    for n, mode in enumerate(order):
        table_id = f"{NAMESPACE}.t{n}"
        on_disk = _fill(config, table_id, datasets, write=_rolling, job=JOB)
        got = _child(props["uri"], props["warehouse"], table_id, mode)
        if got["files_removed"] != files or got["rows"] != files * rows:
            raise SystemExit(f"{mode}: compacted {got['files_removed']} files, {got['rows']} rows: not the table")
        print(f"  {mode}: pool peak {got['pool_peak_mib']:.0f} MiB, RSS rise {got['peak_rss_growth_mib']:.0f} MiB, "
              f"{got['wall_s']:.1f} s", flush=True)
        runs[mode].append(got)
    keys = ("pool_peak_mib", "peak_rss_mib", "peak_rss_growth_mib", "rss_after_mib", "wall_s", "cpu_s")
    medians = {m: {k: round(statistics.median(r[k] for r in runs[m]), 3) for k in keys} for m in MODES}
    old, new = medians["windows"], medians["stream"]
    return {"benchmark": "compaction_memory", "files": files, "rows_per_file": rows,
            "source_bytes_on_disk_mib": round(on_disk / MiB, 2), "source_arrow_bytes_mib": round(in_memory / MiB, 2),
            "reps": reps, "median": medians,
            "ratio_windows_stream": {k: round(old[k] / new[k], 3) for k in keys if new[k]},
            "runs": runs}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=4, help="files compacted")
    parser.add_argument("--file-mib", type=int, default=24, help="about this many MiB on disk per file")
    parser.add_argument("--reps", type=int, default=3, help="compactions per reader")
    parser.add_argument("--json", dest="json_file")
    args = parser.parse_args(argv)
    return emit(run(args.files, args.file_mib, args.reps), args.json_file)
