"""icerouter at scale: hundreds of topics into Iceberg, against a hand-written baseline and the raw ceiling.

    python scripts/bench.py [--mode throughput|scale|scale1000|freshness|soak|commit-scaling|upsert] [--topics N]
                            [--records M] [--commit-in tasks|driver] [--json FILE] [--workdir DIR] ...

throughput (default): N topics (200) x 3 partitions, M Avro records (2,000,000, ~490 B, 12
    fields) produced up front, routed one table per topic plus one fan-in table, the job run
    with availableNow from a clean checkpoint. Same run: raw confluent-kafka consume (ceiling)
    and the hand-written baseline (on fewer topics, compared as a rate) (throughput.py).
scale: 500 topics -> 500 tables (no fan-in), same figures (throughput.py).
freshness: a producer at a steady rate (5,000 records/s over 200 topics) for --duration
    seconds (300) against the job with a 10 s trigger; reports commit time - record
    timestamp percentiles and per-table commit latency over time (freshness.py). --hot-topics 20
    makes it an estate: 20 topics carry 90% of the records, the others' tables commit every
    --cold-commit-after seconds; latencies per class, commit work per batch.
soak: the live job, --soak-tables topics (20) at --rate 2,000 records/s, 1 s trigger, until
    --batches (500): commit latency of the last 10 batches vs the first 10 (soak.py).
commit-scaling: N topics (200) -> N tables in local[1] / local[2] / a 2 x 1-core standalone
    cluster, commits in tasks and on the driver: tables per second (scaling.py).
scale1000: N topics (1,000) -> N tables that already hold offsets: process start -> first batch
    running, peak memory, commit work per N-table batch; --before-ref REV adds REV's code (start_scale.py).
formats: N topics (200) of the same records as Avro and as plain JSON, drained in turn with format
    registry, json (inferred) and raw, twice; each rate as a ratio to Avro's (formats.py).
upsert: N Debezium topics (20) x 3 partitions, a backlog of --cdc-rows snapshot events per topic
    (20,000), then one of --cdc-changes changes per topic (20,000: 70% updates, 20% inserts, 10%
    deletes), each drained with availableNow by a job routing them as CDC tables and, as the
    baseline, by a job appending them; change events/s, the ratio, every table checked (upsert.py).
--commit-in sets job.commit_in_tasks (tasks: in the Spark tasks, driver: on the driver).

A local broker (noida-db), the registry emulator and a SQLite catalog are started in
--workdir (a temporary directory by default) and stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from router.config.model import TRANSIENT_FILE_CODECS
from scripts.perf.live import formats, freshness, protobuf, scaling, soak, start_scale, throughput, upsert
from scripts.perf.report import render, write_json
from scripts.perf.services import Stack

# scale measures a batch that commits every table: its backlog is shared evenly (kafka.catch_up: even),
# where the job's default (turns) would commit a quarter of the tables per batch
MODE_DEFAULTS = {"throughput": {"topics": 200, "fan_in": True, "catch_up": "turns"},
                 "scale": {"topics": 500, "fan_in": False, "catch_up": "even"},
                 "freshness": {"topics": 200, "fan_in": True, "catch_up": "turns"},
                 "soak": {"topics": 0, "fan_in": False, "catch_up": "turns"},
                 "commit-scaling": {"topics": 200, "fan_in": False, "catch_up": "turns"},
                 # every table in every batch, so later batches replace rows of files committed before
                 "upsert": {"topics": 20, "fan_in": False, "catch_up": "even", "batch_records": 100_000},
                 # the same records as Avro and as Protobuf, each format's backlog drained twice
                 "protobuf": {"topics": 50, "fan_in": False, "catch_up": "turns", "records": 500_000},
                 # the same records framed as Avro, as plain JSON (inferred) and read raw, each drained twice
                 "formats": {"topics": 200, "fan_in": False, "catch_up": "turns", "records": 500_000},
                 # restarts over 1,000 tables that hold offsets; every batch touches every table
                 "scale1000": {"topics": 1000, "fan_in": False, "catch_up": "even", "partitions": 1}}
# mode -> run(args, stack, root) -> the result dict (written as JSON)
RUNNERS = {"throughput": throughput.run_throughput, "scale": throughput.run_throughput,
           "freshness": freshness.run_freshness, "soak": soak.run_soak,
           "commit-scaling": scaling.run_commit_scaling, "upsert": upsert.run_upsert,
           "protobuf": protobuf.run_protobuf, "formats": formats.run_formats,
           "scale1000": start_scale.run_scale_start}


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=sorted(MODE_DEFAULTS), default="throughput")
    ap.add_argument("--topics", type=int, help="default 200 (500 in scale mode)")
    ap.add_argument("--partitions", type=int, help="per topic (default 3; scale1000: 1)")
    ap.add_argument("--records", type=int, help="default 2,000,000 (protobuf: 500,000 per format)")
    ap.add_argument("--batch-records", type=int, help="kafka.max_records_per_batch (default 500,000; upsert: 100,000)")
    ap.add_argument("--no-fan-in", action="store_true", help="no fan-in table (scale mode never has one)")
    ap.add_argument("--catch-up", choices=("turns", "even"),
                    help="kafka.catch_up: how a backlog beyond --batch-records is shared (default: turns; scale: even)")
    ap.add_argument("--baseline-topics", type=int, default=20, help="topics the baseline reads (0: skip)")
    ap.add_argument("--no-ceiling", action="store_true", help="skip the raw confluent-kafka consume")
    ap.add_argument("--rate", type=float, help="records/s: freshness (default 5000), soak (default 2000)")
    ap.add_argument("--duration", type=float, default=300.0, help="freshness: producer seconds")
    ap.add_argument("--trigger", type=float, help="trigger seconds: freshness (default 10), soak (default 1)")
    ap.add_argument("--hot-topics", type=int, default=0,
                    help="freshness: the first N topics carry --hot-share of the records and commit every batch")
    ap.add_argument("--hot-share", type=float, default=0.9, help="freshness: the hot topics' share of the records")
    ap.add_argument("--cold-commit-after", type=float,
                    help="freshness with --hot-topics: commit_after seconds of the other topics' tables")
    ap.add_argument("--batches", type=int, default=500, help="soak: batches to run")
    ap.add_argument("--soak-tables", type=int, default=20, help="soak: topics, one table each")
    ap.add_argument("--broker-retention", type=float, default=30.0,
                    help="soak, freshness: delete records older than this many seconds, as Kafka's retention.ms would "
                         "(the local broker ignores it and its CPU grows with what it holds; 0: keep all)")
    ap.add_argument("--nice-load", type=int, default=0,
                    help="soak: run the broker and the producer at this nice value (a diagnostic: in production "
                         "they are machines of their own; the default 0 is the measurement)")
    ap.add_argument("--cdc-rows", type=int, default=20_000, help="upsert: snapshot rows per topic")
    ap.add_argument("--cdc-changes", type=int, default=20_000, help="upsert: changes per topic after the snapshot")
    ap.add_argument("--cdc-format", choices=("avro", "json"), default="avro",
                    help="upsert: Debezium's Avro converter through the registry, or its JSON converter with the "
                         "schema embedded (format connect_json)")
    ap.add_argument("--formats", default="avro,json,raw",
                    help="formats mode: the value formats drained in turn (avro: registry framing; json: the same "
                         "records as plain JSON, columns inferred; raw: the Avro topics' bytes as they are)")
    ap.add_argument("--commit-in", choices=("tasks", "driver"), default="tasks",
                    help="job.commit_in_tasks: where tables are committed (commit-scaling runs both)")
    ap.add_argument("--group-commit", choices=("on", "off"), default="on",
                    help="job.commit_consumer_group (on: the job's default; off: the local broker rewrites every "
                         "record it holds on each group commit, a cost a Kafka cluster does not have)")
    ap.add_argument("--format-rounds", type=int, default=5,
                    help="formats mode: interleaved drains of each format (the ratios are medians over them)")
    ap.add_argument("--scaling-batches", type=int, default=3, help="commit-scaling: measured batches")
    ap.add_argument("--scaling-records", type=int, default=100, help="commit-scaling: records per topic per batch")
    ap.add_argument("--scaling-configs", help="commit-scaling: comma-separated configuration names (default all)")
    ap.add_argument("--records-per-table", type=int, default=20, help="scale1000: records per table per batch")
    ap.add_argument("--start-batches", type=int, default=3, help="scale1000: batches each measured start drains")
    ap.add_argument("--start-repeats", type=int, default=2, help="scale1000: measured starts per code version")
    ap.add_argument("--before-ref", help="scale1000: also measure the starts with this git revision's product code")
    ap.add_argument("--commit-threads", type=int, help="job.commit_threads (job default 8)")
    ap.add_argument("--expire-every", type=int, help="maintenance.expire_every_commits (job default)")
    ap.add_argument("--compact-after-files", type=int, help="maintenance.compact_after_files (job default)")
    ap.add_argument("--merge-at", type=int,
                    help="maintenance.merge_small_files_at: inline small-file merging (job default: off)")
    ap.add_argument("--transient-codec", choices=tuple(TRANSIENT_FILE_CODECS),
                    help="maintenance.transient_file_codec: the codec of small appends while merging (job default)")
    ap.add_argument("--max-snapshot-age", type=int, help="maintenance.max_snapshot_age_seconds (job default)")
    ap.add_argument("--metrics", action="store_true",
                    help="throughput: serve the job's Prometheus metrics, scrape them every second and report "
                         "the share of the job's time their updates and scrapes took")
    ap.add_argument("--workdir")
    ap.add_argument("--keep", action="store_true", help="keep the working directory")
    ap.add_argument("--json", dest="json_file", help="also write the results as JSON")
    ap.add_argument("--profile", help="py-spy the driver and Python workers during the job; collapsed stacks here")
    args = ap.parse_args(argv)
    defaults = MODE_DEFAULTS[args.mode]
    args.topics = args.topics or defaults["topics"]
    args.partitions = args.partitions or defaults.get("partitions", 3)
    # an estate (--hot-topics) has no table every topic feeds: it would read every partition every batch
    args.fan_in = defaults["fan_in"] and not args.no_fan_in and not args.hot_topics
    args.catch_up = args.catch_up or defaults["catch_up"]
    args.batch_records = args.batch_records or defaults.get("batch_records", 500_000)
    args.records = args.records or defaults.get("records", 2_000_000)
    args.trigger = args.trigger or (1.0 if args.mode == "soak" else 10.0)
    args.rate = args.rate or (2000.0 if args.mode == "soak" else 5000.0)
    if args.cold_commit_after and args.broker_retention:
        # a waiting table's records stay in Kafka: the retention must outlast its cadence, as on a real broker
        args.broker_retention = max(args.broker_retention, args.cold_commit_after + 30)
    return args


def main(argv: list[str] | None = None) -> int:
    from scripts.perf.probe import load_average

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the broker and clean up on kill
    root = Path(args.workdir or tempfile.mkdtemp(prefix="icerouter-bench-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    print(f"icerouter bench, mode {args.mode}, working in {root}; load average {load_average()}", flush=True)
    try:
        with Stack(root) as stack:
            result = RUNNERS[args.mode](args, stack, root)
    finally:
        if not args.keep and not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print(render(result))  # render adds the ratios to the targets (ceiling_share, vs_baseline) to the result
    if args.json_file:
        write_json(result, args.json_file)
        print(f"results written to {args.json_file}")
    return 0
