"""`icerouter status`: the job's state read from its tables and the broker, without Spark.

Why: an operator (or a cron check) must see how far behind a job is, whether it runs and what
it dead-lettered without starting Spark or scraping a driver that may be down. Everything here
comes from where the job keeps its truth: each table's offsets document (router/progress.py),
the dead-letter table's settled offsets, the lease table (router/catalog/lease.py), the broker's
end offsets; quarantined tables from the running driver's hand-off file and status file.

Lag of a partition: the broker's end offset (read_committed: the last stable offset) minus the
job's next offset there. That is the job's read position, the dead-letter table's settled offset
(every record below it is in its tables or a dead letter; past transaction markers), or without a
dead-letter table the lowest next offset of the tables that hold the partition; lower when a
backfill or rewind still has records of the partition to read (the lowest position of the tables
in one); a partition the job never read lags by all it holds (end minus earliest offset).
The consumer group (router/driver/consumer_group.py) shows the read position (`settled`): it does
not move back for a backfill. A table's own lag: end minus its position, the job's read position
where it is up to date, its own next offset where a backfill of it is open. The arithmetic and
what counts as a table's rows: router/operations/lag.py.
"""

from __future__ import annotations

import glob
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field

from router.catalog.lease import lease_table, read_lease
from router.catalog.progress_views import table_views
from router.config import RouterConfig
from router.exceptions import ServiceUnavailable
from router.masking import mask_url
from router.ledger import Ledger, table_ledger
from router.operations.lag import live_rows, open_backfills, settled_offsets
from router.operations.letters import Selection, read_letters, summarize
from router.routing import RoutingTable
from router.source.offsets import tp_key

#: seconds the broker may take to answer each request before `status` calls it unreachable
BROKER_TIMEOUT = 10.0


@dataclass
class TableState:
    table: str
    last_commit: float | None = None  # unix time of the table's current snapshot
    rows: int | None = None
    data_files: int | None = None
    delete_files: int | None = None
    batch_id: int | None = None  # the job's last batch committed to it (None: never)
    next_offsets: dict = field(default_factory=dict)  # "topic/partition" -> next offset the table expects
    lag: dict = field(default_factory=dict)  # "topic/partition" -> broker end offset minus the table's position
    backfill: dict = field(default_factory=dict)  # "topic/partition" -> records its open backfill has to read
    replayed: dict = field(default_factory=dict)  # "topic/partition" -> [[lo, hi], ...] `dlq replay` wrote
    # a table with a commit cadence (commit_after): records its unread partitions hold and the upper
    # bound on the age of the oldest, as the running job's planner last saw them (None: not waiting)
    waiting: dict | None = None


@dataclass
class JobState:
    job: str
    catalog: str
    bootstrap: str
    checked_at: float
    tables: list = field(default_factory=list)  # TableState, by name
    # "topic/partition" -> {"end", "next", "settled", "lag"}: "settled" the job's read position (the
    # consumer group's), "next" the lowest position of it and any open backfill; None: never read
    # (lag: all the partition holds)
    partitions: dict = field(default_factory=dict)
    lease: dict | None = None  # {"holder", "host", "pid", "expires", "expired"}; None: not held
    quarantined: list = field(default_factory=list)
    dead_letters: dict = field(default_factory=dict)  # letters.summarize() of every letter held

    @property
    def total_lag(self) -> int:
        return sum(p["lag"] for p in self.partitions.values())

    @property
    def max_lag(self) -> int:
        return max((p["lag"] for p in self.partitions.values()), default=0)

    def to_json(self) -> dict:
        return {**asdict(self), "total_lag": self.total_lag, "max_partition_lag": self.max_lag}


def _catalog_unreachable(config: RouterConfig, exc: BaseException) -> ServiceUnavailable:
    from router.planning.services import CatalogReader

    return CatalogReader._unavailable(config.catalog.url, config.catalog.name, exc)


