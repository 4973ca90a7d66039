"""The foreachBatch function: fan the batch out to executors, finish the commits on the driver.

One Spark pass per batch (`mapInArrow`, or the fused source tasks that already
wrote): executors route, decode, evolve, write files and commit the tables they
wrote (`job.commit_in_tasks`), and return small per-table descriptors. The
driver commits, in parallel threads, whatever a task could not. A table
whose commit fails after all retries is quarantined for this batch: a second,
narrow pass re-reads only its records and dead-letters them with the original
bytes, so nothing is lost and no other table waits. The dead-letter table is
committed last, with the same batch id, so a replay after a crash neither loses
nor duplicates dead letters.
"""

from __future__ import annotations

import functools
import itertools
import logging
import time
from typing import Any, Callable, Sequence

from evolution.backoff import backoff_delay
from router.config import RouterConfig
from router.descriptors import DispatchContext, TableResult, decode_descriptors, descriptor_spark_schema
from router.driver.commits import CommitReport, commit_all
from router.driver.consumer_group import GroupCommitter
from router.driver.fused_stream import redirect_pass
from router.driver.housekeeping import BackgroundMaintenance
from router.driver.metrics import JobMetrics
from router.driver.status import BatchStats, partition_lag, write_status
from router.exceptions import is_transient
from router.progress import next_offsets
from router.faults import drill
from router.catalog.dead_letter_table import ensure_dead_letter_table, replay_counts
from router.executor.fused_reader import write_handoff
from router.executor.tasks import process_partition
from router.routing import RoutingTable
from router.routing.routes import require_no_fan_in_conflict
from router.source.cadence import read_waiting

log = logging.getLogger("icerouter.job")

QUARANTINE_AFTER = 3  # consecutive failing batches before a table is quarantined until restart


def _job_lineage(config: RouterConfig):
    from router.lineage.emitter import JobLineage  # deferred: the openlineage client is an extra

    lineage = JobLineage(config)
    lineage.start()  # before the query starts: START precedes the first batch's events
    return lineage


