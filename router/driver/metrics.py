"""Prometheus metrics of the job, served by the driver (``job.metrics.port``; off by default).

Why on the driver: every table's commit outcome (those the tasks made included)
reaches the driver's dispatcher after each batch, with the batch's phase times,
its dead letters by reason and the source's lag per partition. One update per
batch, a few dictionary operations per table: nothing on the record path.

Names follow Prometheus conventions (``_total`` counters, ``_seconds``,
``_bytes``); labels stay bounded: a table label (one per table, fine at 1,000
tables), topic and partition for lag, the dead-letter reason (an error class, a
short fixed list), the batch phase and where a commit ran. No offsets or record
values in labels. Each job serves its own registry, so tests can run several.

Why a server of its own: a scrape at 200 tables renders ~2,000 samples, ~40 ms of the
driver's Python under load. What batches update is rendered once per batch (on the first
scrape after it) and kept; only the families time moves (seconds since last commit, lag)
are rendered per scrape, and the lag is read from Spark at most every
``LAG_REFRESH_SECONDS``. ``_created`` series are not exported (Prometheus ignores
them unless asked; they doubled the counters' output).
"""

from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Iterable, Mapping
from urllib.parse import urlsplit

import prometheus_client
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from router.source.offsets import split_key
from router.version import build_info

log = logging.getLogger("icerouter.metrics")

#: commit durations: from a ~5 ms commit of a small table to a slow catalog
COMMIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: commit time minus record time: seconds-fresh tables to a backlog being read
FRESHNESS_BUCKETS = (0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)
#: the lag is read from Spark again after this long (a read crosses into the JVM); the progress it
#: comes from is posted after each batch, and every 10 s while the query is idle
LAG_REFRESH_SECONDS = 5.0


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _gauge_text(name: str, doc: str, samples: Iterable[tuple[str, float]]) -> str:
    """One gauge family in the text format; ``samples`` are (rendered labels, value)."""
    lines = [f"# HELP {name} {doc}\n# TYPE {name} gauge\n"]
    lines.extend(f"{name}{{{labels}}} {float(value)!r}\n" if labels else f"{name} {float(value)!r}\n"
                 for labels, value in samples)
    return "".join(lines)


class _SinceLastCommit:
    """``icerouter_table_seconds_since_last_commit``: computed at scrape time from the last commit."""

    def __init__(self, last: Mapping[str, float]) -> None:
        self.last = last

    def text(self) -> str:
        now = time.time()
        return _gauge_text("icerouter_table_seconds_since_last_commit",
                           "Seconds since the table's last commit by this job",
                           ((f'table="{_label(table)}"', max(0.0, now - at))
                            for table, at in sorted(self.last.items())))


class _PartitionLag:
    """``icerouter_partition_lag_records``: read from the query's last progress at scrape time, so an
    idle job (no batch to report) still shows where each partition stands."""

    def __init__(self, source: Callable[[], Mapping[str, int] | None]) -> None:
        self.source = source
        self.read_at = float("-inf")  # monotonic time of the cached reading
        self.lag: Mapping[str, int] = {}

    def current(self) -> Mapping[str, int]:
        """The last reading, at most LAG_REFRESH_SECONDS old."""
        now = time.monotonic()
        if now - self.read_at >= LAG_REFRESH_SECONDS:
            self.lag = self.source() or {}
            self.read_at = now
        return self.lag

    def text(self) -> str:
        rows = []
        for key, records in sorted(self.current().items()):
            topic, partition = split_key(key)
            rows.append((f'partition="{partition}",topic="{_label(topic)}"', records))
        return _gauge_text("icerouter_partition_lag_records",
                           "Records between the last batch's end offset (an open backfill's cursor, when it is "
                           "below) and the latest offset", rows)


