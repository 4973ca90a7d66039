"""One atomic, exactly-once commit of one table; run by the tasks and by the driver.

Each table gets one transaction: append of the files the executors wrote (one
new manifest, merged with the earlier ones once enough pile up, see
catalog/tables.py manifest_merge_properties), the offsets it now holds (router/progress.py: table
property and snapshot summary) and, when the expiry rule says so, the removal
of old snapshots; once that commit is known to have landed, the files only the
removed snapshots referenced are deleted (catalog/reachable.py).
Exactly-once is decided by offsets, never by Spark batch ids: the executors
already dropped the rows a table held, and the commit re-checks on fresh
metadata; a result the table holds entirely is skipped, one it holds in part is
refused (committing it would write rows twice). Several committers of one table
(fan-in tables written by several tasks, a retried task, a second attempt) are
safe: the catalog's compare-and-swap fails all but one and the loser refreshes,
re-checks and re-appends. We own that retry loop (pyiceberg's own retry
re-applies stale preconditions). A failure is reported, never raised: the
caller (a task, or the driver) decides what happens to the table's rows.

Upsert tables (a result with `upsert`): the attempt locates the live rows of
the changed keys on the snapshot it builds on, writes their position deletes
and commits them with the new images and the offsets in one row-delta snapshot.
Two committers of one table in a batch (fan-in from several tasks, a retried
task) are safe because positions are never carried across attempts: a lost
compare-and-swap deletes the attempt's delete files and locates again on the
refreshed table, so a row another committer just wrote is found and replaced
(the last commit's image stays; parts of several tasks that reach the driver
commit in turn, one snapshot each).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field, replace

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.table.update.snapshot import ExpireSnapshots

from router.catalog.deletes import write_position_deletes
from router.catalog.deletion_vectors import write_deletion_vectors
from router.catalog.expiry import snapshots_to_expire
from router.catalog.locate import locate_keys
from router.catalog.sequence import rows_of_keys, stale_keys
from router.catalog.merge_small import merge_for
from router.catalog.reachable import delete_expired_files, drop_unlisted_manifests
from router.catalog.row_delta import row_delta
from router.catalog.snapshot_files import snapshot_files, split_by_path
from router.catalog.sql import StagedTransaction
from router.catalog.tables import backoff, delete_quietly, load_table, manifest_merge_properties
from router.config import CatalogConfig, MaintenanceConfig
from router.exceptions import RowLevelError, is_transient
from router.faults import crash_point
from router.ledger import Ledger, property_document, table_ledger
from router.progress import next_offsets, property_name, widen


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
    deleted_rows: int = 0  # upsert tables: rows this commit deleted (replaced or removed keys)
    delete_files: int = 0  # upsert tables: delete files this commit added (v3: its one Puffin file of vectors)
    bytes: int = 0  # data and delete files' bytes this commit added
    merged: int = 0  # small data files merged into one in this commit's snapshot (catalog/merge_small.py)
    expired_files: int = 0  # files only the snapshots this commit expired referenced, deleted (catalog/reachable.py)
    oldest_record: float | None = None  # the oldest written record's Kafka timestamp (epoch seconds)
    offsets: dict = field(default_factory=dict)  # "topic/partition" -> [min, max] this commit covered


def progress_document(ledger: Ledger, result, batch_id: int) -> dict:
    """The job's offsets document after this commit (router/ledger.py; the dead-letter table's
    settled offsets too)."""
    doc = ledger.advance(result.offsets, batch_id, result.read_ms)
    if result.settled or ledger.doc.get("settled"):
        doc["settled"] = next_offsets(ledger.doc.get("settled", {}), result.settled)
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


def stage_transaction(table, result, job: str, batch_id: int, doc: dict, expire: list[int],
                      deletes: list, merge=None) -> StagedTransaction:
    """The table's commit of `result` staged (files written, nothing committed): the job's offsets
    in a table property and the snapshot summary, the append (or row delta; or an append that also
    merges small files, `merge`: catalog/merge_small.py), the expiry."""
    tx = StagedTransaction(table)
    prop = property_name(job)
    if not result.has_work:  # the dead-letter table's settled offsets move every batch
        doc["at_snapshot"] = table.metadata.current_snapshot_id
    # set first: the append reads the manifest merge settings from the staged properties
    tx.set_properties({**missing_merge_settings(result.table, table.metadata.properties),
                       prop: json.dumps(property_document(doc))})
    summary = {"icerouter.job": job, "icerouter.batch-id": str(batch_id), prop: json.dumps(doc)}
    if result.upsert is not None:  # images and the position deletes of the rows they replace
        row_delta(tx, result.data_files, deletes, snapshot_properties=summary,
                  removed_delete_files=getattr(deletes, "replaced", ()))
    elif any(getattr(f, "spec_id", None) not in (None, tx.table_metadata.default_spec_id) for f in result.data_files):
        # written before the table's partition spec evolved: pyiceberg's append would list them under the
        # new spec; a row delta writes a manifest per spec (catalog/row_delta.py)
        row_delta(tx, result.data_files, (), snapshot_properties=summary)
    elif merge is not None and merge.stage(tx, table, result.data_files, summary):
        pass
    elif result.data_files:
        with tx.update_snapshot(snapshot_properties=summary).merge_append() as append:
            for data_file in result.data_files:
                append.append_data_file(data_file)
    if expire:
        ExpireSnapshots(tx).by_ids(expire).commit()
    return tx


def commit_table(catalog: CatalogConfig, result, job: str, batch_id: int, retries: int = 6,
                 maintenance: MaintenanceConfig | None = None, drill: tuple | None = None,
                 where: str = "driver", merge=None) -> CommitOutcome:
    """Commit one `TableResult` (router/descriptors.py); see the module docstring. `merge`: the
    table's small-file merge when a caller already staged one (catalog/batch_commit.py)."""
    started, cpu_started, process_started = time.perf_counter(), time.thread_time(), time.process_time()
    if result.later:  # upsert parts of several tasks: one snapshot each, in turn (router/descriptors.py)
        return _commit_parts(catalog, result, job, batch_id, retries, maintenance, drill, where)
    outcome = CommitOutcome(result.table, "failed", rows=result.rows, files=len(result.data_files), where=where,
                            offsets=dict(result.offsets), bytes=sum(f.file_size_in_bytes for f in result.data_files),
                            oldest_record=result.oldest_ms / 1000 if result.oldest_ms is not None else None)
    if not result.has_work and not result.settled:
        outcome.status = "empty"
        return outcome
    last_error: Exception | None = None
    merge = merge or merge_for(result, maintenance)
    for attempt in range(retries + 1):
        outcome.attempts = attempt + 1
        deletes: list = []
        try:
            table = load_table(catalog, result.table, refresh=attempt > 0)
            ledger = table_ledger(table, job)
            if result.has_work:
                held = ledger.overlap(result.offsets)
                if held == "all":
                    outcome.status = "skipped"
                    break
                if held is not None:
                    last_error = RuntimeError(held)
                    break
            doc = progress_document(ledger, result, batch_id)
            base, expire = table.metadata, due_for_expiry(table.metadata, maintenance)
            deletes = replaced_rows(table, result.upsert, result.data_files) if result.upsert is not None else []
            tx = stage_transaction(table, result, job, batch_id, doc, expire, deletes, merge)
            producers = list(tx._snapshot_producers)
            tx.commit_transaction()
            # the committed transaction updated `table` in place (no extra catalog round trip)
            outcome.status = "committed"
            outcome.deleted_rows = getattr(deletes, "rows", 0)
            outcome.delete_files = len({f.file_path for f in deletes})  # v3's vectors share one Puffin file
            outcome.bytes += sum({f.file_path: f.file_size_in_bytes for f in deletes}.values())
            outcome.snapshot_id = table.metadata.current_snapshot_id
            outcome.expired = len(expire)
            outcome.committed_at = time.time()
            crash_point("commit", drill)
            break
        except NoSuchTableError as exc:
            last_error = exc
            break
        except Exception as exc:
            # a lost swap (CommitFailedException, ValidationException): locate the keys again; the catalog
            # unreachable, I/O errors: retry, then report; a row-level change the table cannot take
            # (RowLevelError): no retry makes it take it
            last_error = exc
            if deletes:
                delete_quietly(table.io, [f.file_path for f in deletes])
            if isinstance(exc, RowLevelError):
                break
        if attempt < retries and not (attempt == 0 and isinstance(last_error, CommitFailedException)):
            # a first lost swap means another committer just landed: refresh and go again at once;
            # repeated losses (several committers of one table) and failures back off
            backoff(attempt, base=0.1, cap=8.0)
    if outcome.status == "failed":
        outcome.error = f"{type(last_error).__name__}: {last_error}"
        outcome.transient = is_transient(last_error)
    if merge is not None:
        merge.finish(outcome.status == "committed")
        outcome.merged = merge.merged_files if outcome.status == "committed" else 0
    if outcome.status == "committed":  # known committed: never when the outcome is unknown
        drop_unlisted_manifests(table, producers)
        if outcome.expired:
            outcome.expired_files = delete_expired_files(table, base, expire)
    outcome.seconds = time.perf_counter() - started
    outcome.cpu_seconds = time.thread_time() - cpu_started
    outcome.process_cpu_seconds = time.process_time() - process_started
    return outcome


