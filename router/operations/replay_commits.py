"""The commits of a dead-letter replay (router/operations/replay.py decides what they hold).

Why apart: these are the two transactions that make a replay exactly once, and what they read
back to stay so: the offsets a table took from replays (its ledger, router/ledger.py, committed with
the rows), the
letters' places in the dead-letter table (located again on every attempt), the job's offsets
document carried in each snapshot's summary, and an upsert table's newer rows, which win.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, ValidationException

from router.catalog import load_table
from router.catalog.commit import RowDeletes, delete_positions, replaced_rows
from router.catalog.datafiles import write_data_files
from router.catalog.dead_letter_table import DLQ_ARROW_SCHEMA, REPLAY_COUNTS, REPLAYS_PROPERTY
from router.catalog.row_delta import row_delta
from router.catalog.snapshot_files import deleted_positions, snapshot_files
from router.catalog.sql import StagedTransaction
from router.catalog.tables import backoff, delete_quietly
from router.config import RouterConfig
from router.descriptors import TableResult
from router.exceptions import RouterError
from router.operations.letters import Selection, select_mask
from router.ledger import from_document, holds, parse_ranges, table_ledger
from router.progress import OFFSETS_PROPERTY, property_name, stored_progress
from router.source.offsets import tp_key

FILE, POS = "__file", "__pos"
COMMIT_RETRIES = 6

class ReplayRefused(RouterError):
    """The replay cannot run as asked (an upsert table without Kafka metadata columns)."""

    exit_code = 2


# ----------------------------------------------------------------------------- the target's ledger

def carried_progress(table) -> dict[str, str]:
    """Every job's offsets document as of `table`'s current snapshot, for the summary of a snapshot
    that is not the job's own: its progress reads the same after it (router/progress.py)."""
    prefix = OFFSETS_PROPERTY.format(job="")
    out = {}
    for name in table.metadata.properties:
        if name.startswith(prefix):
            doc = dict(stored_progress(table, name[len(prefix):]))
            doc.pop("at_snapshot", None)
            out[name] = json.dumps(doc)
    return out


# ----------------------------------------------------------------------------- reading the letters

