"""The inline merge streams (router/catalog/merge_small.py): the memory one merge takes is bounded by
its batch and row-group buffer, not by the bytes it merges.

A SQLite-catalog table gets many one-file commits whose strings are dictionary-encoded on disk (a
few MB there, ~220 MB as Arrow: the merge's byte budget is on disk). One process reads the files
whole (what the merge did before it streamed), another commits a batch that merges them all. Each
reports pyarrow's peak pool allocation; both run in fresh processes so neither sees the other's
peak. The merged table is read back by pyiceberg and DuckDB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.datafiles import write_data_files
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from tests.router.catalog.test_merge_small import JOB, SCHEMA, check_rows, live_files

REPO = Path(__file__).resolve().parents[3]
FILES, ROWS_PER_FILE, DISTINCT, VALUE_CHARS = 24, 30_000, 1_000, 300  # ~9.5 MB per file as Arrow, ~230 MB in all
BATCH_ROWS = 10
MiB = 1 << 20

PEAK = """
import json, sys
import pyarrow as pa
import pyarrow.parquet as pq
from router.catalog import load_table
from router.config import CatalogConfig
config = CatalogConfig("mem", {"type": "sql", "uri": sys.argv[1], "warehouse": sys.argv[2]})
table = load_table(config, "mem.t")
pool = pa.default_memory_pool()
if sys.argv[3] == "read-whole":
    tables = []
    for task in table.scan().plan_files():
        with table.io.new_input(task.file.file_path).open() as stream:
            tables.append(pq.ParquetFile(stream).read(use_threads=False))
    rows = pa.concat_tables(tables).num_rows
    merged = 0
else:
    from router.catalog.commit import commit_table
    from router.catalog.datafiles import write_data_files
    from router.config import MaintenanceConfig
    from router.descriptors import TableResult
    ids = range(10 ** 9, 10 ** 9 + %d)
    batch = pa.table({"id": pa.array(ids, pa.int64()), "body": pa.array([f"u/0:{i}" for i in ids])})
    result = TableResult("mem.t", data_files=write_data_files(table, batch), rows=batch.num_rows,
                         offsets={"u/0": [0, batch.num_rows - 1]})
    outcome = commit_table(config, result, sys.argv[4], 0, maintenance=MaintenanceConfig(merge_small_files_at=16))
    assert outcome.status == "committed", outcome.error
    rows, merged = None, outcome.merged
print(json.dumps({"rows": rows, "merged": merged, "peak": pool.max_memory()}))
""" % BATCH_ROWS


def _rows(start: int, values: list[str]) -> pa.Table:
    ids = range(start, start + ROWS_PER_FILE)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "body": pa.array([values[(i * 7919) % DISTINCT] for i in ids], pa.string())})


def _peak(config: CatalogConfig, mode: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    props = config.properties
    out = subprocess.run([sys.executable, "-c", PEAK, props["uri"], props["warehouse"], mode, JOB],
                         capture_output=True, text=True, env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_merge_memory_is_bounded_by_its_buffer_not_by_the_sources(tmp_path):
    config = CatalogConfig("mem", {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                   "warehouse": (tmp_path / "wh").as_uri()})
    create_table(config, "mem.t", SCHEMA)
    values = [os.urandom(VALUE_CHARS // 2).hex() for _ in range(DISTINCT)]
    off = MaintenanceConfig(merge_small_files_at=0)
    for f in range(FILES):
        data = _rows(f * ROWS_PER_FILE, values)
        result = TableResult("mem.t", data_files=write_data_files(load_table(config, "mem.t", refresh=True), data),
                             rows=data.num_rows, offsets={"t/0": [f * ROWS_PER_FILE, (f + 1) * ROWS_PER_FILE - 1]})
        assert commit_table(config, result, JOB, f, maintenance=off).status == "committed"
    total = FILES * ROWS_PER_FILE
    on_disk = sum(t.file.file_size_in_bytes for t in live_files(config, "mem.t"))
    assert on_disk < 16 * MiB  # well within one merge's budget: every file is merged

    whole = _peak(config, "read-whole")
    merged = _peak(config, "merge")
    assert whole["rows"] == total and merged["merged"] == FILES
    assert whole["peak"] > 180 * MiB  # the sources held at once
    # the merge holds a batch (~4 MiB), a row group (8 MiB) and the copies one takes on its way to
    # Parquet, whatever the sources' size; reading them whole grows with them
    assert merged["peak"] < whole["peak"] / 4, (merged, whole)

    files = live_files(config, "mem.t")
    assert len(files) == 2  # the merged file and the batch's
    assert sorted(f.file.record_count for f in files) == [BATCH_ROWS, total]
    check_rows(config, "mem.t", list(range(total)) + list(range(10 ** 9, 10 ** 9 + BATCH_ROWS)))
