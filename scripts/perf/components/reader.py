"""The Kafka reader of this checkout against the reader of a git revision, in one process.

    python scripts/bench_reader.py [--against HEAD] [--records 249600] [--topics 26] [--rounds 6] [--new-topics]
                                   [--json FILE]

One fused task's share of the throughput benchmark (`--topics` topics x 3
partitions, ~500-byte values, every partition's whole range) is read with
`router.source.fetch.read_ranges` as it is in the working tree and as it was
at `--against` (loaded from git as a module of its own), alternating, against
a local noida-db broker. Reports the median wall and CPU seconds of each (the
first round of each is a warm-up) and their ratios. CPU is the process's: the
Python thread and librdkafka's threads. With `--new-topics` every read takes
topics no consumer of the process has read yet (as each batch of a catch-up in
turns does), so what a reused consumer pays for a new topic set shows.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts import REPO
from scripts.perf.report import emit
from scripts.perf.workload import produce_raw


def load_revision(rev: str):
    """router/source/fetch.py at `rev`, as the module `fetch_at_revision`."""
    source = subprocess.run(["git", "show", f"{rev}:router/source/fetch.py"], cwd=REPO, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="icerouter-bench-reader-")) / "fetch_at_revision.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("fetch_at_revision", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["fetch_at_revision"] = module
    spec.loader.exec_module(module)
    return module


def run(against: str, records: int, n_topics: int, rounds: int, new_topics: bool = False) -> dict:
    import router.source.fetch as current
    from router.devstack.broker import LocalBroker, client_config
    from router.source import KafkaSourceOptions
    from router.source.offsets import Range

    baseline = load_revision(against)
    against = subprocess.run(["git", "rev-parse", "--short", against], cwd=REPO, check=True,
                             capture_output=True, text=True).stdout.strip()
    broker = LocalBroker(tempfile.mkdtemp(prefix="icerouter-bench-reader-broker-"))
    broker.start()
    try:
        conf = {k: str(v) for k, v in client_config(broker.bootstrap).items()}
        groups = 2 * rounds if new_topics else 1
        topics = [f"bench-reader-{i:04d}" for i in range(n_topics * groups)]
        per_partition = records // (n_topics * 3)
        print(f"producing {per_partition * len(topics) * 3:,} records over {len(topics)} topics x 3 partitions ...",
              flush=True)
        produce_raw(conf, topics, 3, per_partition * len(topics) * 3, 500)
        time.sleep(8)  # the local broker snapshots what it was sent; let that finish first
        options = KafkaSourceOptions(conf["bootstrap.servers"], topics=tuple(topics),
                                     client_config={k: v for k, v in conf.items() if k != "bootstrap.servers"})
        options_json = options.to_json()
        runs: dict[str, list] = {"current": [], "baseline": []}
        for i in range(2 * rounds):
            label, module = (("baseline", baseline), ("current", current))[i % 2]
            group = topics[(i % groups) * n_topics: (i % groups + 1) * n_topics]
            ranges = [Range(t, p, 0, per_partition) for t in group for p in range(3)]
            wall, cpu = time.perf_counter(), time.process_time()
            batches = list(module.read_ranges(options_json, ranges))
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            rows = sum(b.num_rows for b in batches)
            assert rows == per_partition * len(ranges), f"{label} read {rows} of {per_partition * len(ranges)}"
            runs[label].append({"wall_s": round(wall, 3), "cpu_s": round(cpu, 3), "batches": len(batches)})
    finally:
        baseline.close_consumers()
        current.close_consumers()
        broker.stop()
    out = {"benchmark": "reader", "against": against, "new_topics": new_topics, "records": per_partition * len(ranges),
           "partitions": len(ranges), "runs": runs}
    for label, rs in runs.items():
        steady = rs[1:]
        out[label] = {k: round(statistics.median(r[k] for r in steady), 3) for k in ("wall_s", "cpu_s")}
    out["cpu_ratio"] = round(out["baseline"]["cpu_s"] / out["current"]["cpu_s"], 2)
    out["wall_ratio"] = round(out["baseline"]["wall_s"] / out["current"]["wall_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", default="HEAD", help="git revision whose reader is the baseline")
    ap.add_argument("--records", type=int, default=249_600, help="records per read (one task's share)")
    ap.add_argument("--topics", type=int, default=26)
    ap.add_argument("--rounds", type=int, default=6, help="reads of each reader")
    ap.add_argument("--new-topics", action="store_true", help="every read takes topics not read before")
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    return emit(run(args.against, args.records, args.topics, args.rounds, args.new_topics), args.json_file)