class Dispatcher:
    """Callable passed to `foreachBatch`; holds driver-side state between batches.

    `fused_options` (the source options JSON) when the source tasks write themselves
    (router/executor/fused_reader.py), with the `handoff_file` they read; `spark`,
    the session the query runs in, for the lag in the batch line and the status file.
    """

    def __init__(self, config: RouterConfig, *, fused_options: str | None = None,
                 handoff_file: str | None = None, spark: Any = None,
                 listeners: Sequence[Callable[[BatchStats], None]] = (), transient_retry_seconds: float = 600.0):
        self.config = config
        require_no_fan_in_conflict(config)  # routes that disagree about a table: refused before any batch
        self.routing = RoutingTable(config.routes, config.tables, config.dlq)
        self.registry = config.registry
        self.policies = config.evolution
        self.compactor = BackgroundMaintenance(config)
        self.transient_retry_seconds = transient_retry_seconds
        self.history: list[BatchStats] = []
        self.totals = {"rows": 0, "dead_letters": 0, "batches": 0}
        self.table_rows: dict[str, int] = {}
        self.listeners = list(listeners)
        self.failure_streak: dict[str, int] = {}
        self.quarantined: dict[str, str] = {}
        self.last_timings: dict = {}
        self.last_ranges: list = []
        self.last_read: dict = {}  # "topic/partition" -> [min, max] of the records the batch read
        # ... and of the offsets it is done with: up to each range's end, past transaction markers (fused read)
        self.last_settled: dict = {}
        self.reached: dict = {}  # "topic/partition" -> the next offset this run's reads got to (backfill lines)
        self.last_outcomes: list = []  # every table commit of the last batch (router.catalog.commit.CommitOutcome)
        self.fused = fused_options
        self.handoff_file = handoff_file
        self.waiting_file: str | None = None  # what the planner holds back (router/source/cadence.py)
        self.spark = spark
        self.last_dead_letters: dict[str, int] = {}  # error class -> rows the last batch dead-lettered
        self.backfills: dict = {}  # table -> what its backfill of this start reads (start_query sets it)
        # Prometheus metrics (router/driver/metrics.py) when job.metrics.port is set; run() serves them
        self.metrics = JobMetrics(config.job.name, lag=lambda: partition_lag(self.spark, config.job.name),
                                  waiting=lambda: read_waiting(self.waiting_file)) \
            if config.job.metrics.port is not None else None
        # the settled offsets in a Kafka consumer group, for Kafka's lag tools (router/driver/consumer_group.py)
        self.group = GroupCommitter(config, on_outcome=self.metrics.observe_group_commit if self.metrics else None) \
            if config.job.commit_consumer_group else None
        # OpenLineage run events (router/lineage/) when lineage.transport is set; sent in the background
        self.lineage = _job_lineage(config) if config.lineage.enabled else None

    def context(self, batch_id: int, redirect: frozenset = frozenset()) -> DispatchContext:
        return DispatchContext.for_config(self.config, batch_id, self.routing, redirect=redirect,
                                          quarantined=frozenset(self.quarantined), drill=drill())

    def run_pass(self, df, ctx: DispatchContext) -> dict[str, TableResult]:
        if ctx.redirect and self.fused is not None:
            rows = redirect_pass(df.sparkSession, self.fused, self.last_ranges, ctx)
        elif self.fused is not None:
            rows = [(r["table"], r["descriptor"]) for r in df.collect()]  # tasks already decoded and wrote
        else:
            fn = functools.partial(process_partition, ctx=ctx)
            rows = [(r["table"], r["descriptor"]) for r in df.mapInArrow(fn, descriptor_spark_schema()).collect()]
        batch = decode_descriptors(rows)
        if not ctx.redirect:
            self.last_timings, self.last_ranges, self.last_read = batch.timings, batch.ranges, batch.read
            self.last_settled = batch.settled()
        return batch.results

    def dispatch_with_retry(self, df, ctx: DispatchContext, stats: BatchStats) -> dict[str, TableResult]:
        deadline = time.monotonic() + self.transient_retry_seconds
        for retry in itertools.count():
            try:
                return self.run_pass(df, ctx)
            except Exception as exc:
                if not is_transient(exc) or time.monotonic() > deadline:
                    raise
                stats.attempts += 1
                delay = backoff_delay(retry, 1.0, 30.0, jitter=False)
                log.warning("batch %s: transient failure, retrying in %.0fs: %s", ctx.batch_id, delay,
                            str(exc).splitlines()[0][:300])
                time.sleep(delay)

    def __call__(self, df, batch_id: int) -> None:
        started = time.perf_counter()
        stats = BatchStats(batch_id)
        results = self.dispatch_with_retry(df, self.context(batch_id), stats)
        stats.dispatch_seconds = time.perf_counter() - started
        stats.records = int(self.last_timings.get("records", 0))
        stats.task_seconds = {k: round(v, 3) for k, v in self.last_timings.items() if k != "records"}
        dlq_table = self.config.dlq.table
        dlq_result = results.pop(dlq_table, None) if dlq_table else None

        t_commit = time.perf_counter()
        # tables the tasks committed already; the driver commits what they left (or everything)
        in_tasks = [o for r in results.values() for o in r.commits]
        report = self.commit_with_outage_retry({t: r for t, r in results.items() if r.has_work}, batch_id)
        report.outcomes = in_tasks + report.outcomes
        failed = {o.table: o.error for o in report.failed}
        failed.update({r.table: r.failure for r in results.values() if r.failure and r.table not in failed})
        commit_failed = frozenset(o.table for o in report.failed)
        if commit_failed:
            log.error("batch %s: quarantining %s for this batch (records go to the DLQ): %s", batch_id,
                      ", ".join(sorted(commit_failed)), "; ".join(f"{o.table}: {o.error}" for o in report.failed))
            redirected = self.dispatch_with_retry(df, self.context(batch_id, redirect=commit_failed), stats)
            extra = redirected.get(dlq_table) if dlq_table else None
            if extra is not None:
                if dlq_result is None:
                    dlq_result = extra
                else:
                    dlq_result.merge(extra)
        if dlq_table:
            # Committed last and every batch: its settled offsets say every record the batch read is
            # now in a table or a dead letter (where a restart without checkpoint may begin).
            dlq_result = dlq_result or TableResult(dlq_table)
            dlq_result.settled = dict(self.last_settled)
            ensure_dead_letter_table(self.config.catalog, dlq_table, self.config.tables.format_version)
            dlq_report = self.commit_with_outage_retry({dlq_table: dlq_result}, batch_id)  # waits out a catalog outage
            if dlq_report.failed:
                # Without the DLQ commit, records would be lost: fail the batch so Spark replays it.
                raise RuntimeError(f"dead-letter table {dlq_table} commit failed: {dlq_report.failed[0].error}")
            report.outcomes += dlq_report.outcomes
            if self.metrics is not None:  # replays run beside the job; the table's commit just refreshed it
                self.metrics.observe_replays(replay_counts(
                    ensure_dead_letter_table(self.config.catalog, dlq_table), self.config.job.name))
            if dlq_report.committed and dlq_result.data_files:
                stats.dead_letters = dlq_result.rows
                self.last_dead_letters = dict(dlq_result.reasons)
        stats.commit_seconds = time.perf_counter() - t_commit
        self.reached = next_offsets(self.reached, self.last_settled)
        if self.group is not None:  # everything the batch read is now in its tables or a dead letter
            self.group.advance(self.last_settled)
            self.group.submit()

        for outcome in report.committed:
            self.table_rows[outcome.table] = self.table_rows.get(outcome.table, 0) + outcome.rows
        self.last_outcomes = report.outcomes
        added: dict[str, int] = {}  # every file a reader now opens: data files and position-delete files
        for o in report.committed:
            added[o.table] = added.get(o.table, 0) + o.files + o.delete_files
        self.compactor.submit(added)
        broken = {o.table: o.error for o in report.failed}
        broken.update({r.table: r.failure for r in results.values() if r.broken and r.table not in broken})
        self.track_failures(broken, {o.table for o in report.committed})
        if self.handoff_file:  # read by the source planner when it plans the next batch's tasks
            write_handoff(self.handoff_file, list(self.quarantined), batch_id + 1)
        stats.tables_committed = len({o.table for o in report.committed if o.table != dlq_table and o.files})
        stats.tables_skipped = len([o for o in report.outcomes if o.status == "skipped"])
        stats.rows_replayed = (sum(r.replayed for r in results.values())
                               + (dlq_result.replayed if dlq_result is not None else 0)
                               + sum(o.rows for o in report.outcomes if o.status == "skipped"))
        stats.tables_failed = len(failed)
        stats.failed_tables = failed
        stats.rows_written = sum(o.rows for o in report.committed if o.table != dlq_table)
        stats.changes = {r.table: r.changes for r in results.values() if r.changes}
        stats.total_seconds = time.perf_counter() - started
        self.record(stats)

    def commit_with_outage_retry(self, results: dict[str, TableResult], batch_id: int) -> CommitReport:
        """Commit every table; while ALL of them fail with catalog connection errors, it is an outage
        of the catalog, not a bad table: wait and retry instead of quarantining everything."""
        job = self.config.job
        report = commit_all(self.config.catalog, results.values(), job.name, batch_id,
                            threads=job.commit_threads, retries=job.commit_retries,
                            maintenance=self.config.maintenance)
        deadline = time.monotonic() + self.transient_retry_seconds
        waits = 0
        while (report.failed and not report.committed and time.monotonic() < deadline
               and all(o.transient for o in report.failed)):
            delay = backoff_delay(waits, 2.0, 30.0, jitter=False)
            waits += 1
            log.warning("batch %s: catalog unreachable (%s); retrying in %.0fs", batch_id,
                        (report.failed[0].error or "")[:200], delay)
            time.sleep(delay)
            retry = commit_all(self.config.catalog, [results[o.table] for o in report.failed], job.name,
                               batch_id, threads=job.commit_threads, retries=job.commit_retries,
                               maintenance=self.config.maintenance)
            done = [o for o in report.outcomes if o.status != "failed"]
            report.outcomes = done + retry.outcomes
        return report

    def track_failures(self, broken: dict[str, str], healthy: set[str]) -> None:
        """Quarantine a table that failed QUARANTINE_AFTER batches in a row (logged once, with the reason)."""
        for table in healthy:
            self.failure_streak.pop(table, None)
        for table, reason in broken.items():
            streak = self.failure_streak[table] = self.failure_streak.get(table, 0) + 1
            if streak >= QUARANTINE_AFTER and table not in self.quarantined:
                self.quarantined[table] = reason
                log.error("table %s quarantined after %d failing batches (%s); its records go to the "
                          "dead-letter table until the job restarts", table, streak, reason)

    def record(self, stats: BatchStats) -> None:
        lags = partition_lag(self.spark, self.config.job.name)
        stats.lag = None if lags is None else sum(lags.values())
        if self.metrics is not None:
            self.metrics.observe_batch(stats, self.last_outcomes, self.last_dead_letters, len(self.quarantined))
        if self.lineage is not None:  # queued only: built and sent by the lineage thread
            self.lineage.batch(stats.batch_id, {o.table for o in self.last_outcomes if o.status == "committed"},
                               {key.rpartition("/")[0] for key in self.last_read}, stats.changes)
        self.last_dead_letters = {}
        self.history.append(stats)
        self.history = self.history[-100:]
        self.totals["rows"] += stats.rows_written
        self.totals["dead_letters"] += stats.dead_letters
        self.totals["batches"] += 1
        log.info(stats.line())
        for table, reason in stats.failed_tables.items():
            log.error("batch %s: table %s failed: %s", stats.batch_id, table, reason)
        for listener in self.listeners:
            listener(stats)
        if self.config.job.status_file:
            write_status(self.config.job.status_file, self.config.job.name, self.totals, stats, self.table_rows,
                         list(self.quarantined), read_waiting(self.waiting_file))