def broker_offsets(config: RouterConfig, timeout: float = BROKER_TIMEOUT) -> tuple[dict[str, int], dict[str, int]]:
    """("topic/partition" -> earliest offset, -> end offset) of every partition of the subscription
    (read_committed by default, as the job reads); ServiceUnavailable naming the bootstrap servers
    when they do not answer."""
    from confluent_kafka import KafkaException, TopicPartition
    from confluent_kafka.admin import AdminClient, OffsetSpec

    from router.source.metadata import ISOLATION, admin_config
    from router.source.options import source_options

    options = source_options(config)
    where = mask_url(config.kafka.bootstrap_servers)
    try:
        # librdkafka's own log lines would precede the one-line error: it is silenced here
        admin = AdminClient({**admin_config(options), "log_level": "0"})
        metadata = admin.list_topics(timeout=timeout)
        partitions = sorted((name, p) for name, topic in metadata.topics.items()
                            if options.matches(name) and topic.error is None for p in topic.partitions)
        if not partitions:
            return {}, {}
        level = ISOLATION[options.client_config.get("isolation.level", "read_committed")]
        out = []
        for spec in (OffsetSpec.earliest, OffsetSpec.latest):
            futures = admin.list_offsets({TopicPartition(t, p): spec() for t, p in partitions},
                                         isolation_level=level, request_timeout=timeout)
            out.append({tp_key(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()})
        return out[0], out[1]
    except KafkaException as exc:
        raise ServiceUnavailable(f"could not reach the Kafka brokers at {where}: {exc.args[0] if exc.args else exc}",
                                 service="Kafka", url=where) from None


def job_tables(config: RouterConfig, topics: list[str]) -> list[str]:
    """The tables the routes name for `topics`, and every table of the allowed namespaces (all
    namespaces when none) that may hold the job's offsets (routes named by data)."""
    from router.driver.resume import job_tables

    routing = RoutingTable(config.routes, config.tables, config.dlq)
    named = [t for topic in topics for _, t in routing.static_tables_for_topic(topic) if t is not None]
    return sorted(t for t in dict.fromkeys(named + job_tables(config)) if t != config.dlq.table)


def _summary_int(snapshot, key: str) -> int | None:
    value = (snapshot.summary.additional_properties if snapshot and snapshot.summary else {}).get(key)
    return int(value) if value is not None else None


def table_state(name: str, view, job: str, ends: dict[str, int], settled: dict[str, int] | None = None,
                backfill: dict[str, int] | None = None) -> TableState:
    """`view`: a TableView (router/catalog/progress_views.py), from other catalogs a pyiceberg Table,
    None for a table a backfill is to create. `settled`: the job's read position per partition;
    `backfill`: "topic/partition" -> where an open backfill of the table starts (router/operations/lag.py)."""
    metadata = view.metadata if view is not None else None
    ledger = table_ledger(view, job) if view is not None else Ledger()
    snapshot = next((s for s in metadata.snapshots if s.snapshot_id == metadata.current_snapshot_id), None) \
        if metadata is not None else None
    stamp = getattr(snapshot, "timestamp_ms", None) if snapshot is not None else None
    offsets = ledger.positions()  # the job's next offsets, carried on through what replays put there
    backfill, settled = backfill or {}, settled or {}
    position = {key: max(nxt, settled.get(key, nxt)) for key, nxt in offsets.items()}
    position.update({key: max(offsets.get(key, begin), begin) for key, begin in backfill.items()})
    return TableState(
        table=name, last_commit=stamp / 1000 if stamp is not None else None,
        rows=_summary_int(snapshot, "total-records") if snapshot else 0,
        data_files=_summary_int(snapshot, "total-data-files") if snapshot else 0,
        delete_files=_summary_int(snapshot, "total-delete-files") if snapshot else 0,
        batch_id=ledger.batch_id if ledger.batch_id >= 0 else None,
        next_offsets=offsets,
        lag={key: max(0, ends[key] - at) for key, at in sorted(position.items()) if key in ends},
        backfill={key: max(0, ends[key] - position[key]) for key in sorted(backfill) if key in ends},
        replayed=ledger.replayed)


def _driver_files(config: RouterConfig, kind: str) -> list[dict]:
    """The running driver's files of `kind` beside a local checkpoint (router/driver/job.py
    handoff_path), of live processes only."""
    checkpoint = config.job.checkpoint
    if "://" in checkpoint and not checkpoint.startswith("file:"):
        return []
    root = checkpoint.removeprefix("file://").removeprefix("file:")
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", config.job.name)
    out = []
    for path in glob.glob(os.path.join(root, "icerouter", f"icerouter-{safe}-*.{kind}.json")):
        pid = path.rsplit("-", 1)[1].split(".", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            out.append(_json(path))
    return out


def quarantined_tables(config: RouterConfig, running: bool = True) -> list[str]:
    """Tables the running driver quarantined: its hand-off file beside a local checkpoint (a live
    process's), and the status file (`job.status_file`) unless the job is known stopped (`running`
    False: no live lease), since a restart clears the quarantine."""
    found: set[str] = set()
    for doc in _driver_files(config, "handoff"):
        found |= set(doc.get("quarantined", ()))
    if config.job.status_file and running:
        found |= set(_json(config.job.status_file).get("quarantined", ()))
    return sorted(found)


def waiting_tables(config: RouterConfig) -> dict[str, dict]:
    """What the running job's tables with a commit cadence hold back (router/source/cadence.py), as
    its source's planner last wrote it: {table: {"records", "since", "due"}}."""
    found: dict[str, dict] = {}
    for doc in _driver_files(config, "waiting"):
        tables = doc.get("tables")
        found.update(tables if isinstance(tables, dict) else {})
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _json(path: str) -> dict:
    try:
        with open(path) as fh:
            doc = json.load(fh)
        return doc if isinstance(doc, dict) else {}
    except (OSError, ValueError):
        return {}


def _lease(config: RouterConfig, now: float) -> dict | None:
    doc = read_lease(config.catalog, lease_table(config), config.job.name)
    if doc is None:
        return None
    expires = doc.get("expires")
    return {"holder": doc.get("owner"), "host": doc.get("host"), "pid": doc.get("pid"),
            "renewed": doc.get("renewed"), "expires": expires,
            "expired": not isinstance(expires, (int, float)) or expires <= now}


def _table_states(config: RouterConfig, tables: list[str], views: dict, settled: dict | None,
                  backfills: dict[str, dict[str, int]], ends: dict[str, int]) -> list[TableState]:
    """Every table the job wrote, a replay wrote, or an open backfill is to write (by name)."""
    out = []
    for name in sorted(set(tables) | set(backfills)):
        view = views.get(name)
        if view is None and name not in backfills:
            continue
        table = table_state(name, view, config.job.name, ends, settled, backfills.get(name))
        if table.batch_id is not None or table.next_offsets or table.replayed or table.backfill:
            table.rows = live_rows(config, name, table.rows, table.delete_files) if view is not None else None
            out.append(table)
    return out


def job_state(config: RouterConfig, now: float | None = None) -> JobState:
    """The job's state as the catalog and the broker have it now; ServiceUnavailable (exit 3) when
    either does not answer."""
    now = time.time() if now is None else now
    earliest, ends = broker_offsets(config)
    from router.planning.services import CatalogReader

    CatalogReader.open(config.catalog)  # as it is: one that does not exist is exit 3, never created
    state = JobState(config.job.name, config.catalog.url, mask_url(config.kafka.bootstrap_servers), now)
    topics = sorted({key.rsplit("/", 1)[0] for key in ends})
    try:
        tables = job_tables(config, topics)
        wanted = tables + ([config.dlq.table] if config.dlq.table else [])
        views = table_views(config.catalog, wanted)
        state.lease = _lease(config, now) if config.job.lease_seconds else None
        letters = read_letters(config.catalog, config.dlq.table, Selection(job=config.job.name),
                               columns=("error_class", "table_name", "topic", "failed_at")) \
            if config.dlq.table else None
        settled = settled_offsets(views.get(config.dlq.table), config.job.name) if config.dlq.table else None
        state.tables = _table_states(config, tables, views, settled, open_backfills(config, earliest, ends), ends)
    except ServiceUnavailable:
        raise
    except Exception as exc:
        from router.planning.services import unreachable

        if unreachable(exc):
            raise _catalog_unreachable(config, exc) from None
        raise
    for key, end in sorted(ends.items()):
        held = [t.next_offsets[key] for t in state.tables if key in t.next_offsets]
        read = settled.get(key) if settled is not None and key in settled else (min(held) if held else None)
        # the positions of the tables an open backfill of the partition is for
        behind = [end - t.backfill[key] for t in state.tables if key in t.backfill]
        positions = ([] if read is None else [read]) + behind
        nxt = min(positions) if positions else None
        # a partition the job never read is behind by all it holds (the job reads a new one from its start)
        lag = max(0, end - (nxt if nxt is not None else earliest.get(key, 0)))
        state.partitions[key] = {"end": end, "next": nxt, "settled": read, "lag": lag}
    running = not config.job.lease_seconds or (state.lease is not None and not state.lease["expired"])
    state.quarantined = quarantined_tables(config, running)
    if running:
        waiting = waiting_tables(config)
        for table in state.tables:
            w = waiting.get(table.table)
            if w:
                since = w.get("since")
                table.waiting = {"records": w.get("records", 0), "due": bool(w.get("due")),
                                 "oldest_seconds": round(max(0.0, now - since), 1)
                                 if isinstance(since, (int, float)) else None}
    state.dead_letters = summarize(letters) if letters is not None else {}
    return state


def breaches(state: JobState, max_lag: int | None = None, max_dead_letters: int | None = None,
             max_quarantined: int | None = None, require_lease: bool = False) -> list[str]:
    """What is over the thresholds the operator passed (empty: healthy)."""
    out = []
    if max_lag is not None:
        over = {k: p["lag"] for k, p in state.partitions.items() if p["lag"] > max_lag}
        if over:
            worst = max(over, key=over.get)
            out.append(f"lag over {max_lag} on {len(over)} partition(s) (worst {worst}: {over[worst]})")
    letters = state.dead_letters.get("total", 0)
    if max_dead_letters is not None and letters > max_dead_letters:
        out.append(f"{letters} dead letters held (over {max_dead_letters})")
    if max_quarantined is not None and len(state.quarantined) > max_quarantined:
        out.append(f"{len(state.quarantined)} table(s) quarantined: {', '.join(state.quarantined)}")
    if require_lease and (state.lease is None or state.lease["expired"]):
        out.append(f"job {state.job} is not running (no live lease)")
    return out


def _when(stamp: float | None, now: float) -> str:
    if stamp is None:
        return "-"
    at = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp))
    return f"{at} UTC ({max(0.0, now - stamp):.0f} s ago)"


