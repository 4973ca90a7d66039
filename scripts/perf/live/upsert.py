"""Upsert mode: Debezium change streams into upsert tables through the live job, against the same events appended.

--topics (20) Debezium topics x --partitions (3) carry a customers table's changes as
Debezium's Avro converter writes them (router/cli/demo_cdc.py: a `Key` record, the
envelope, a tombstone after every delete), keyed to partitions by id. Two phases,
each a backlog produced up front and drained by the job with availableNow:

1. snapshot: --cdc-rows `r` events per topic (the initial snapshot);
2. changes: --cdc-changes events per topic, 70% updates of live keys, 20% inserts,
   10% deletes (each followed by its tombstone).

Each phase is read by two jobs with their own checkpoints, one after the other on one
SparkSession (after a warm-up query): the baseline routes the topics with mode append
into bench_append.* (every envelope a row), the measured job routes them with
`cdc: debezium` and `sequence_by: source.lsn` into bench.* (the last change per key per
batch; the commit locates the keys' live rows and writes position deletes and images in
one snapshot). Reported per phase and job: change events/s (tombstones are records, not
events), batches, commit work per batch, and the upsert rate as a ratio to the append
rate. --cdc-format json writes the same events as Debezium's JSON converter (schema embedded) and
the routes read them with format connect_json. After each phase every upsert table must hold exactly the rows its ChangeScript
says (DuckDB reads every row; pyiceberg counts), every append table one row per event,
and no record may be dead-lettered: a wrong table fails the run.
"""

from __future__ import annotations

import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

from scripts.perf.config import NAMESPACE, catalog_properties, commit_setting, group_commit
from scripts.perf.services import Stack

APPEND_NAMESPACE = f"{NAMESPACE}_append"
TOPIC_PREFIX = "cdc"
COLUMNS = ("id", "name", "email", "tier", "region")
MIX = {"updates": 0.7, "inserts": 0.2, "deletes": 0.1}
SEED = 4242


@dataclass
class Source:
    """One Debezium topic: its ChangeScript (the truth), its encoder, and its live keys for O(1) picks
    (ChangeScript.mixed picks from the sorted keys on every event: too slow at tens of thousands)."""

    topic: str
    script: object
    encode: object
    rng: random.Random
    keys: list = field(default_factory=list)
    slot: dict = field(default_factory=dict)
    events: int = 0  # change events produced (c, r, u, d)
    tombstones: int = 0

    def _add(self, key: int) -> None:
        self.slot[key] = len(self.keys)
        self.keys.append(key)

    def _remove(self, key: int) -> None:
        i, last = self.slot.pop(key), self.keys.pop()
        if last != key:
            self.keys[i], self.slot[last] = last, i

    def snapshot(self, n: int):
        for event in self.script.snapshot(n):
            self._add(event.key["id"])
            yield event

    def changes(self, n: int):
        """n changes in the MIX shares; a delete brings its tombstone along."""
        upd, ins = MIX["updates"], MIX["updates"] + MIX["inserts"]
        for _ in range(n):
            roll = self.rng.random()
            if roll < upd and self.keys:
                yield from self.script.update(self.keys[self.rng.randrange(len(self.keys))])
            elif roll < ins or not self.keys:
                for event in self.script.insert():
                    self._add(event.key["id"])
                    yield event
            else:
                key = self.keys[self.rng.randrange(len(self.keys))]
                self._remove(key)
                yield from self.script.delete(key)

    @property
    def table(self) -> str:
        return self.topic.replace(".", "_")


def make_sources(registry_url: str, topics: list[str], seed: int = SEED, fmt: str = "avro") -> list[Source]:
    """`fmt` avro: Debezium's Avro converter through the registry; json: its JSON converter with the
    schema embedded (the routes read it with format connect_json)."""
    import router.cli.demo_cdc as cdc
    from router.cli.demo_data import register

    def encoder(t: str):
        if fmt == "json":
            return cdc.DebeziumJsonEncoder(schemas=True)
        return cdc.ChangeEncoder(register(registry_url, f"{t}-key", cdc.CUSTOMER_KEY),
                                 register(registry_url, f"{t}-value", cdc.CUSTOMER_ENVELOPE))

    return [Source(t, cdc.ChangeScript(seed=seed + i), encoder(t), random.Random(seed * 31 + i))
            for i, t in enumerate(topics)]


