"""Data-file writer cost per file: pyiceberg's `_dataframe_to_data_files` vs router.catalog.datafiles.

In one process, on a SQLite catalog in a temporary directory: N tables (default
200) with a 12-column schema (struct, list, decimal, timestamps, binary, nulls),
R rows per table per write (default 2,000 and 20,000; also a day(ts)-partitioned
run at the smallest R, three files per write). Each pass reloads every table
after a commit of a table property (new metadata, as the job's offsets commit)
and writes the same rows with both writers, alternating which goes first.
Pass 1 is the first write to each table (our per-table plan is built then); passes 2.. are the steady state of a
long-running worker. Reported: ms per file (median, p95), the ratio, peak RSS,
and our top costs per file from cProfile.

    flock /tmp/icerouter-heavy.lock python scripts/bench_writer.py [--tables 200] [--rows 2000 20000]
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import json
import os
import pstats
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.io.pyarrow import _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.transforms import DayTransform
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, IntegerType, ListType, LongType, NestedField,
    StringType, StructType, TimestampType, TimestamptzType,
)

from router.catalog import DEFAULT_TABLE_PROPERTIES
from router.catalog.datafiles import write_data_files
from scripts import REPO
from scripts.perf.report import write_json

# every kind of column the writer converts: struct, list, decimal, both timestamps, date, binary, nulls
SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=False),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "amount", DecimalType(12, 2), required=False),
    NestedField(4, "qty", IntegerType(), required=False),
    NestedField(5, "price", DoubleType(), required=False),
    NestedField(6, "ts", TimestamptzType(), required=False),
    NestedField(7, "local_ts", TimestampType(), required=False),
    NestedField(8, "day", DateType(), required=False),
    NestedField(9, "flag", BooleanType(), required=False),
    NestedField(10, "payload", BinaryType(), required=False),
    NestedField(11, "addr", StructType(NestedField(13, "city", StringType(), required=False),
                                       NestedField(14, "zip", IntegerType(), required=False)), required=False),
    NestedField(12, "tags", ListType(15, StringType(), element_required=False), required=False),
)
SPECS = {"unpartitioned": PartitionSpec(), "day": PartitionSpec(PartitionField(6, 1000, DayTransform(), "ts_day"))}


def make_rows(rows: int, seed: int) -> pa.Table:
    """Vectorised rows of SCHEMA: ~10% nulls, three days of timestamps."""
    rng = np.random.default_rng(seed)
    schema = schema_to_pyarrow(SCHEMA, include_field_ids=False)
    ids = np.arange(rows, dtype=np.int64) + seed * 10_000_000
    micros = int(dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc).timestamp() * 1e6)
    ts = pa.array(micros + rng.integers(0, 3 * 86_400_000_000, rows), pa.timestamp("us", "UTC"))
    nulls = lambda: rng.random(rows) < 0.1  # noqa: E731
    names = pc.binary_join_element_wise("name-", pa.array(ids % 97).cast(pa.string()), "")
    addr = pa.StructArray.from_arrays(
        [pc.binary_join_element_wise("city-", pa.array(ids % 13).cast(pa.string()), "").cast(pa.large_string()),
         pa.array((ids % 1000).astype(np.int32))],
        fields=list(schema.field("addr").type), mask=pa.array(nulls()))
    offsets = pa.array(np.concatenate([[0], np.cumsum(ids % 3)]).astype(np.int64))
    tags = pa.LargeListArray.from_arrays(
        offsets, pc.binary_join_element_wise("t", pa.array(np.arange(offsets[-1].as_py()) % 5).cast(pa.string()), "")
        .cast(pa.large_string()))
    return pa.table({
        "id": pa.array(ids),
        "name": names.cast(pa.large_string()),
        "amount": pa.array(rng.integers(-10**8, 10**8, rows) / 100).cast(pa.decimal128(12, 2)),
        "qty": pa.array(rng.integers(0, 100, rows).astype(np.int32), mask=nulls()),
        "price": pa.array(rng.random(rows) * 100, mask=nulls()),
        "ts": ts,
        "local_ts": ts.cast(pa.timestamp("us")),
        "day": ts.cast(pa.timestamp("us")).cast(pa.date32()),
        "flag": pa.array(rng.random(rows) < 0.5, mask=nulls()),
        "payload": pa.array([b"x" * (i % 7) for i in range(rows)], pa.large_binary()),
        "addr": addr.cast(schema.field("addr").type),
        "tags": tags.cast(schema.field("tags").type),
    }, schema=schema)


def baseline(table, data):
    return list(_dataframe_to_data_files(table.metadata, data, table.io))


def ours(table, data):
    return write_data_files(table, data)


WRITERS = {"pyiceberg": baseline, "lean": ours}


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def drop_data(workdir: Path, ns: str, tables: int) -> None:
    """Delete the data files, keep the directories (a live table's data directory exists)."""
    for i in range(tables):
        for root, _, files in os.walk(workdir / "wh" / ns / f"t{i}" / "data"):
            for name in files:
                os.unlink(os.path.join(root, name))


def summary(per_file: list[float]) -> dict:
    s = sorted(per_file)
    return {"median_ms": round(statistics.median(s), 3), "p95_ms": round(s[int(0.95 * (len(s) - 1))], 3),
            "mean_ms": round(statistics.fmean(s), 3), "files": len(s)}


def run(workdir: Path, spec: str, tables: int, rows: int, passes: int, profile_top: int) -> dict:
    catalog = SqlCatalog("bench", uri=f"sqlite:///{workdir}/catalog.db", warehouse=f"file://{workdir}/wh")
    ns = f"w_{spec}_{rows}"
    catalog.create_namespace(ns)
    names = [f"{ns}.t{i}" for i in range(tables)]
    for name in names:
        catalog.create_table(name, SCHEMA, partition_spec=SPECS[spec], properties=DEFAULT_TABLE_PROPERTIES)
    variants = [make_rows(rows, seed) for seed in range(4)]
    times: dict[str, dict[str, list[float]]] = {w: {"first": [], "steady": []} for w in WRITERS}
    rss: dict[str, float] = {}
    for p in range(passes):
        for name in names:  # untimed: a commit between batches, as the job's offsets property
            with catalog.load_table(name).transaction() as tx:
                tx.set_properties({"icerouter.offsets.bench": json.dumps({"batch": p})})
        order = list(WRITERS) if p % 2 == 0 else list(WRITERS)[::-1]
        for writer in order:
            handles = [catalog.load_table(n) for n in names]
            before = rss_mib()
            for i, table in enumerate(handles):
                data = variants[i % len(variants)]
                t0 = time.perf_counter()
                files = WRITERS[writer](table, data)
                elapsed = (time.perf_counter() - t0) * 1e3
                times[writer]["first" if p == 0 else "steady"] += [elapsed / len(files)] * len(files)
            rss[writer] = max(rss.get(writer, 0.0), rss_mib() - before)
            drop_data(workdir, ns, tables)  # untimed: keep the disk small
    result = {"spec": spec, "tables": tables, "rows": rows, "passes": passes,
              "files_per_write": len(files), "input_mib": round(variants[0].nbytes / 2**20, 2)}
    for phase in ("first", "steady"):
        base, lean = summary(times["pyiceberg"][phase]), summary(times["lean"][phase])
        result[phase] = {"pyiceberg": base, "lean": lean,
                         "ratio_median": round(base["median_ms"] / lean["median_ms"], 2)}
    result["rss_growth_mib"] = {w: round(v, 1) for w, v in rss.items()}
    if profile_top:
        handles = [catalog.load_table(n) for n in names]
        prof = cProfile.Profile()
        prof.enable()
        for i, table in enumerate(handles):
            ours(table, variants[i % len(variants)])
        prof.disable()
        drop_data(workdir, ns, tables)
        nfiles = tables * result["files_per_write"]
        stats = pstats.Stats(prof).stats
        top = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:profile_top]
        result["lean_profile_tottime_ms_per_file"] = {
            f"{Path(k[0]).name}:{k[1]}({k[2]})": round(v[2] / nfiles * 1e3, 3) for k, v in top}
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=200)
    ap.add_argument("--rows", type=int, nargs="+", default=[2000, 20000])
    ap.add_argument("--passes", type=int, default=3, help="pass 1 = first write per table, the rest = steady state")
    ap.add_argument("--no-partitioned", action="store_true", help="skip the day(ts)-partitioned run")
    ap.add_argument("--profile-top", type=int, default=12)
    ap.add_argument("--json-file", default=str(REPO / "benchmarks" / "writer.json"))
    args = ap.parse_args(argv)
    runs = [("unpartitioned", r) for r in args.rows]
    if not args.no_partitioned:
        runs.append(("day", min(args.rows)))
    workdir = Path(tempfile.mkdtemp(prefix="bench_writer_"))
    try:
        results = []
        for spec, rows in runs:
            res = run(workdir, spec, args.tables, rows, args.passes, args.profile_top)
            results.append(res)
            s = res["steady"]
            print(f"{spec:13s} rows={rows:6d}: steady ms/file pyiceberg {s['pyiceberg']['median_ms']:.2f} "
                  f"(p95 {s['pyiceberg']['p95_ms']:.2f}) lean {s['lean']['median_ms']:.2f} "
                  f"(p95 {s['lean']['p95_ms']:.2f}) x{s['ratio_median']}; first write lean "
                  f"{res['first']['lean']['median_ms']:.2f} vs {res['first']['pyiceberg']['median_ms']:.2f}",
                  flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    out = {"benchmark": "writer", "host_cpus": os.cpu_count(), "pyarrow": pa.__version__,
           "started_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
           "runs": results}
    Path(args.json_file).parent.mkdir(parents=True, exist_ok=True)
    write_json(out, args.json_file)
    print(f"peak RSS {out['peak_rss_mib']} MiB -> {args.json_file}")
    return 0