class _Waiting:
    """``icerouter_table_pending_records`` and ``icerouter_table_oldest_pending_seconds``: what a table
    with a commit cadence (router/source/cadence.py) holds back, as the source's planner last saw it;
    the age is an upper bound (from when its partitions were last read up), computed at scrape time."""

    def __init__(self, source: Callable[[], Mapping[str, dict]]) -> None:
        self.source = source

    def text(self) -> str:
        now, waiting = time.time(), sorted(self.source().items())
        pending = [(f'table="{_label(table)}"', w.get("records", 0)) for table, w in waiting]
        oldest = [(f'table="{_label(table)}"', max(0.0, now - w["since"])) for table, w in waiting
                  if isinstance(w.get("since"), (int, float))]
        return (_gauge_text("icerouter_table_pending_records", "Records a table with a commit cadence "
                            "(commit_after) holds back in Kafka until it is due", pending)
                + _gauge_text("icerouter_table_oldest_pending_seconds", "Upper bound on the age of the oldest "
                              "record a table with a commit cadence holds back", oldest))


class _LeaseHeld:
    """``icerouter_lease_held``: 1 while the job holds its lease, 0 once another process took it."""

    def __init__(self, lease) -> None:
        self.lease = lease

    def text(self) -> str:
        return _gauge_text("icerouter_lease_held", "1 while this job holds its lease (job.lease_seconds), "
                           "0 once another process took it", [("", 0.0 if self.lease.lost.is_set() else 1.0)])