def produce(conf: dict, sources: list[Source], step, partitions: int) -> dict:
    """Encode and produce `step(source)`'s events of every source (partition = id % partitions)."""
    from confluent_kafka import Producer

    producer = Producer({**conf, "linger.ms": "50", "batch.num.messages": "10000",
                         "queue.buffering.max.messages": "1000000", "queue.buffering.max.kbytes": "1048576"})
    started = time.perf_counter()
    events = tombstones = 0
    for source in sources:
        for i, event in enumerate(step(source)):
            topic, key, value, _ = source.encode(source.topic, event)
            while True:
                try:
                    producer.produce(topic, key=key, value=value, partition=event.key["id"] % partitions)
                    break
                except BufferError:
                    producer.poll(0.05)
            if value is None:
                tombstones += 1
                source.tombstones += 1
            else:
                events += 1
                source.events += 1
            if i % 20000 == 0:
                producer.poll(0)
    remaining = producer.flush(300)
    if remaining:
        raise RuntimeError(f"{remaining} records not delivered")
    seconds = time.perf_counter() - started
    return {"events": events, "tombstones": tombstones, "seconds": round(seconds, 2),
            "events_per_s": round(events / seconds)}


def cdc_config(args, root: Path, stack: Stack, job: str, routes: list[dict], namespaces: list[str],
               pattern: str = rf"{TOPIC_PREFIX}\..*"):
    from router.config import parse_config

    return parse_config({
        "kafka": {"bootstrap_servers": stack.bootstrap, "pattern": pattern, "client": stack.client,
                  "max_records_per_batch": args.batch_records, "catch_up": args.catch_up},
        "registry": {"url": stack.registry_url},
        "catalog": {"name": "bench", "properties": catalog_properties(root)},
        "job": {"name": job, "checkpoint": str(root / f"checkpoint-{job}"), "trigger_seconds": args.trigger,
                **({"commit_threads": args.commit_threads} if args.commit_threads else {}),
                **commit_setting(args.commit_in, group_commit(args)),
                "spark": {"spark.master": "local[2]", "spark.driver.memory": "4g"}},
        "tables": {"allowed_namespaces": [*namespaces, "ops"]},
        "routes": routes,
        "dlq": {"table": f"ops.dead_letters_{job.replace('-', '_')}"},
    })


def upsert_route(topic_regex: str, namespace: str, fmt: str = "avro") -> dict:
    return {"name": "cdc", "topic": topic_regex, "table": namespace + ".{topic}", "cdc": "debezium",
            "sequence_by": "source.lsn", **({"format": "connect_json"} if fmt == "json" else {})}


def append_route(topic_regex: str, namespace: str, fmt: str = "avro") -> dict:
    return {"name": "log", "topic": topic_regex, "table": namespace + ".{topic}",
            **({"format": "connect_json"} if fmt == "json" else {})}


def warm_up(spark, args, stack: Stack, root: Path) -> None:
    """Both jobs' code paths on topics of their own: Python workers, imports and the catalog are warm after."""
    from router.driver.job import start_query

    topics = [f"warmcdc.t{i}" for i in range(8)]  # a topic per task slot and then some (see throughput.warm_up)
    stack.broker.create_topics(topics, partitions=1)
    sources = make_sources(stack.registry_url, topics, seed=99)
    produce(stack.conf, sources, lambda s: [*s.snapshot(200), *s.changes(200)], 1)
    config = cdc_config(args, root, stack, "warmup", [upsert_route(r"warmcdc\.t\d+", "warm"),
                                                      append_route(r"warmcdc\.t\d+", "warm_append")],
                        ["warm", "warm_append"], pattern=r"warmcdc\..*")
    query, _ = start_query(spark, config, available_now=True)
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(f"warm-up failed: {str(query.exception()).splitlines()[0]}")


