"""One atomic, exactly-once commit of one table; run by the tasks and by the driver.

Each table gets one transaction: append of the files the executors wrote (one
new manifest, merged with the earlier ones once enough pile up, see
catalog/tables.py manifest_merge_properties), the offsets it now holds (router/progress.py: table
property and snapshot summary) and, when the expiry rule says so, the removal
of old snapshots.
Exactly-once is decided by offsets, never by Spark batch ids: the executors
already dropped the rows a table held, and the commit re-checks on fresh
metadata; a result the table holds entirely is skipped, one it holds in part is
refused (committing it would write rows twice). Several committers of one table
(fan-in tables written by several tasks, a retried task, a second attempt) are
safe: the catalog's compare-and-swap fails all but one and the loser refreshes,
re-checks and re-appends. We own that retry loop (pyiceberg's own retry
re-applies stale preconditions). A failure is reported, never raised: the
caller (a task, or the driver) decides what happens to the table's rows.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table.update.snapshot import ExpireSnapshots

from router.catalog.expiry import snapshots_to_expire
from router.catalog.sql import StagedTransaction
from router.catalog.tables import backoff, load_table, manifest_merge_properties
from router.config import CatalogConfig, MaintenanceConfig
from router.exceptions import is_transient
from router.faults import crash_point
from router.progress import next_offsets, overlap, property_name, stored_progress


@dataclass
class CommitOutcome:
    table: str
    status: str  # committed | skipped | empty | failed
    rows: int = 0
    files: int = 0
    attempts: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # the committing thread's CPU time: the commit's own cost, apart from the machine's load
    # the process's CPU time meanwhile: adds pyiceberg's manifest writing on its thread pool (in a task the
    # commit is all the process does; on the driver, parallel commits share it)
    process_cpu_seconds: float = 0.0
    snapshot_id: int | None = None
    error: str | None = None
    transient: bool = False  # the error may heal by waiting (catalog unreachable), see router/exceptions.py
    expired: int = 0
    committed_at: float = 0.0  # wall clock (time.time()) when the table's commit became visible
    where: str = "driver"  # driver | task
    offsets: dict = field(default_factory=dict)  # "topic/partition" -> [min, max] this commit covered


def held_already(stored: dict, offsets: dict) -> str | None:
    """None when `offsets` are new to the table, "all" when the table holds all of them, else a reason."""
    held, partial = overlap(stored, offsets)
    if not held and not partial:
        return None
    if held and not partial and len(held) == len(offsets):
        return "all"
    keys = sorted(partial or held)
    return (f"the table already holds part of these rows ({', '.join(keys[:3])}: next offset "
            f"{stored[keys[0]]}, rows from {offsets[keys[0]][0]}); is a second job using this job name?")


def progress_document(previous: dict, result, batch_id: int) -> dict:
    doc = {"batch_id": batch_id, "offsets": next_offsets(previous.get("offsets", {}), result.offsets)}
    if result.settled or previous.get("settled"):
        doc["settled"] = next_offsets(previous.get("settled", {}), result.settled)
    return doc


def missing_merge_settings(identifier: str, properties: dict) -> dict:
    """Manifest merge settings a table lacks (tables made before they were defaults); its own win."""
    return {k: v for k, v in manifest_merge_properties(identifier).items() if k not in properties}


def due_for_expiry(metadata, maintenance: MaintenanceConfig | None) -> list[int]:
    """Snapshots to remove in this commit: once `expire_every_commits` are expirable, all of them.

    Decided from the table's own metadata (not a per-process counter), so it is
    the same rule whichever task or driver thread commits the table.
    """
    if maintenance is None:
        return []
    ids = snapshots_to_expire(metadata, maintenance.retain_last_snapshots, maintenance.max_snapshot_age_seconds)
    return ids if len(ids) >= maintenance.expire_every_commits else []


def commit_table(catalog: CatalogConfig, result, job: str, batch_id: int, retries: int = 6,
                 maintenance: MaintenanceConfig | None = None, drill: tuple[str, int] | None = None,
                 where: str = "driver") -> CommitOutcome:
    """Commit one `TableResult` (router/descriptors.py); see the module docstring."""
    started, cpu_started, process_started = time.perf_counter(), time.thread_time(), time.process_time()
    outcome = CommitOutcome(result.table, "failed", rows=result.rows, files=len(result.data_files), where=where,
                            offsets=dict(result.offsets))
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
                held = held_already(previous.get("offsets", {}), result.offsets)
                if held == "all":
                    outcome.status = "skipped"
                    break
                if held is not None:
                    last_error = RuntimeError(held)
                    break
            doc = progress_document(previous, result, batch_id)
            expire = due_for_expiry(table.metadata, maintenance)
            with StagedTransaction(table) as tx:
                if not result.data_files:  # the dead-letter table's settled offsets move every batch
                    doc["at_snapshot"] = table.metadata.current_snapshot_id
                # set first: the append reads the manifest merge settings from the staged properties
                tx.set_properties({**missing_merge_settings(result.table, table.metadata.properties),
                                   prop: json.dumps(doc)})
                if result.data_files:
                    summary = {"icerouter.job": job, "icerouter.batch-id": str(batch_id), prop: json.dumps(doc)}
                    with tx.update_snapshot(snapshot_properties=summary).merge_append() as append:
                        for data_file in result.data_files:
                            append.append_data_file(data_file)
                if expire:
                    ExpireSnapshots(tx).by_ids(expire).commit()
            # the committed transaction updated `table` in place (no extra catalog round trip)
            outcome.status = "committed"
            outcome.snapshot_id = table.metadata.current_snapshot_id
            outcome.expired = len(expire)
            outcome.committed_at = time.time()
            crash_point("commit", drill)
            break
        except NoSuchTableError as exc:
            last_error = exc
            break
        except CommitFailedException as exc:
            last_error = exc
        except Exception as exc:  # catalog unreachable, I/O errors: retry, then report
            last_error = exc
        if attempt < retries and not (attempt == 0 and isinstance(last_error, CommitFailedException)):
            # a first lost swap means another committer just landed: refresh and go again at once;
            # repeated losses (several committers of one table) and failures back off
            backoff(attempt, base=0.1, cap=8.0)
    if outcome.status == "failed":
        outcome.error = f"{type(last_error).__name__}: {last_error}"
        outcome.transient = is_transient(last_error)
    outcome.seconds = time.perf_counter() - started
    outcome.cpu_seconds = time.thread_time() - cpu_started
    outcome.process_cpu_seconds = time.process_time() - process_started
    return outcome