class JobMetrics:
    """The job's metrics; `observe_batch` is called by the dispatcher after each batch."""

    def __init__(self, job: str, registry: CollectorRegistry | None = None,
                 lag: Callable[[], Mapping[str, int] | None] | None = None,
                 waiting: Callable[[], Mapping[str, dict]] | None = None) -> None:
        prometheus_client.disable_created_metrics()
        self.job = job
        self.registry = registry or CollectorRegistry()
        #: families that move with time, rendered on every scrape (the rest once per batch)
        self.live: list = []
        self._rendered: bytes | None = None
        self._lock = threading.Lock()
        r = self.registry
        self.last_commit: dict[str, float] = {}
        self.commit_seconds = Histogram("icerouter_commit_duration_seconds", "Duration of one table's commit",
                                        ["where"], buckets=COMMIT_BUCKETS, registry=r)
        self.rows = Counter("icerouter_rows_committed", "Rows committed to a table", ["table"], registry=r)
        self.files = Counter("icerouter_files_committed", "Files committed to a table (data or position deletes)",
                             ["table", "content"], registry=r)
        self.bytes = Counter("icerouter_bytes_committed", "Bytes of the files committed to a table", ["table"],
                             registry=r)
        self.deleted = Counter("icerouter_rows_deleted", "Rows an upsert table's commits deleted", ["table"],
                               registry=r)
        self.expired_files = Counter("icerouter_expired_files_deleted", "Files only the snapshots a table's commits "
                                     "expired referenced, deleted after those commits", ["table"], registry=r)
        self.failures = Counter("icerouter_commit_failures", "Table commits that failed (after retries)",
                                ["table"], registry=r)
        self.retries = Counter("icerouter_commit_retries", "Commit attempts beyond the first (conflicts)",
                               ["table"], registry=r)
        self.last_commit_time = Gauge("icerouter_table_last_commit_timestamp_seconds",
                                      "Unix time of the table's last commit by this job", ["table"], registry=r)
        self.live.append(_SinceLastCommit(self.last_commit))
        self.freshness = Histogram("icerouter_record_freshness_seconds",
                                   "Commit time minus the Kafka timestamp of the oldest record of each table commit",
                                   buckets=FRESHNESS_BUCKETS, registry=r)
        self.dead_letters = Counter("icerouter_dead_letters", "Rows written to the dead-letter table", ["reason"],
                                    registry=r)
        self.phase = Counter("icerouter_batch_phase_seconds", "Seconds spent per batch phase (task phases summed "
                             "over tasks)", ["phase"], registry=r)
        self.batches = Counter("icerouter_batches", "Micro-batches processed", registry=r)
        self.records = Counter("icerouter_records_read", "Kafka records read", registry=r)
        self.quarantined = Gauge("icerouter_tables_quarantined", "Tables quarantined (records dead-lettered)",
                                 registry=r)
        self.replays = Gauge("icerouter_dead_letter_replays", "What `icerouter dlq replay` runs did, as the "
                             "dead-letter table records it: letters landed, superseded by newer rows, left with a "
                             "new reason (still_failing), and the runs", ["outcome"], registry=r)
        self.group_commits = Counter("icerouter_consumer_group_commits", "Commits of the job's offsets to its "
                                     "Kafka consumer group (monitoring only), by outcome", ["outcome"], registry=r)
        self.info = Gauge("icerouter_job_info", "The job this process runs", ["job"], registry=r)
        self.info.labels(job=job).set(1)
        info = build_info()
        self.build = Gauge("icerouter_build_info", "The icerouter version this job runs, and its engines",
                           sorted(info), registry=r)
        self.build.labels(**info).set(1)
        if lag is not None:
            self.live.append(_PartitionLag(lag))
        if waiting is not None:
            self.live.append(_Waiting(waiting))

    def watch_lease(self, lease) -> None:
        """Export whether the job still holds `lease` (router/catalog/lease.py), read at each scrape."""
        self.live.append(_LeaseHeld(lease))

    def observe_commits(self, outcomes: Iterable) -> None:
        for o in outcomes:
            if o.status == "failed":
                self.failures.labels(table=o.table).inc()
            if o.attempts > 1:
                self.retries.labels(table=o.table).inc(o.attempts - 1)
            if o.status != "committed":
                continue
            self.commit_seconds.labels(where=o.where).observe(o.seconds)
            self.rows.labels(table=o.table).inc(o.rows)
            self.files.labels(table=o.table, content="data").inc(o.files)
            if o.delete_files:
                self.files.labels(table=o.table, content="position_deletes").inc(o.delete_files)
            if o.deleted_rows:
                self.deleted.labels(table=o.table).inc(o.deleted_rows)
            if o.expired_files:
                self.expired_files.labels(table=o.table).inc(o.expired_files)
            self.bytes.labels(table=o.table).inc(o.bytes)
            at = o.committed_at or time.time()
            self.last_commit[o.table] = max(self.last_commit.get(o.table, 0.0), at)
            self.last_commit_time.labels(table=o.table).set(self.last_commit[o.table])
            if o.oldest_record is not None and o.rows:
                self.freshness.observe(max(0.0, at - o.oldest_record))

    def observe_replays(self, counts: Mapping[str, int]) -> None:
        """The dead-letter table's replay counts (router/catalog/dead_letter_table.py), after its commit."""
        for outcome, value in counts.items():
            self.replays.labels(outcome=outcome).set(value)

    def observe_group_commit(self, ok: bool) -> None:
        """A commit to the consumer group (router/driver/consumer_group.py), from its own thread."""
        self.group_commits.labels(outcome="committed" if ok else "failed").inc()
        self._rendered = None

    def observe_batch(self, stats, outcomes: Iterable, dead_letters: Mapping[str, int],
                      quarantined: int = 0) -> None:
        self.batches.inc()
        self.records.inc(stats.records)
        self.observe_commits(outcomes)
        for reason, rows in dead_letters.items():
            self.dead_letters.labels(reason=reason).inc(rows)
        for phase, seconds in (("dispatch", stats.dispatch_seconds), ("commit", stats.commit_seconds),
                               *(("task_" + k, v) for k, v in stats.task_seconds.items())):
            if seconds:
                self.phase.labels(phase=phase).inc(seconds)
        self.quarantined.set(quarantined)
        self._rendered = None  # after every update: a scrape during them rendered a partial batch

    def exposition(self) -> bytes:
        """The text format served at /metrics."""
        with self._lock:  # concurrent scrapes render the batch's families once
            rendered = self._rendered
            if rendered is None:
                rendered = self._rendered = generate_latest(self.registry)
            return rendered + "".join(family.text() for family in self.live).encode()

    def serve(self, port: int, host: str = "0.0.0.0") -> int:
        """Start the HTTP endpoint (a daemon thread); returns the port (0 picks a free one)."""
        server = ThreadingHTTPServer((host, port), _Handler)
        server.daemon_threads = True
        server.metrics = self
        threading.Thread(target=server.serve_forever, name="icerouter-metrics", daemon=True).start()
        bound = self.port = server.server_address[1]
        log.info("metrics: http://%s:%d/metrics", host, bound)
        return bound


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        if urlsplit(self.path).path not in ("/", "/metrics"):
            self.send_error(404)
            return
        body = self.server.metrics.exposition()
        self.send_response(200)
        self.send_header("Content-Type", CONTENT_TYPE_LATEST)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args) -> None:  # scrapes are not worth a log line each
        pass