def run_job(spark, config, events: int, profile_dir: str | None = None) -> dict:
    """One availableNow run of `config` from its checkpoint; rates over first batch start -> last batch end."""
    from router.driver.job import start_query
    from scripts.perf.probe import CpuSampler, RecordingDispatcher, batch_rows, cpu_per_second

    profiler = None
    if profile_dir:
        from scripts.perf.pyspy import Profiler

        profiler = Profiler(Path(profile_dir)).start()
    cpu = CpuSampler()
    before = cpu.sample()
    t0 = time.time()
    query, dispatcher = start_query(spark, config, available_now=True, make_dispatcher=RecordingDispatcher,
                                    listeners=[lambda s: print("    " + s.line(), flush=True)])
    query.awaitTermination()
    t1 = time.time()
    out: dict = {"cores": cpu_per_second(before, cpu.sample())}
    if profiler is not None:
        out["profile"] = profiler.stop()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    batches = dispatcher.batches
    cores = spark.sparkContext.defaultParallelism
    rows = batch_rows(batches, cores)
    seconds = batches[-1].ended - batches[0].started
    dlq = config.dlq.table
    commits = [c.seconds for c in dispatcher.commits if c.status == "committed" and c.table != dlq]
    work = [r["commit_work_s"] for r in rows]
    out.update({
        "records_read": sum(b.stats.records for b in batches), "events": events,
        "rows_written": sum(b.stats.rows_written for b in batches), "batches": len(batches),
        "seconds": round(seconds, 3), "seconds_from_query_start": round(t1 - t0, 3),
        "events_per_s": round(events / seconds),
        "tables_committed": sum(b.stats.tables_committed for b in batches),
        "dead_letters": sum(b.stats.dead_letters for b in batches),
        "failed_tables": sum(b.stats.tables_failed for b in batches),
        "commit_work_s": {"total": round(sum(work), 3), "per_batch_mean": round(statistics.mean(work), 3),
                          "per_batch_max": round(max(work), 3)},
        "share_of_time_committing": round(sum(work) / seconds, 3) if seconds else None,
        "table_commit_s": {"p50": round(statistics.median(commits), 4), "max": round(max(commits), 4)} if commits else {},
        "per_batch": rows,
    })
    return out


def check_upsert(catalog, sources: list[Source], when: str) -> dict:
    """Every upsert table against its script: DuckDB reads every row, pyiceberg counts them."""
    from router.catalog import load_table
    from router.cli.summary import duckdb_connect, metadata_path

    con = duckdb_connect(catalog.properties)
    problems, rows = [], 0
    try:
        for source in sources:
            table = load_table(catalog, f"{NAMESPACE}.{source.table}", refresh=True)
            found = {r[0]: r for r in con.execute(f"SELECT {', '.join(COLUMNS)} FROM iceberg_scan("
                                                  f"'{metadata_path(table)}')").fetchall()}
            truth = {k: tuple(v[c] for c in COLUMNS) for k, v in source.script.rows.items()}
            counted = table.scan(selected_fields=("id",)).to_arrow().num_rows
            missing, extra = truth.keys() - found.keys(), found.keys() - truth.keys()
            wrong = [k for k in truth.keys() & found.keys() if truth[k] != found[k]]
            if missing or extra or wrong or counted != len(truth):
                problems.append(f"{table.name()}: {len(missing)} rows missing, {len(extra)} extra, {len(wrong)} "
                                f"different (e.g. key {next(iter(sorted(missing) or sorted(extra) or wrong), None)}), "
                                f"pyiceberg counts {counted} of {len(truth)}")
            rows += len(found)
    finally:
        con.close()
    if problems:
        raise RuntimeError(f"{when}: {len(problems)} upsert tables differ from their source: " + "; ".join(problems))
    return {"tables": len(sources), "rows": rows, "matched": True}


def check_append(catalog, sources: list[Source], when: str) -> dict:
    """Every append table holds one row per change event produced (tombstones are not events)."""
    from router.catalog import load_table
    from router.cli.summary import duckdb_connect, metadata_path

    con = duckdb_connect(catalog.properties)
    problems, rows = [], 0
    try:
        for source in sources:
            table = load_table(catalog, f"{APPEND_NAMESPACE}.{source.table}", refresh=True)
            n = con.execute(f"SELECT count(*) FROM iceberg_scan('{metadata_path(table)}')").fetchone()[0]
            if n != source.events:
                problems.append(f"{table.name()}: {n} rows, {source.events} events produced")
            rows += n
    finally:
        con.close()
    if problems:
        raise RuntimeError(f"{when}: {len(problems)} append tables differ from their source: " + "; ".join(problems))
    return {"tables": len(sources), "rows": rows, "matched": True}


