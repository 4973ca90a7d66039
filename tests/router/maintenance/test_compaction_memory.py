"""Compaction streams: the memory a rewrite takes is bounded by a batch read and its row-group buffer.

A SQLite-catalog table gets many appends of random hex rows, or a few appends
of big files that compress well (many row groups each, as compaction's own
output); one process reads the whole table (what a rewrite that loads its
group at once needs), another compacts it. Each reports pyarrow's peak pool
allocation; both run in fresh processes so neither sees the other's peak.
The compacted table is read back by pyiceberg and DuckDB.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog

from router.maintenance import compact, plan_compaction
from tests.duckdb_reader import read_iceberg_rows

REPO = Path(__file__).resolve().parents[3]
FILES, ROWS_PER_FILE, VALUE_BYTES = 96, 2_000, 1_000  # ~2 MB per file in memory (~1 MB on disk), ~192 MB in all
MiB = 1 << 20

PEAK = """
import json, sys
import pyarrow as pa
from pyiceberg.catalog.sql import SqlCatalog
catalog = SqlCatalog("t", uri=sys.argv[1], warehouse=sys.argv[2])
table = catalog.load_table(sys.argv[4])
before = pa.default_memory_pool().max_memory()
if sys.argv[3] == "read-all":
    rows = table.scan().to_arrow().num_rows
else:
    from router.maintenance import compact, plan_compaction
    groups = plan_compaction(table, 1 << 30)
    assert len(groups) == 1 and len(groups[0].files) == int(sys.argv[5]), groups
    rows = compact(table, groups, 1 << 30, buffer_bytes=4 << 20).rows
print(json.dumps({"rows": rows, "peak": pa.default_memory_pool().max_memory() - before}))
"""


def _rows(start: int) -> pa.Table:
    ids = range(start, start + ROWS_PER_FILE)
    return pa.table({"id": pa.array(ids, pa.int64()),
                     "blob": pa.array([os.urandom(VALUE_BYTES // 2).hex() for _ in ids], pa.string())})


def _peak(uri: str, warehouse: str, mode: str, table: str = "mem.events", files: int = FILES) -> dict:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", PEAK, uri, warehouse, mode, table, str(files)],
                         capture_output=True, text=True,
                         env=env, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_compaction_memory_is_bounded_by_its_window_not_by_the_group(tmp_path):
    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", f"file://{tmp_path / 'warehouse'}"
    catalog = SqlCatalog("t", uri=uri, warehouse=warehouse)
    catalog.create_namespace("mem")
    table = catalog.create_table("mem.events", schema=_rows(0).schema,
                                 properties={"write.parquet.compression-codec": "zstd"})
    for f in range(FILES):
        table.append(_rows(f * ROWS_PER_FILE))
    total = FILES * ROWS_PER_FILE

    whole = _peak(uri, warehouse, "read-all")
    streamed = _peak(uri, warehouse, "compact")
    assert whole["rows"] == streamed["rows"] == total
    assert whole["peak"] > 160 * MiB  # the group held at once
    # measured: 26-36 MB for 12, 48 and 96 files alike (4 MiB windows and buffer, plus the copies a
    # row group takes on its way to Parquet; the upper end with both cores busy); reading the group
    # at once grows with it (34 -> 103 -> 196 MB)
    assert streamed["peak"] < whole["peak"] / 4, (streamed, whole)

    table = catalog.load_table("mem.events")
    assert len(list(table.scan().plan_files())) == 1
    ids = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(total))
    assert [r["id"] for r in read_iceberg_rows(table, order_by="id")] == list(range(total))
    assert plan_compaction(table, 1 << 30) == [] and compact(table, []).files_added == 0


def test_a_big_file_is_streamed_a_batch_at_a_time_not_read_whole(tmp_path):
    """Two files of ~100 MB of Arrow each that compress ~30x (5 MiB on disk, in row groups of 16,384
    rows): within any read window, so a reader of whole files (pyiceberg's ArrowScan, which compaction
    used) holds both at once; the driver compacting the fan-in table's 97 MiB files held 2.6 GB so."""
    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", f"file://{tmp_path / 'warehouse'}"
    catalog = SqlCatalog("t", uri=uri, warehouse=warehouse)
    catalog.create_namespace("mem")
    pool = [os.urandom(100).hex() for _ in range(64)]
    per_file = 500_000

    def big(start: int) -> pa.Table:
        return pa.table({"id": pa.array(range(start, start + per_file), pa.int64()),
                         "blob": pa.array([pool[i % 64] for i in range(start, start + per_file)], pa.string())})

    table = catalog.create_table("mem.big", schema=big(0).schema,
                                 properties={"write.parquet.compression-codec": "zstd",
                                             "write.parquet.row-group-limit": "16384"})
    for f in range(2):
        table.append(big(f * per_file))
    files = [t.file for t in table.scan().plan_files()]
    assert len(files) == 2 and all(f.file_size_in_bytes < 16 * MiB for f in files)

    whole = _peak(uri, warehouse, "read-all", "mem.big", 2)
    streamed = _peak(uri, warehouse, "compact", "mem.big", 2)
    assert whole["rows"] == streamed["rows"] == 2 * per_file
    assert whole["peak"] > 150 * MiB
    assert streamed["peak"] < whole["peak"] / 4, (streamed, whole)
    table = catalog.load_table("mem.big")
    assert len(list(table.scan().plan_files())) == 1
    # every row once; the two inputs (of one size) are rewritten in either order
    assert sorted(table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()) == list(range(2 * per_file))
    duck = read_iceberg_rows(table, order_by="id")
    assert len(duck) == 2 * per_file and duck[-1]["blob"] == pool[(2 * per_file - 1) % 64]


