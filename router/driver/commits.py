"""Driver side: one atomic commit per table, in parallel, exactly once.

Each table gets one transaction: fast append of the files the executors wrote
plus the offsets it now holds (router/progress.py: table property and snapshot
summary). Exactly-once is decided by offsets, never by Spark batch ids: the
executors already dropped the rows a table held, and the commit re-checks on
fresh metadata; a result the table holds entirely is skipped, one it holds in
part is refused (committing it would write rows twice). We own the retry loop
(pyiceberg's own retry re-applies stale preconditions): refresh, re-check,
re-append, jittered backoff. A table that still fails is reported, never
raised: the other tables of the batch commit regardless.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

from router.catalog import backoff, load_table
from router.config import CatalogConfig
from router.descriptors import TableResult
from router.driver.faults import crash_point
from router.exceptions import is_transient
from router.progress import next_offsets, overlap, property_name, stored_progress

log = logging.getLogger("icerouter.commit")


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
    transient: bool = False  # the error may heal by waiting (catalog unreachable), see router/exceptions.py
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


def held_already(stored: dict, result: TableResult) -> str | None:
    """None when the result is new to the table, "all" when the table holds all of it, else a reason."""
    held, partial = overlap(stored, result.offsets)
    if not held and not partial:
        return None
    if held and not partial and len(held) == len(result.offsets):
        return "all"
    keys = sorted(partial or held)
    return (f"the table already holds part of these rows ({', '.join(keys[:3])}: next offset "
            f"{stored[keys[0]]}, rows from {result.offsets[keys[0]][0]}); is a second job using this job name?")


def progress_document(previous: dict, result: TableResult, batch_id: int) -> dict:
    doc = {"batch_id": batch_id, "offsets": next_offsets(previous.get("offsets", {}), result.offsets)}
    if result.settled or previous.get("settled"):
        doc["settled"] = next_offsets(previous.get("settled", {}), result.settled)
    return doc


def commit_table(catalog: CatalogConfig, result: TableResult, job: str, batch_id: int,
                 retries: int = 6) -> CommitOutcome:
    started = time.perf_counter()
    outcome = CommitOutcome(result.table, "failed", rows=result.rows, files=len(result.data_files))
    if not result.data_files and not result.settled:
        outcome.status = "empty"
        return outcome
    prop = property_name(job)
    last_error: Exception | None = None
    for attempt in range(retries + 1):
        outcome.attempts = attempt + 1
        try:
            table = load_table(catalog, result.table, refresh=attempt > 0)
            previous = stored_progress(table, job)
            if result.data_files:
                held = held_already(previous.get("offsets", {}), result)
                if held == "all":
                    outcome.status = "skipped"
                    break
                if held is not None:
                    last_error = RuntimeError(held)
                    break
            doc = progress_document(previous, result, batch_id)
            with table.transaction() as tx:
                if result.data_files:
                    summary = {"icerouter.job": job, "icerouter.batch-id": str(batch_id), prop: json.dumps(doc)}
                    with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                        for data_file in result.data_files:
                            append.append_data_file(data_file)
                else:  # the dead-letter table's settled offsets move every batch, with or without letters
                    doc["at_snapshot"] = table.metadata.current_snapshot_id
                tx.set_properties({prop: json.dumps(doc)})
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
        outcome.transient = is_transient(last_error)
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
