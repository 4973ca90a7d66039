"""Driver side: one atomic commit per table, in parallel, exactly once.

Each table gets one transaction: fast append of the files the executors wrote
plus the table property ``icerouter.offsets.<job>`` holding the batch id and
the next Kafka offsets it covers. On replay (same batch id after a crash), a
table whose stored batch id is >= the current one is skipped, so every table
commits each batch exactly once. We own the retry loop (pyiceberg's own retry
re-applies stale preconditions): refresh, re-check the batch id, re-append,
jittered backoff. A table that still fails is reported, never raised: the other
tables of the batch commit regardless.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

from router.config import CatalogConfig, MaintenanceConfig
from router.faults import crash_point
from router.tables import backoff, load_table
from router.writer import TableResult

log = logging.getLogger("icerouter.commit")

OFFSETS_PROPERTY = "icerouter.offsets.{job}"


@dataclass
class CommitOutcome:
    table: str
    status: str  # committed | skipped | empty | failed
    rows: int = 0
    files: int = 0
    attempts: int = 0
    seconds: float = 0.0
    snapshot_id: int | None = None
    error: str | None = None
    expired: int = 0


@dataclass
class CommitReport:
    outcomes: list[CommitOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[CommitOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def committed(self) -> list[CommitOutcome]:
        return [o for o in self.outcomes if o.status == "committed"]


def stored_progress(table, job: str) -> dict:
    raw = table.properties.get(OFFSETS_PROPERTY.format(job=job))
    if not raw:
        return {"batch_id": -1, "offsets": {}}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {"batch_id": -1, "offsets": {}}


def next_offsets(previous: dict, covered: dict) -> dict:
    """Merge the offsets a batch covered ({tp: [min, max]}) into {tp: next_offset}."""
    merged = dict(previous)
    for key, (_, hi) in covered.items():
        merged[key] = max(merged.get(key, 0), hi + 1)
    return dict(sorted(merged.items()))


def commit_table(catalog: CatalogConfig, result: TableResult, job: str, batch_id: int,
                 retries: int = 6) -> CommitOutcome:
    started = time.perf_counter()
    outcome = CommitOutcome(result.table, "failed", rows=result.rows, files=len(result.data_files))
    if not result.data_files:
        outcome.status = "empty"
        return outcome
    prop = OFFSETS_PROPERTY.format(job=job)
    last_error: Exception | None = None
    for attempt in range(retries + 1):
        outcome.attempts = attempt + 1
        try:
            table = load_table(catalog, result.table, refresh=attempt > 0)
            progress = stored_progress(table, job)
            if progress.get("batch_id", -1) >= batch_id:
                outcome.status = "skipped"
                break
            value = json.dumps({"batch_id": batch_id, "offsets": next_offsets(progress.get("offsets", {}),
                                                                              result.offsets)})
            summary = {"icerouter.job": job, "icerouter.batch-id": str(batch_id)}
            with table.transaction() as tx:
                with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for data_file in result.data_files:
                        append.append_data_file(data_file)
                tx.set_properties({prop: value})
            # the committed transaction updated `table` in place (no extra catalog round trip)
            outcome.status = "committed"
            outcome.snapshot_id = table.metadata.current_snapshot_id
            crash_point("commit")
            break
        except NoSuchTableError as exc:
            last_error = exc
            break
        except CommitFailedException as exc:
            last_error = exc
        except Exception as exc:  # catalog unreachable, I/O errors: retry, then report
            last_error = exc
        if attempt < retries:
            backoff(attempt, base=0.1, cap=8.0)
    if outcome.status == "failed":
        outcome.error = f"{type(last_error).__name__}: {last_error}"
    outcome.seconds = time.perf_counter() - started
    return outcome


def commit_all(catalog: CatalogConfig, results: Iterable[TableResult], job: str, batch_id: int,
               threads: int = 8, retries: int = 6) -> CommitReport:
    results = list(results)
    report = CommitReport()
    if not results:
        return report
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(results))),
                            thread_name_prefix="icerouter-commit") as pool:
        futures = [pool.submit(commit_table, catalog, r, job, batch_id, retries) for r in results]
        report.outcomes = [f.result() for f in futures]
    return report


class SnapshotExpirer:
    """Expire old snapshots every N commits of a table so commit latency stays flat."""

    def __init__(self, catalog: CatalogConfig, config: MaintenanceConfig):
        self.catalog, self.config = catalog, config
        self.commits: dict[str, int] = {}

    def after_commit(self, outcome: CommitOutcome) -> None:
        if outcome.status != "committed":
            return
        count = self.commits[outcome.table] = self.commits.get(outcome.table, 0) + 1
        if count % self.config.expire_every_commits == 0:
            try:
                outcome.expired = expire_snapshots(load_table(self.catalog, outcome.table, refresh=True),
                                                   self.config.retain_last_snapshots,
                                                   self.config.max_snapshot_age_seconds)
            except Exception as exc:  # maintenance must never fail ingestion
                log.warning("snapshot expiry failed for %s: %s", outcome.table, exc)


def expire_snapshots(table, retain_last: int, max_age_seconds: int) -> int:
    """Expire snapshots older than max_age, always keeping the newest `retain_last`."""
    snapshots = sorted(table.metadata.snapshots, key=lambda s: s.timestamp_ms)
    keep = {s.snapshot_id for s in snapshots[-retain_last:]}
    if table.metadata.current_snapshot_id is not None:
        keep.add(table.metadata.current_snapshot_id)
    keep |= {ref.snapshot_id for ref in table.metadata.refs.values()}  # branch heads and tags
    cutoff = (time.time() - max_age_seconds) * 1000
    expired = [s.snapshot_id for s in snapshots if s.snapshot_id not in keep and s.timestamp_ms < cutoff]
    if expired:
        table.maintenance.expire_snapshots().by_ids(expired).commit()
    return len(expired)