class RowDeletes(list):
    """A commit's new delete files (position-delete files on v2, deletion vectors on v3), the delete files
    they replace (`replaced`: earlier vectors and an upgraded table's position-delete files, merged into
    the new ones) and the rows they delete (`rows`)."""

    def __init__(self, files=(), replaced=(), rows: int = 0) -> None:
        super().__init__(files)
        self.replaced, self.rows = list(replaced), rows


def replaced_rows(table, work, new_data_files=()) -> RowDeletes:
    """Deletes for the live rows of the keys an upsert result changed, located on the snapshot this
    attempt builds on (a lost swap locates again: never stale positions): position-delete files on a
    v2 table, deletion vectors on v3. With sequence_by, a key whose live row is newer keeps it, and
    this result's image of it is deleted instead (router/catalog/sequence.py)."""
    files = snapshot_files(table)
    located = locate_keys(table, work.touched, work.key_columns, files)
    if located.num_rows == 0:
        return RowDeletes()
    positions = located.select(["file_path", "pos"])
    if work.sequence_column and work.sequences is not None:
        stale = stale_keys(table, located, work.key_columns, work.sequence_column, work.touched, work.sequences)
        if stale:
            keep = pa.array([tuple(r[c] for c in work.key_columns) not in stale
                             for r in located.select(list(work.key_columns)).to_pylist()])
            positions = pa.concat_tables([positions.filter(keep),
                                          rows_of_keys(table, new_data_files, work.key_columns, stale)])
            if positions.num_rows == 0:
                return RowDeletes()
    return delete_positions(table, positions, files, new_data_files)