def table_files(catalog, names: list[str]) -> dict:
    """Data files, position-delete files and deleted positions per table (snapshot summary totals)."""
    from router.catalog import load_table

    totals = {"data_files": [], "delete_files": [], "position_deletes": [], "records": []}
    for name in names:
        summary = load_table(catalog, name, refresh=True).current_snapshot().summary
        for key in totals:
            totals[key].append(int(summary.get("total-" + key.replace("_", "-")) or 0))
    return {k: {"mean": round(statistics.mean(v), 1), "max": max(v)} for k, v in totals.items()}


def _ratio(ours: dict, base: dict) -> float | None:
    return round(ours["events_per_s"] / base["events_per_s"], 3) if base["events_per_s"] else None


def run_upsert(args, stack: Stack, root: Path) -> dict:
    from router.driver.job import build_spark
    from scripts.perf.probe import MemorySampler, load_average, settle_broker

    topics = [f"{TOPIC_PREFIX}.t{i:02d}" for i in range(args.topics)]
    result: dict = {"mode": "upsert", "topics": args.topics, "partitions": args.partitions,
                    "snapshot_rows_per_topic": args.cdc_rows, "changes_per_topic": args.cdc_changes, "mix": MIX,
                    "batch_records": args.batch_records, "catch_up": args.catch_up, "commit_in": args.commit_in,
                    "group_commit": args.group_commit, "load_before": load_average(), "phases": {}}
    stack.broker.create_topics(topics, partitions=args.partitions, timeout=120)
    fmt = getattr(args, "cdc_format", "avro")
    result["cdc_format"] = fmt
    sources = make_sources(stack.registry_url, topics, fmt=fmt)
    regex = rf"{TOPIC_PREFIX}\.t\d+"
    append = cdc_config(args, root, stack, "bench-append", [append_route(regex, APPEND_NAMESPACE, fmt)],
                        [APPEND_NAMESPACE])
    upsert = cdc_config(args, root, stack, "bench-upsert", [upsert_route(regex, NAMESPACE, fmt)], [NAMESPACE])
    spark = build_spark(upsert)
    print("warming up Spark workers ...", flush=True)
    warm_up(spark, args, stack, root)
    memory = MemorySampler().start()
    steps = {"snapshot": lambda s: s.snapshot(args.cdc_rows), "changes": lambda s: s.changes(args.cdc_changes)}
    for phase, step in steps.items():
        print(f"{phase}: producing ...", flush=True)
        produced = produce(stack.conf, sources, step, args.partitions)
        produced["broker_settle_seconds"] = settle_broker(stack.broker)
        print(f"  {produced['events']:,} events + {produced['tombstones']:,} tombstones in {produced['seconds']:.0f} s; "
              f"the broker settled {produced['broker_settle_seconds']:.0f} s after", flush=True)
        entry: dict = {"produced": produced}
        for name, config in (("append", append), ("upsert", upsert)):
            print(f"  {phase}: the {name} job ...", flush=True)
            profile = f"{args.profile}/{phase}-{name}" if args.profile else None
            entry[name] = run_job(spark, config, produced["events"], profile)
            if entry[name]["dead_letters"] or entry[name]["failed_tables"]:
                raise RuntimeError(f"{phase}, {name} job: {entry[name]['dead_letters']} dead letters, "
                                   f"{entry[name]['failed_tables']} failed tables")
        entry["upsert_vs_append"] = _ratio(entry["upsert"], entry["append"])
        entry["check"] = {"upsert": check_upsert(upsert.catalog, sources, f"after the {phase}"),
                          "append": check_append(append.catalog, sources, f"after the {phase}")}
        result["phases"][phase] = entry
    result["memory_peak_mb"] = memory.stop()
    result["executor_cores"] = spark.sparkContext.defaultParallelism
    spark.stop()
    both = result["phases"]
    events = sum(p["produced"]["events"] for p in both.values())
    overall = {name: {"events_per_s": round(events / sum(p[name]["seconds"] for p in both.values()))}
               for name in ("append", "upsert")}
    overall["upsert_vs_append"] = _ratio(overall["upsert"], overall["append"])
    result["overall"] = overall
    result["change_events_per_s"] = both["changes"]["upsert"]["events_per_s"]
    result["upsert_vs_append"] = both["changes"]["upsert_vs_append"]
    result["tables_at_end"] = {
        "upsert": table_files(upsert.catalog, [f"{NAMESPACE}.{s.table}" for s in sources]),
        "append": table_files(append.catalog, [f"{APPEND_NAMESPACE}.{s.table}" for s in sources])}
    result["load_after"] = load_average()
    return result
