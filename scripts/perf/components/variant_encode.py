"""Variant encoding throughput: JSON values -> Variant columns, one core, on the JSON decode benchmark's records.

The records are scripts/perf/components/json_decode.py's (12 fields, a nested address, a tags array).
Measured, best of ``--rounds`` on the shared machine:

* encode alone: parsed values -> one variant column (registry.variant_encode.variant_array);
* ``variant: true``: ``decode_unframed`` of the batch into one variant column (parse + encode + Arrow);
* ``variant: [address, tags]``: those fields as variants beside the inferred rest;
* inferred json: the same batch with every column inferred (the route without variant), for the ratio.

    python scripts/bench_variant.py --records 100000 --output benchmarks/variant_encode.json
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import random
import time

import orjson
import pyarrow as pa

from registry.formats import ValueFormat
from registry.unframed import decode_unframed
from registry.variant_encode import variant_array
from scripts.perf.components.decode import make_record
from scripts.perf.components.json_decode import as_json


def _timed(fn, rounds: int) -> float:
    best = 0.0
    for _ in range(rounds):
        t0 = time.perf_counter()
        rows = fn()
        best = max(best, rows / (time.perf_counter() - t0))
    return best


def _rows(fmt: ValueFormat, arr: pa.Array) -> int:
    result = decode_unframed(None, fmt, arr)
    assert not result.failures, result.failures[:1]
    return sum(g.batch.num_rows for g in result.groups)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--output", default=None, help="write the results as JSON here")
    args = ap.parse_args(argv)
    rng = random.Random(42)
    distinct = [as_json(make_record(rng, i)) for i in range(min(args.records, 20_000))]
    values = [distinct[i % len(distinct)] for i in range(args.records)]
    arr = pa.array(values, pa.binary())
    parsed = [orjson.loads(v) for v in values]
    rates = {
        "encode alone (parsed values -> variant column)": _timed(lambda: len(variant_array(parsed)), args.rounds),
        "variant: true (parse + encode + Arrow)": _timed(
            lambda: _rows(ValueFormat("json", variant_column="value"), arr), args.rounds),
        "variant: [address, tags] beside inferred columns": _timed(
            lambda: _rows(ValueFormat("json", variant=("address", "tags")), arr), args.rounds),
        "inferred json, no variant (for the ratio)": _timed(lambda: _rows(ValueFormat("json"), arr), args.rounds),
    }
    size = sum(len(v) for v in distinct[:1000]) / min(1000, len(distinct))
    print(f"records: {args.records:,}  avg JSON size: {size:.0f} bytes  (best of {args.rounds}, one core)")
    for name, rate in rates.items():
        print(f"  {name:<50} {rate:>10,.0f} rec/s")
    if args.output:
        doc = {"benchmark": "variant_encode", "command": f"python scripts/bench_variant.py --records {args.records} "
                                                        f"--rounds {args.rounds}",
               "date": dt.date.today().isoformat(), "machine": {"cpus": 2, "python": platform.python_version()},
               "records": args.records, "avg_json_bytes": round(size),
               "records_per_s": {k: round(v) for k, v in rates.items()}}
        with open(args.output, "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")
    return 0