def test_an_orc_data_file_from_another_writer_is_compacted_with_the_parquet_ones(tmp_path):
    """Compaction reads Parquet itself and leaves other formats to pyiceberg's reader: an ORC file
    (no field ids, read through the table's name mapping) and two Parquet appends end as one file."""
    import pyarrow.orc as orc
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.table.name_mapping import create_mapping_from_schema
    from pyiceberg.typedef import Record

    uri, warehouse = f"sqlite:///{tmp_path / 'catalog.db'}", f"file://{tmp_path / 'warehouse'}"
    catalog = SqlCatalog("t", uri=uri, warehouse=warehouse)
    catalog.create_namespace("mem")
    table = catalog.create_table("mem.mixed", schema=_rows(0).schema)
    with table.transaction() as tx:
        tx.set_properties({"schema.name-mapping.default": create_mapping_from_schema(table.schema()).model_dump_json()})
    table.append(_rows(0))
    orc_path = tmp_path / "from-another-writer.orc"
    orc.write_table(_rows(ROWS_PER_FILE), str(orc_path))
    orc_file = DataFile.from_args(content=DataFileContent.DATA, file_path=f"file://{orc_path}", file_format=FileFormat.ORC,
                                  partition=Record(), record_count=ROWS_PER_FILE,
                                  file_size_in_bytes=orc_path.stat().st_size)
    orc_file.spec_id = table.spec().spec_id
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as append:
            append.append_data_file(orc_file)
    table.append(_rows(2 * ROWS_PER_FILE))
    table = catalog.load_table("mem.mixed")
    groups = plan_compaction(table, 1 << 30)
    assert len(groups) == 1 and {f.file_format for f in groups[0].files} == {FileFormat.ORC, FileFormat.PARQUET}

    assert compact(table, groups, 1 << 30).rows == 3 * ROWS_PER_FILE

    table = catalog.load_table("mem.mixed")
    files = [t.file for t in table.scan().plan_files()]
    assert len(files) == 1 and files[0].file_format == FileFormat.PARQUET
    ids = table.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(3 * ROWS_PER_FILE))
    assert [r["id"] for r in read_iceberg_rows(table, order_by="id")] == list(range(3 * ROWS_PER_FILE))
