"""One Spark task's write path in process: what a record costs once it has been read.

    python scripts/bench_task.py [--records 125000] [--topics 50] [--rounds 5] [--layout runs|interleaved]
                                 [--row-sort-baseline] [--profile] [--format avro,json,raw] [--json FILE]

Feeds `router.executor.tasks.process_partition` (route, decode, evolve, write,
commit in the task) the Arrow batches a fused source task hands it: the
throughput benchmark's records (~490 bytes, 12 fields) over `--topics` topics x
3 partitions (by default each partition's records as one run, the way a
consumer returns them), one table per topic plus one fan-in table, a SQLite catalog and the
registry emulator, no Spark, broker or producer on the cores. The first round
creates the tables and is reported apart; the steady rounds give seconds per
task, microseconds per record and the task's own phase timings, so the
per-record CPU cost of the write path can be told apart from reading and from
the machine's load in the end-to-end benchmarks. With `--profile` the last
round is also profiled (cProfile, top functions by own time). With
`--row-sort-baseline` every other steady round groups the records by a
row-level sort (the executor's fallback for finely interleaved rows), so the
two are compared in one process.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pickle
import pstats
import shutil
import statistics
import struct
import tempfile
import time
from pathlib import Path

from scripts.perf import workload as data
from scripts.perf.config import job_config
from scripts.perf.report import emit


def source_batches(records: int, topics: list[str], ids: dict[str, int], pool: list[bytes], first_offset: int,
                   layout: str = "runs", framed: bool = True):
    """The batches a fused source task hands over.

    "runs": each partition's records in offset order, partitions one after the
    other in no particular order (how a consumer returns fetched partitions), one
    partition per batch as the reader hands them over; "interleaved": the topic
    changes every 3 records (a worst case for grouping), batches of the reader's size.
    """
    import random

    import pyarrow as pa

    from router.source.fetch import BATCH_ROWS
    from router.source.schema import kafka_arrow_schema

    schema = kafka_arrow_schema()
    prefixes = {t: struct.pack(">bI", 0, ids[t]) if framed else b"" for t in topics}
    if layout == "runs":
        per_partition = records // (len(topics) * 3)
        runs = [(t, p) for t in topics for p in range(3)]
        random.Random(first_offset).shuffle(runs)
        rows = [(t, p, first_offset + j) for t, p in runs for j in range(per_partition)]
        rows += [(topics[0], 0, first_offset + per_partition + j) for j in range(records - len(rows))]
    else:
        rows = [(topics[(i // 3) % len(topics)], i % 3, first_offset + i) for i in range(records)]
    # where a batch ends: every BATCH_ROWS rows, and (runs) wherever the partition changes
    cuts = set(range(0, records, BATCH_ROWS)) | {records}
    if layout == "runs":
        cuts |= {i for i in range(1, records) if rows[i][:2] != rows[i - 1][:2]}
    bounds = sorted(cuts)
    now = dt.datetime.now(dt.timezone.utc)
    out = []
    for start, stop in zip(bounds, bounds[1:]):
        idx = range(start, stop)
        out.append(pa.RecordBatch.from_pydict({
            "key": [b"%d" % i for i in idx],
            "value": [prefixes[rows[i][0]] + pool[i % len(pool)] for i in idx],
            "topic": [rows[i][0] for i in idx], "partition": [rows[i][1] for i in idx],
            "offset": [rows[i][2] for i in idx], "timestamp": [now] * len(idx),
            "timestampType": [0] * len(idx), "headers": [None] * len(idx)}, schema=schema))
    return out


def run(records: int, n_topics: int, rounds: int, profile: bool, layout: str = "runs",
        row_sort_baseline: bool = False, profile_out: str | None = None, merge_at: int | None = None,
        transient_codec: str | None = None, value_format: str = "avro") -> dict:
    from router.descriptors import STATS_ROW
    from router.devstack.registry_server import RegistryServer
    from router.driver.dispatcher import Dispatcher
    from router.executor import partition
    from router.executor.tasks import process_partition

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-task-"))
    registry = RegistryServer(data_file=str(root / "registry.json"))
    url = registry.start()
    try:
        topics = [f"orders.{i:03d}" for i in range(n_topics)]
        ids = data.register_topics(url, topics)
        pool = data.payload_pool() if value_format in ("avro", "raw") else data.json_pool()
        args = argparse.Namespace(value_format=None if value_format == "avro" else value_format,fan_in=True, catch_up="turns", expire_every=0, max_snapshot_age=0,
                                  batch_records=records, trigger=1, commit_threads=0, commit_in="tasks",
                                  merge_at=merge_at, transient_codec=transient_codec)
        dispatcher = Dispatcher(job_config(args, root, "127.0.0.1:9", url, {}))
        rounds_out, profiler = [], None
        segment_rows = partition.ROWS_PER_SEGMENT
        for batch_id in range(rounds + 1):
            batches = source_batches(records, topics, ids, pool, batch_id * records, layout, value_format == "avro")
            ctx = dispatcher.context(batch_id)
            baseline_round = row_sort_baseline and batch_id % 2 == 0
            # the baseline: every row sorted and gathered, however the records arrive
            partition.ROWS_PER_SEGMENT = 1 << 40 if baseline_round else segment_rows
            if profile and batch_id == rounds:
                profiler = cProfile.Profile()
                profiler.enable()
            started = time.perf_counter()
            out = list(process_partition(iter(batches), ctx))
            seconds = time.perf_counter() - started
            if profiler is not None:
                profiler.disable()
            stats = next(pickle.loads(blob) for table, blob in zip(out[0].column("table").to_pylist(),
                                                                    out[0].column("descriptor").to_pylist())
                         if table == STATS_ROW)
            phases = {k: round(stats.get(k, 0.0), 3) for k in ("decode", "evolve", "write", "commit")}
            merged = sum(getattr(o, "merged", 0) for table, blob in zip(out[0].column("table").to_pylist(),
                                                                       out[0].column("descriptor").to_pylist())
                         if table != STATS_ROW for o in getattr(pickle.loads(blob), "commits", ()))
            rounds_out.append({"seconds": round(seconds, 3), "row_sort": baseline_round, **phases,
                               **({"merged_files": merged} if merged else {})})
    finally:
        partition.ROWS_PER_SEGMENT = segment_rows
        registry.stop()
        shutil.rmtree(root, ignore_errors=True)  # its catalog, warehouse and registry file
    steady = [r for r in rounds_out[1:] if not r["row_sort"]]
    median = statistics.median(r["seconds"] for r in steady)
    result = {"benchmark": "task", "format": value_format, "layout": layout, "records": records, "topics": n_topics, "tables": n_topics + 1,
              "first_round": rounds_out[0], "steady_rounds": steady,
              "steady_median_s": round(median, 3), "us_per_record": round(median / records * 1e6, 2),
              "steady_phase_median_s": {k: round(statistics.median(r[k] for r in steady), 3)
                                        for k in ("decode", "evolve", "write", "commit")},
              # merges come every ~9-16 rounds per table: their cost shows in the mean, not the median
              "steady_mean_s": round(statistics.mean(r["seconds"] for r in steady), 3),
              "steady_phase_mean_s": {k: round(statistics.mean(r[k] for r in steady), 3)
                                      for k in ("decode", "evolve", "write", "commit")},
              "merge_small_files_at": merge_at,
              "transient_file_codec": dispatcher.config.maintenance.transient_file_codec}
    baseline = [r for r in rounds_out[1:] if r["row_sort"]]
    if baseline:
        result["row_sort_median_s"] = round(statistics.median(r["seconds"] for r in baseline), 3)
        result["row_sort_phase_median_s"] = {k: round(statistics.median(r[k] for r in baseline), 3)
                                             for k in ("decode", "evolve", "write", "commit")}
        result["speedup_vs_row_sort"] = round(result["row_sort_median_s"] / median, 2)
    if profiler is not None:
        if profile_out:
            profiler.dump_stats(profile_out)
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(15)
        result["profile_top_tottime"] = [line.strip() for line in text.getvalue().splitlines()
                                         if line.strip()[:1].isdigit()][:15]
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=125_000, help="records per task (a 500,000 batch over 4 tasks)")
    ap.add_argument("--topics", type=int, default=50, help="topics per task (200 over 4 tasks)")
    ap.add_argument("--rounds", type=int, default=5, help="steady rounds after the one that creates the tables")
    ap.add_argument("--layout", choices=("runs", "interleaved"), default="runs",
                    help="records as a consumer returns them (partition runs) or the topic changing every 3")
    ap.add_argument("--row-sort-baseline", action="store_true",
                    help="every other steady round sorts and gathers every row (the grouping before segments)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--profile-out", help="with --profile: also save the last round's pstats to this file")
    ap.add_argument("--merge-at", help="maintenance.merge_small_files_at, or a comma list run in turn in this "
                                       "process (e.g. 0,16,0,16: without and with inline merging); default: the job's")
    ap.add_argument("--transient-codec", help="with --merge-at: maintenance.transient_file_codec, or a comma list run "
                                              "in turn for each --merge-at (e.g. table,uncompressed)")
    ap.add_argument("--format", default="avro",
                    help="how the values are written and read: avro (registry framing), json (inferred), raw; "
                         "or a comma list run in turn in this process (e.g. avro,json,raw)")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    if "," in args.format:
        runs = [run(args.records, args.topics, args.rounds, args.profile, args.layout, value_format=f)
                for f in args.format.split(",")]
        avro = next((r["steady_median_s"] for r in runs if r["format"] == "avro"), None)
        for r in runs:
            r["records_per_s"] = round(r["records"] / r["steady_median_s"])
            if avro:
                r["rate_vs_avro"] = round(avro / r["steady_median_s"], 2)
        return emit({"benchmark": "task_formats", "runs": runs}, args.json_file)
    if not args.merge_at:
        return emit(run(args.records, args.topics, args.rounds, args.profile, args.layout, args.row_sort_baseline,
                        args.profile_out, value_format=args.format), args.json_file)
    runs = [run(args.records, args.topics, args.rounds, args.profile, args.layout, args.row_sort_baseline,
                args.profile_out, int(at), codec or None) for at in args.merge_at.split(",")
            for codec in (args.transient_codec or "").split(",")]
    return emit({"benchmark": "task_merge", "runs": runs}, args.json_file)