def delete_positions(table, positions: pa.Table, files=None, new_data_files=()) -> RowDeletes:
    """Deletes (not committed) for `positions` (columns file_path, pos) in the form the table's format
    takes: position-delete files on v2, deletion vectors on v3, merged with each file's last one."""
    files = files or snapshot_files(table)
    if table.metadata.format_version >= 3:
        vectors = write_deletion_vectors(table, split_by_path(positions.column("file_path"), positions.column("pos")),
                                         files, new_data_files)
        return RowDeletes(vectors.added, vectors.replaced, positions.num_rows)
    return RowDeletes(write_position_deletes(table, positions, files, new_data_files), (), positions.num_rows)


def _commit_parts(catalog: CatalogConfig, result, job: str, batch_id: int, retries: int,
                  maintenance: MaintenanceConfig | None, drill, where: str) -> CommitOutcome:
    """Each task's part of an upsert table in its own snapshot, in turn; one outcome for the table."""
    first = replace(result, later=[])
    total = CommitOutcome(result.table, "empty", where=where, offsets=dict(result.offsets))
    for part in [first, *result.later]:
        outcome = commit_table(catalog, part, job, batch_id, retries, maintenance, drill, where)
        widen(total.offsets, part.offsets)
        total.rows += outcome.rows
        total.files += outcome.files
        total.attempts += outcome.attempts
        total.seconds += outcome.seconds
        total.cpu_seconds += outcome.cpu_seconds
        total.process_cpu_seconds += outcome.process_cpu_seconds
        total.expired += outcome.expired
        total.expired_files += outcome.expired_files
        total.deleted_rows += outcome.deleted_rows
        total.delete_files += outcome.delete_files
        total.bytes += outcome.bytes
        if outcome.oldest_record is not None:
            total.oldest_record = min(filter(None, (total.oldest_record, outcome.oldest_record)))
        if outcome.status == "failed":
            total.status, total.error, total.transient = "failed", outcome.error, outcome.transient
            break
        if outcome.status == "committed" or total.status == "empty":
            total.status = outcome.status
        total.snapshot_id = outcome.snapshot_id or total.snapshot_id
        total.committed_at = outcome.committed_at or total.committed_at
    return total
