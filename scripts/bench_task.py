"""One Spark task's write path in process: what a record costs once it has been read.

    python scripts/bench_task.py [--records 125000] [--topics 50] [--rounds 5] [--json FILE]

Feeds `router.executor.tasks.process_partition` (route, decode, evolve, write,
commit in the task) the Arrow batches a fused source task hands it: the
throughput benchmark's records (~490 bytes, 12 fields) over `--topics` topics x
3 partitions, one table per topic plus one fan-in table, a SQLite catalog and the
registry emulator, no Spark, broker or producer on the cores. The first round
creates the tables and is reported apart; the steady rounds give seconds per
task, microseconds per record and the task's own phase timings, so the
per-record CPU cost of the write path can be told apart from reading and from
the machine's load in the end-to-end benchmarks. With `--profile` the last
round is also profiled (cProfile, top functions by own time).
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import io
import pickle
import pstats
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

SOURCE_BATCH_ROWS = 16384  # what the reader yields per Arrow batch (router/source/fetch.py)


def source_batches(records: int, topics: list[str], ids: dict[str, int], pool: list[bytes], first_offset: int):
    import pyarrow as pa

    from router.source.schema import kafka_arrow_schema

    schema = kafka_arrow_schema()
    prefixes = [struct.pack(">bI", 0, ids[t]) for t in topics]
    now = dt.datetime.now(dt.timezone.utc)
    out = []
    for start in range(0, records, SOURCE_BATCH_ROWS):
        idx = range(start, min(records, start + SOURCE_BATCH_ROWS))
        out.append(pa.RecordBatch.from_pydict({
            "key": [b"%d" % i for i in idx],
            "value": [prefixes[(i // 3) % len(topics)] + pool[i % len(pool)] for i in idx],
            "topic": [topics[(i // 3) % len(topics)] for i in idx], "partition": [i % 3 for i in idx],
            "offset": [first_offset + i for i in idx], "timestamp": [now] * len(idx),
            "timestampType": [0] * len(idx), "headers": [None] * len(idx)}, schema=schema))
    return out


def run(records: int, n_topics: int, rounds: int, profile: bool) -> dict:
    import bench_data as data
    from bench import job_config

    from router.descriptors import STATS_ROW
    from router.devstack.registry_server import RegistryServer
    from router.driver.dispatcher import Dispatcher
    from router.executor.tasks import process_partition

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-task-"))
    registry = RegistryServer(data_file=str(root / "registry.json"))
    url = registry.start()
    try:
        topics = [f"orders.{i:03d}" for i in range(n_topics)]
        ids = data.register_topics(url, topics)
        pool = data.payload_pool()
        args = argparse.Namespace(fan_in=True, catch_up="turns", expire_every=0, max_snapshot_age=0,
                                  batch_records=records, trigger=1, commit_threads=0, commit_in="tasks")
        dispatcher = Dispatcher(job_config(args, root, "127.0.0.1:9", url, {}))
        rounds_out, profiler = [], None
        for batch_id in range(rounds + 1):
            batches = source_batches(records, topics, ids, pool, batch_id * records)
            ctx = dispatcher.context(batch_id)
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
            rounds_out.append({"seconds": round(seconds, 3), **{k: round(stats.get(k, 0.0), 3) for k in
                                                                 ("decode", "evolve", "write", "commit")}})
    finally:
        registry.stop()
    steady = rounds_out[1:]
    median = statistics.median(r["seconds"] for r in steady)
    result = {"benchmark": "task", "records": records, "topics": n_topics, "tables": n_topics + 1,
              "first_round": rounds_out[0], "steady_rounds": steady,
              "steady_median_s": round(median, 3), "us_per_record": round(median / records * 1e6, 2),
              "steady_phase_median_s": {k: round(statistics.median(r[k] for r in steady), 3)
                                        for k in ("decode", "evolve", "write", "commit")}}
    if profiler is not None:
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
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    from bench_report import emit

    return emit(run(args.records, args.topics, args.rounds, args.profile), args.json_file)


if __name__ == "__main__":
    sys.exit(main())