def letters_at(dlq, selection: Selection, columns: tuple[str, ...] | None = None) -> pa.Table:
    """The selected letters of the dead-letter table's current snapshot with where each lives
    (__file, __pos: its data file and row), the deleted rows left out; all columns unless `columns`
    (the selection's columns are read too)."""
    wanted = DLQ_ARROW_SCHEMA if columns is None else pa.schema([f for f in DLQ_ARROW_SCHEMA if f.name in set(
        columns) | {"error_class", "table_name", "topic", "partition", "offset", "failed_at", "job"}])
    schema = wanted.append(pa.field(FILE, pa.string())).append(pa.field(POS, pa.int64()))
    files = snapshot_files(dlq)
    parts = []
    for path in sorted(files.data):
        with dlq.io.new_input(path).open() as stream:
            data = pq.read_table(stream, columns=wanted.names)
        arrays = [data.column(f.name).cast(f.type) if data.column(f.name).type != f.type else data.column(f.name)
                  for f in wanted]
        arrays += [pa.array([path] * data.num_rows, pa.string()), pa.array(np.arange(data.num_rows, dtype=np.int64))]
        rows = pa.Table.from_arrays(arrays, schema=schema)
        gone = deleted_positions(dlq, path, files)
        if len(gone):
            rows = rows.filter(pa.array(~np.isin(np.arange(rows.num_rows), gone)))
        parts.append(rows.filter(select_mask(rows, selection)))
    if not parts:
        return schema.empty_table()
    letters = pa.concat_tables(parts)
    order = pc.sort_indices(letters, [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    return letters.take(order)


def identity(row: dict) -> tuple:
    return (row["table_name"] or "", row["route"] or "", row["topic"], row["partition"], row["offset"])


# ----------------------------------------------------------------------------- commits

def taken_offsets(ordered: pa.Table, rows) -> dict[str, list[int]]:
    taken: dict[str, list[int]] = defaultdict(list)
    topics, partitions, offsets = (ordered.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    for row in rows:
        taken[tp_key(topics[row], partitions[row])].append(offsets[row])
    return dict(taken)


def commit_target(config: RouterConfig, result: TableResult, taken: dict[str, list[int]]) -> tuple[str, int]:
    """One table's replayed rows and, in the same transaction, the offsets they came from added to the
    table's ledger (router/ledger.py: `replayed`, and `superseded` for upsert letters a newer row won
    over): (status, rows). Status "held" when an earlier run's commit already took these offsets
    (it died before step 2)."""
    prop = property_name(config.job.name)
    last: Exception | None = None
    for attempt in range(COMMIT_RETRIES + 1):
        table = load_table(config.catalog, result.table, refresh=True)
        ledger = table_ledger(table, config.job.name)
        if all(holds(ledger.replayed, key, o) or ledger.was_superseded(key, o)
               for key, offsets in taken.items() for o in offsets):
            return "held", 0
        deletes: list = []
        try:
            data_files, superseded = list(result.data_files), {}
            if result.upsert is not None:
                data_files, superseded = newer_rows_win(table, result)
                deletes = replaced_rows(table, result.upsert) if result.upsert.touched.num_rows else []
            latest = from_document(parse_ranges(table.metadata.properties.get(prop)) or None)
            tx = StagedTransaction(table)
            tx.set_properties({prop: json.dumps(latest.with_replayed(taken, superseded))})
            summary = {"icerouter.replay": str(len(data_files)), **carried_progress(table),
                       prop: json.dumps(ledger.with_replayed(taken, superseded))}
            if deletes or result.upsert is not None:
                row_delta(tx, data_files, deletes, snapshot_properties=summary,
                          removed_delete_files=getattr(deletes, "replaced", ()))
            else:
                with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for data_file in data_files:
                        append.append_data_file(data_file)
            tx.commit_transaction()
            return "committed", sum(f.record_count for f in data_files)
        except (CommitFailedException, ValidationException) as exc:
            last = exc
            if deletes:
                delete_quietly(table.io, [f.file_path for f in deletes])
            backoff(attempt)
    raise RuntimeError(f"replay commit of {result.table} failed after {COMMIT_RETRIES + 1} attempts: {last}")


COORDINATES = ("_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp")


def newer_rows_win(table, result: TableResult) -> tuple[list, dict[str, list[int]]]:
    """An upsert result's images, without those whose key's live row came from a newer record
    (module docstring); `result.upsert.touched` loses those keys too. (data files, the offsets of the
    images dropped: {"topic/partition": [offset, ...]})."""
    work = result.upsert
    images = pa.concat_tables([_read(table, f.file_path) for f in result.data_files]) if result.data_files else None
    if images is None or images.num_rows == 0:
        return list(result.data_files), {}
    newer, lost = superseded_images(table, result.table, work.touched, work.key_columns, images)
    if not newer:
        return list(result.data_files), {}
    keep = pa.array([tuple(r[c] for c in work.key_columns) not in newer
                     for r in images.select(list(work.key_columns)).to_pylist()])
    kept = images.filter(keep)
    files = write_data_files(table, kept) if kept.num_rows else []
    touched = work.touched.filter(pa.array([tuple(r[c] for c in work.key_columns) not in newer
                                            for r in work.touched.select(list(work.key_columns)).to_pylist()]))
    result.upsert = replace(work, touched=touched)
    delete_quietly(table.io, [f.file_path for f in result.data_files])
    result.data_files = files
    return files, lost


def superseded_images(table, table_id: str, touched: pa.Table, key_columns, images: pa.Table
                      ) -> tuple[set, dict[str, list[int]]]:
    """(keys whose live row came from a newer record than their image in `images`, the offsets of those
    images): same partition, a higher offset; another partition, a newer Kafka timestamp. The replay
    and its dry run both decide here."""
    from router.catalog.locate import locate_keys

    if not set(COORDINATES) <= set(table.schema().column_names):
        raise ReplayRefused(f"upsert table {table_id} has no Kafka metadata columns: a replay cannot tell "
                            "a newer row from an older change (tables.metadata_columns)", table=table_id)
    located = locate_keys(table, touched, key_columns)
    if located.num_rows == 0:
        return set(), {}
    live = _coordinates(table, located, key_columns)
    newer = set()
    image_rows = images.select([*key_columns, *COORDINATES]).to_pylist()
    for image in image_rows:
        key = tuple(image[c] for c in key_columns)
        for row in live.get(key, ()):
            same = (row["_kafka_topic"], row["_kafka_partition"]) == (image["_kafka_topic"], image["_kafka_partition"])
            if (same and row["_kafka_offset"] > image["_kafka_offset"]) or (
                    not same and row["_kafka_timestamp"] is not None and image["_kafka_timestamp"] is not None
                    and row["_kafka_timestamp"] > image["_kafka_timestamp"]):
                newer.add(key)
    lost: dict[str, list[int]] = defaultdict(list)
    for image in image_rows:
        if tuple(image[c] for c in key_columns) in newer:
            lost[tp_key(image["_kafka_topic"], image["_kafka_partition"])].append(image["_kafka_offset"])
    return newer, dict(lost)


def _read(table, path: str) -> pa.Table:
    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream)


def _coordinates(table, located: pa.Table, key_columns) -> dict[tuple, list[dict]]:
    """key -> the Kafka coordinates of its live rows."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    columns = list(COORDINATES)
    for path in set(located.column("file_path").to_pylist()):
        mine = located.filter(pc.equal(located.column("file_path"), path))
        rows = _read(table, path).select(columns).take(mine.column("pos"))
        for key, coords in zip(mine.select(list(key_columns)).to_pylist(), rows.to_pylist()):
            out[tuple(key[c] for c in key_columns)].append(coords)
    return out


def commit_letters(config: RouterConfig, done: set[tuple], new_letters: pa.Table, counts: dict) -> None:
    """Step 2: the letters in `done` (identities) deleted and `new_letters` appended, in one transaction,
    located again on every attempt (the job may have appended or merged the table's files meanwhile)."""
    prop = REPLAYS_PROPERTY.format(job=config.job.name)
    last: Exception | None = None
    for attempt in range(COMMIT_RETRIES + 1):
        dlq = load_table(config.catalog, config.dlq.table, refresh=True)
        files = snapshot_files(dlq)
        letters = letters_at(dlq, Selection(job=config.job.name),
                             columns=("table_name", "route", "topic", "partition", "offset"))
        rows = letters.select(["table_name", "route", "topic", "partition", "offset", FILE, POS]).to_pylist()
        gone = [(r[FILE], r[POS]) for r in rows if identity(r) in done]
        written, deletes = [], []
        try:
            deletes = delete_positions(dlq, pa.table({"file_path": [p for p, _ in gone],
                                                      "pos": pa.array([i for _, i in gone], pa.int64())}),
                                       files) if gone else RowDeletes()
            written = write_data_files(dlq, new_letters) if new_letters.num_rows else []
            previous = json.loads(dlq.metadata.properties.get(prop) or "{}")
            stats = {k: int(previous.get(k, 0)) + counts.get(k, 0) for k in REPLAY_COUNTS}
            stats["last_run"] = round(time.time(), 3)
            tx = StagedTransaction(dlq)
            tx.set_properties({prop: json.dumps(stats, sort_keys=True)})
            row_delta(tx, written, deletes, snapshot_properties={"icerouter.replay": str(len(gone)),
                                                                 **carried_progress(dlq)},
                      removed_delete_files=deletes.replaced)
            tx.commit_transaction()
            return
        except (CommitFailedException, ValidationException) as exc:
            last = exc
            delete_quietly(dlq.io, [f.file_path for f in [*written, *deletes]])
            backoff(attempt)
    raise RuntimeError(f"replay commit of {config.dlq.table} failed after {COMMIT_RETRIES + 1} attempts: {last}")
