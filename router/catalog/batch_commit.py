"""The commits of all the tables one task wrote, swapped in one catalog transaction.

A task commits every table it wrote (router/executor/tasks.py commit_here); one
at a time, each table cost a catalog transaction of its own (a round trip and a
log write on PostgreSQL, a write lock and a WAL commit on SQLite). Here each
table's commit is staged as `commit_table`'s first attempt stages it (fresh-
offset check, manifests, manifest list, metadata file) and the compare-and-swaps
of all of them run in one transaction (SqlCatalog.swap_staged): per table on its
own metadata location, so exactly-once is decided per table as before.

Failure stays per table: a table that cannot be staged, whose swap finds that
another committer moved it, or that is an upsert (it locates rows per attempt)
goes through `commit_table` alone, with its own retries and report; the others
are committed all the same. When the transaction itself fails (catalog
unreachable) every staged table goes the same way, its files left in place (the
commit may have landed: `commit_table` then finds its offsets held and skips;
the files of the snapshots it expired are left to orphan removal).
Catalogs other than our SqlCatalog commit table by table, and so does a crash
drill at table commits (router/faults.py: its SIGKILL comes right after the N-th
table commit, with the task's other tables not yet committed).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pyiceberg.table.update import AssertTableUUID

from router.catalog.commit import (
    CommitOutcome, commit_table, due_for_expiry, progress_document, stage_transaction,
)
from router.catalog.merge_small import merge_for
from router.catalog.reachable import delete_expired_files, drop_unlisted_manifests
from router.catalog.tables import get_catalog, load_table
from router.config import CatalogConfig, MaintenanceConfig
from router.faults import crash_point, drilling
from router.ledger import table_ledger


@dataclass
class _Staged:
    index: int
    outcome: CommitOutcome
    table: object
    tx: object
    commit: object  # router.catalog.sql.StagedCommit
    merge: object = None  # router.catalog.merge_small.SmallFileMerge
    expire: tuple = ()  # snapshot ids the staged commit removes


def commit_tables(catalog: CatalogConfig, results: list, job: str, batch_id: int, retries: int = 6,
                  maintenance: MaintenanceConfig | None = None, drill: tuple | None = None,
                  where: str = "driver") -> list[CommitOutcome]:
    """`commit_table` of every result, in order; see the module docstring."""
    outcomes: list[CommitOutcome | None] = [None] * len(results)
    merges = [merge_for(result, maintenance) for result in results]  # kept across a table's attempts
    sql = get_catalog(catalog)
    if len(results) > 1 and hasattr(sql, "swap_staged") and not drilling("commit", drill):
        staged = []
        for i, result in enumerate(results):
            entry = _stage(sql, catalog, i, result, job, batch_id, maintenance, where, merges[i])
            if entry is not None:
                staged.append(entry)
        committed = _swap(sql, catalog, staged)
        for entry in committed:
            outcomes[entry.index] = entry.outcome
            crash_point("commit", drill)
        lost = {entry.index for entry in staged} - {entry.index for entry in committed}
    else:
        lost = set()
    for i, result in enumerate(results):
        if outcomes[i] is None:
            outcomes[i] = commit_table(catalog, result, job, batch_id, retries=retries, maintenance=maintenance,
                                       drill=drill, where=where, merge=merges[i])
            outcomes[i].attempts += i in lost  # the staged attempt that did not land
    return outcomes


def _stage(sql, catalog: CatalogConfig, index: int, result, job: str, batch_id: int,
           maintenance: MaintenanceConfig | None, where: str, merge=None):
    """The table's first attempt staged; None leaves the table to `commit_table` (upserts, results
    the table holds in whole or in part, errors: decided and reported there)."""
    if result.later or result.upsert is not None or not result.has_work:
        return None
    started, cpu, process_cpu = time.perf_counter(), time.thread_time(), time.process_time()
    outcome = CommitOutcome(result.table, "failed", rows=result.rows, files=len(result.data_files), where=where,
                            offsets=dict(result.offsets), attempts=1,
                            bytes=sum(f.file_size_in_bytes for f in result.data_files),
                            oldest_record=result.oldest_ms / 1000 if result.oldest_ms is not None else None)
    try:
        table = load_table(catalog, result.table)
        if not sql.stages_commits(table):
            return None
        ledger = table_ledger(table, job)
        held = ledger.overlap(result.offsets)
        if held is not None:  # all held (skipped) or part (refused): commit_table decides and says why
            return None
        expire = due_for_expiry(table.metadata, maintenance)
        tx = stage_transaction(table, result, job, batch_id, progress_document(ledger, result, batch_id),
                               expire, [], merge)
        requirements = tx._requirements + (AssertTableUUID(uuid=tx.table_metadata.table_uuid),)
        commit = sql.stage_commit(table, requirements, tx._updates)
    except Exception:  # noqa: BLE001 - the table's own commit meets it again and reports it
        _discard(locals().get("tx"))
        return None
    outcome.expired = len(expire)
    outcome.seconds = time.perf_counter() - started  # its own staging; a share of the swap is added
    outcome.cpu_seconds = time.thread_time() - cpu
    outcome.process_cpu_seconds = time.process_time() - process_cpu
    return _Staged(index, outcome, table, tx, commit, merge, tuple(expire))


def _swap(sql, catalog: CatalogConfig, staged: list[_Staged]) -> list[_Staged]:
    """Swap the staged commits together; returns those committed. A lost swap's files are deleted
    and its cached handle refreshed, so `commit_table` starts from where the table stands."""
    if not staged:
        return []
    swap_started, swap_cpu, swap_process = time.perf_counter(), time.thread_time(), time.process_time()
    try:
        swapped = sql.swap_staged([entry.commit for entry in staged])
    except Exception:  # noqa: BLE001 - the outcome is unknown: each table alone, files kept
        return []
    committed = []
    for entry, ok in zip(staged, swapped):
        if not ok:
            sql.forget_staged(entry.commit)
            _discard(entry.tx)
            try:
                load_table(catalog, entry.outcome.table, refresh=True)
            except Exception:  # noqa: BLE001 - gone or unreadable: reported by the table's own commit
                pass
            continue
        base, producers = entry.table.metadata, list(entry.tx._snapshot_producers)
        _finish(sql, entry)
        drop_unlisted_manifests(entry.table, producers)
        if entry.merge is not None:
            entry.merge.finish(True)
            entry.outcome.merged = entry.merge.merged_files
        entry.outcome.status = "committed"
        entry.outcome.snapshot_id = entry.table.metadata.current_snapshot_id
        entry.outcome.committed_at = time.time()
        if entry.expire:
            entry.outcome.expired_files = delete_expired_files(entry.table, base, entry.expire)
        committed.append(entry)
    n = len(staged)
    for entry in committed:
        entry.outcome.seconds += (time.perf_counter() - swap_started) / n
        entry.outcome.cpu_seconds += (time.thread_time() - swap_cpu) / n
        entry.outcome.process_cpu_seconds += (time.process_time() - swap_process) / n
    return committed


def _finish(sql, entry: _Staged) -> None:
    """What pyiceberg does once a table's swap landed (Transaction.commit_transaction, Table._do_commit):
    files of earlier attempts and metadata files past `previous-versions-max` removed, the handle moved."""
    table, commit = entry.table, entry.commit
    table._check_uuid(table.metadata, commit.metadata)
    try:
        sql._delete_old_metadata(table.io, table.metadata, commit.metadata)
    except Exception:  # noqa: BLE001 - left for maintenance, as pyiceberg does
        pass
    table.metadata, table.metadata_location = commit.metadata, commit.location
    entry.tx._cleanup_uncommitted_manifests()
    entry.tx._snapshot_producers, entry.tx._updates, entry.tx._requirements = [], (), ()


def _discard(tx) -> None:
    """Delete the manifests and manifest list a staged transaction wrote for a commit that did not land."""
    for producer in getattr(tx, "_snapshot_producers", ()):
        producer._clean_all_uncommitted()
