"""Throughput of the change-stream path on one core: extract_changes and last_change_per_key.

    python scripts/bench_changes.py [--changes 1000000] [--keys 200000] [--repeat 3]

Cases: Debezium envelopes keyed by one long column (without and with
``sequence_by source.lsn``, over 2 partitions), and upsert values keyed by
(string, long). Each figure is the best of ``--repeat`` runs, in changes per second.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pyarrow as pa

from router.changes.dedup import last_change_per_key
from router.changes.extract import ChangeSpec, extract_changes


def envelopes(n: int, keys: int, rng: np.random.Generator) -> pa.Table:
    ids = rng.integers(0, keys, n)
    ops = rng.choice(np.array(["c", "u", "u", "u", "d"], dtype=object), n)
    names = pa.array(np.char.add("name-", (ids % 1000).astype(str)), pa.large_string())
    after = pa.StructArray.from_arrays([pa.array(ids), names, pa.array(rng.integers(0, 1 << 30, n))],
                                       names=["id", "name", "v"], mask=pa.array(ops == "d"))
    before = pa.StructArray.from_arrays([pa.array(ids), names, pa.array(rng.integers(0, 1 << 30, n))],
                                        names=["id", "name", "v"], mask=pa.array(ops == "c"))
    source = pa.StructArray.from_arrays([pa.array(np.arange(n, dtype=np.int64))], names=["lsn"])
    return pa.table({"before": before, "after": after, "source": source, "op": pa.array(ops, pa.large_string())})


def upserts(n: int, keys: int, rng: np.random.Generator) -> pa.Table:
    ids = rng.integers(0, keys, n)
    return pa.table({"region": pa.array(np.array(["eu", "us", "apac"], dtype=object)[ids % 3], pa.large_string()),
                     "id": pa.array(ids // 3), "v": pa.array(rng.integers(0, 1 << 30, n))})


def best(fn, repeat: int) -> tuple[float, object]:
    times, out = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--changes", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    n, rng = args.changes, np.random.default_rng(7)
    partition = np.repeat([0, 1], [n // 2, n - n // 2])
    offset = np.concatenate([np.arange(n // 2), np.arange(n - n // 2)])
    cases = [
        ("debezium, key long", ChangeSpec("debezium", ("id",)), envelopes(n, args.keys, rng)),
        ("debezium, key long, sequence_by source.lsn", ChangeSpec("debezium", ("id",), "source.lsn"),
         envelopes(n, args.keys, rng)),
        ("upsert, key (string, long)", ChangeSpec("upsert", ("region", "id")), upserts(n, args.keys, rng)),
    ]
    for name, spec, values in cases:
        t_extract, changes = best(lambda: extract_changes(spec, values, topic="t", partition=partition,
                                                          offset=offset), args.repeat)
        t_dedup, resolved = best(lambda: last_change_per_key(changes), args.repeat)
        print(f"{name}: {n:,} changes, {resolved.touched.num_rows:,} keys, {resolved.inserted:,} inserts | "
              f"extract {n / t_extract:,.0f}/s ({t_extract:.3f} s) | last_change_per_key {n / t_dedup:,.0f}/s "
              f"({t_dedup:.3f} s)")