def format_text(state: JobState, problems: list[str]) -> str:
    now = state.checked_at
    lines = [f"job {state.job}  catalog {state.catalog}  brokers {state.bootstrap}"]
    lease = state.lease
    if lease is None:
        lines.append("lease: not held (the job is not running, or its lease is off)")
    else:
        verb = "expired" if lease["expired"] else "expires"
        lines.append(f"lease: pid {lease['pid']} on {lease['host']}, {verb} "
                     f"{_when(lease['expires'], now).split(' (')[0]} ({(lease['expires'] or now) - now:+.0f} s)")
    lines.append(f"lag: {state.total_lag:,} records over {len(state.partitions)} partitions "
                 f"(max {state.max_lag:,} on one)")
    for key, p in state.partitions.items():
        if p["next"] is None:
            lines.append(f"  {key}: end {p['end']}, never read, lag {p['lag']:,}")
        elif p["lag"]:
            behind = "" if p.get("settled") in (None, p["next"]) else f" (read to {p['settled']}, a backfill behind)"
            lines.append(f"  {key}: end {p['end']}, next {p['next']}{behind}, lag {p['lag']:,}")
    lines.append(f"tables: {len(state.tables)}")
    for t in state.tables:
        lag, backfill = sum(t.lag.values()), sum(t.backfill.values())
        extra = (f" ({backfill:,} of them a backfill has to read)" if backfill else "") + (
            f", {sum(hi - lo + 1 for runs in t.replayed.values() for lo, hi in runs):,} offsets replayed"
            if t.replayed else "")
        if t.waiting:
            age = t.waiting["oldest_seconds"]
            extra += (f", {t.waiting['records']:,} records waiting for its commit_after"
                      + ("" if age is None else f" (oldest at most {age:.0f} s old)")
                      + (", due" if t.waiting["due"] else ""))
        lines.append(f"  {t.table}: {'-' if t.rows is None else t.rows} rows, {t.data_files} data files, "
                     f"{t.delete_files} delete files, last commit {_when(t.last_commit, now)}, batch {t.batch_id}, "
                     f"lag {lag:,}{extra}")
    lines.append(f"quarantined: {', '.join(state.quarantined) if state.quarantined else 'none'}")
    letters = state.dead_letters
    if letters:
        by_reason = ", ".join(f"{r} {n}" for r, n in letters["by_reason"].items()) or "none"
        lines.append(f"dead letters: {letters['total']} ({by_reason})")
    for problem in problems:
        lines.append(f"UNHEALTHY: {problem}")
    if not problems:
        lines.append("healthy")
    return "\n".join(lines)


def status_command(config: RouterConfig, fmt: str = "text", **thresholds) -> tuple[str, list[str]]:
    """(output, problems): the CLI prints the output and exits 1 when there are problems."""
    state = job_state(config)
    problems = breaches(state, **thresholds)
    if fmt == "json":
        return json.dumps({**state.to_json(), "healthy": not problems, "problems": problems},
                          indent=1, sort_keys=True, default=str), problems
    return format_text(state, problems), problems
