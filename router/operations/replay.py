"""`icerouter dlq replay`: dead letters back through the job's own path, exactly once.

Why: after a fix (a policy relaxed, a schema registered, a table unquarantined, a producer
fixed) the records in the dead-letter table must reach their tables, once, and the letters go.

How: the selected letters become source rows again (their original key, value, headers,
topic, partition, offset, timestamp) and run through the job's partition writer
(router/executor/partition.py: decode, route, evolve, write), with two rules of their own
(`ReplayWriter`): a letter for a table goes to that table only (its record may have reached the
others already), and "already held" means "taken from an earlier replay", not "below the table's
progress" (every letter lies below it). Then, in this order:

1. each target table commits its rows with the letters' offsets added to its table property
   ``icerouter.replayed.<job>`` in the same transaction: a replay run again finds them there
   and writes nothing twice;
2. the dead-letter table, in one transaction, position-deletes the letters replayed and appends
   the letters that still fail with their new reason (they stay), and counts the run in
   ``icerouter.replays.<job>`` (the job's metrics read it).

Killed between 1 and 2, a second run finds the letters, writes nothing the tables hold, and
finishes step 2: no row twice, none lost. Both transactions carry the job's offsets document in
their snapshot summary, as the job's commits do, so the job's own progress is unchanged.

Upsert tables: an image from a letter replaces a key's live row only when that row came from an
older record (same partition: a lower offset; another partition: an older Kafka timestamp); a
newer row wins and the letter counts as superseded. This needs the rows' Kafka metadata columns
(`tables.metadata_columns`, the default); without them an upsert replay is refused. A key a
newer change deleted has no row left to compare with: its older image comes back (the dry run
names such letters).
"""

from __future__ import annotations

import json
import logging
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, ValidationException

from router.catalog import load_table
from router.catalog.commit import replaced_rows
from router.catalog.datafiles import write_data_files
from router.catalog.dead_letter_table import DLQ_ARROW_SCHEMA, REPLAY_COUNTS, REPLAYS_PROPERTY, SOURCE_COLUMNS
from router.catalog.deletes import write_position_deletes
from router.catalog.row_delta import row_delta
from router.catalog.snapshot_files import deleted_positions, snapshot_files
from router.catalog.sql import StagedTransaction
from router.catalog.tables import backoff, delete_quietly
from router.config import RouterConfig
from router.decisions import resolve_policy, decide_schema
from router.descriptors import DispatchContext, TableResult
from router.exceptions import ConfigError, RouterError
from router.executor.dead_letters import dead_letter_batch
from router.executor.partition import PartitionWriter
from router.faults import crash_point
from router.operations.letters import Selection, select_mask
from router.progress import OFFSETS_PROPERTY, stored_progress
from router.source.offsets import tp_key

log = logging.getLogger("icerouter.replay")

REPLAYED_PROPERTY = "icerouter.replayed.{job}"  # target tables: {"topic/partition": [[lo, hi], ...]}
TARGET_TABLE, TARGET_ROUTE = "__replay_table", "__replay_route"
FILE, POS = "__file", "__pos"
COMMIT_RETRIES = 6


class ReplayRefused(RouterError):
    """The replay cannot run as asked (an upsert table without Kafka metadata columns)."""

    exit_code = 2


# ----------------------------------------------------------------------------- offsets taken from replays

def parse_ranges(raw: str | None) -> dict[str, list[list[int]]]:
    try:
        doc = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def add_offsets(ranges: dict[str, list[list[int]]], taken: dict[str, list[int]]) -> dict[str, list[list[int]]]:
    """`ranges` with the offsets of `taken` added, as sorted disjoint [lo, hi] runs per partition."""
    out = {k: [list(r) for r in v] for k, v in ranges.items()}
    for key, offsets in taken.items():
        merged: list[list[int]] = []
        for lo, hi in sorted([*out.get(key, []), *([o, o] for o in set(offsets))]):
            if merged and lo <= merged[-1][1] + 1:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        out[key] = merged
    return dict(sorted(out.items()))


def holds(ranges: dict[str, list[list[int]]], key: str, offset: int) -> bool:
    return any(lo <= offset <= hi for lo, hi in ranges.get(key, ()))


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

def letters_at(dlq, selection: Selection) -> pa.Table:
    """The selected letters of the dead-letter table's current snapshot with where each lives
    (__file, __pos: its data file and row), the deleted rows left out."""
    files = snapshot_files(dlq)
    parts = []
    for path in sorted(files.data):
        with dlq.io.new_input(path).open() as stream:
            data = pq.read_table(stream)
        arrays = [data.column(f.name).cast(f.type) if data.column(f.name).type != f.type else data.column(f.name)
                  for f in DLQ_ARROW_SCHEMA]
        rows = pa.Table.from_arrays(arrays, schema=DLQ_ARROW_SCHEMA)
        rows = rows.append_column(FILE, pa.array([path] * rows.num_rows, pa.string()))
        rows = rows.append_column(POS, pa.array(np.arange(rows.num_rows, dtype=np.int64)))
        gone = deleted_positions(dlq, path, files)
        if len(gone):
            rows = rows.filter(pa.array(~np.isin(np.arange(rows.num_rows), gone)))
        parts.append(rows.filter(select_mask(rows, selection)))
    if not parts:
        return DLQ_ARROW_SCHEMA.append(pa.field(FILE, pa.string())).append(pa.field(POS, pa.int64())).empty_table()
    letters = pa.concat_tables(parts)
    order = pc.sort_indices(letters, [("topic", "ascending"), ("partition", "ascending"), ("offset", "ascending")])
    return letters.take(order)


def identity(row: dict) -> tuple:
    return (row["table_name"] or "", row["route"] or "", row["topic"], row["partition"], row["offset"])


def as_source(letters: pa.Table) -> pa.Table:
    """The letters' records as the Kafka source gives them, one row per letter, with its target."""
    n = letters.num_rows
    columns = {name: letters.column(name) for name in SOURCE_COLUMNS}
    columns["timestampType"] = pa.array([0] * n, pa.int32())
    columns[TARGET_TABLE] = letters.column("table_name")
    columns[TARGET_ROUTE] = letters.column("route")
    return pa.table(columns)


# ----------------------------------------------------------------------------- the job's path, for letters

class ReplayWriter(PartitionWriter):
    """The job's partition writer with a replay's rules (module docstring); `dry`: decide, write nothing."""

    def __init__(self, ctx: DispatchContext, dry: bool = False) -> None:
        super().__init__(ctx)
        self.dry = dry
        self.replayed: dict[str, dict] = {}  # table -> its offsets taken from replays
        self.routed: dict[str, set[int]] = defaultdict(set)  # table -> source rows handed to it
        self.would_write: Counter = Counter()  # dry run: table -> rows

    def add_pending(self, table_id, topic, route, group, batch, rows) -> None:
        source = self.source
        want_table = pc.take(source.column(TARGET_TABLE), rows)
        want_route = pc.take(source.column(TARGET_ROUTE), rows)
        mask = pc.and_kleene(pc.or_kleene(pc.is_null(want_table), pc.equal(want_table, table_id)),
                             pc.or_kleene(pc.is_null(want_route), pc.equal(want_route, route.name)))
        mask = pc.fill_null(mask, False)
        if not pc.all(mask).as_py():
            batch, rows = batch.filter(mask), rows.filter(mask)
        self.routed[table_id].update(rows.to_pylist())
        super().add_pending(table_id, topic, route, group, batch, rows)

    def replayed_offsets(self, table_id: str) -> dict:
        if table_id not in self.replayed:
            try:
                table = load_table(self.ctx.catalog, table_id, refresh=True)
                raw = table.metadata.properties.get(REPLAYED_PROPERTY.format(job=self.ctx.job))
                self.replayed[table_id] = parse_ranges(raw)
            except NoSuchTableError:
                self.replayed[table_id] = {}
        return self.replayed[table_id]

    def not_held(self, table_id: str, rows: pa.Array) -> pa.Array | None:
        ranges = self.replayed_offsets(table_id)
        if not ranges:
            return None
        source = self.source
        keep = [not holds(ranges, tp_key(t, p), o) for t, p, o in zip(
            pc.take(source.column("topic"), rows).to_pylist(), pc.take(source.column("partition"), rows).to_pylist(),
            pc.take(source.column("offset"), rows).to_pylist())]
        return None if all(keep) else pa.array(keep)

    def write_table(self, table_id, items) -> None:
        if not self.dry:
            super().write_table(table_id, items)
            return
        if self.fan_in_refused(table_id, items):
            return
        ctx, route = self.ctx, items[0].route
        result = self.results.setdefault(table_id, TableResult(table_id))
        items = self.drop_held(table_id, items, result)
        try:
            current = load_table(ctx.catalog, table_id).metadata.schema()
        except NoSuchTableError:
            current = None
        policy = resolve_policy(ctx.policies, items[0].topic if items else "", route.evolution, ctx.tables.auto_create)
        for item in items:
            if item.iceberg_schema is None:  # tombstones of an upsert table: deletes
                self.would_write[table_id] += len(item.rows)
                continue
            if current is None and not ctx.tables.auto_create:
                self.dead_letter(item.rows, "evolution_violation", f"table {table_id} does not exist and "
                                 "tables.auto_create is off", table=table_id, route=item.route.name)
                continue
            d = decide_schema(current, item.iceberg_schema, policy, ctx.tables.case_sensitive, table_id,
                              route.write, route.write.key)
            if d.action in ("dlq", "fail"):
                self.dead_letter(item.rows, "evolution_" + ("frozen" if d.action == "fail" else "violation"),
                                 d.reason, table=table_id, route=item.route.name, schema_id=item.schema_id)
            elif d.action != "drop":
                self.would_write[table_id] += len(item.rows)

    def finish_letters(self, ordered: pa.Table) -> None:
        """The letters that still fail are decided by `replay`, not written here."""


# ----------------------------------------------------------------------------- outcome of each letter

@dataclass
class ReplayReport:
    selection: str
    dry_run: bool
    selected: int = 0
    landed: int = 0  # letters whose records are in their tables now (or already were, from a replay)
    superseded: int = 0  # upsert letters a newer row of their key won over
    still_failing: dict = field(default_factory=dict)  # new reason (error class) -> letters
    rows_by_table: dict = field(default_factory=dict)  # table -> rows written (dry run: that would be)
    letters: list = field(default_factory=list)  # per letter: coordinates, target, outcome, new reason

    @property
    def failed(self) -> int:
        return sum(self.still_failing.values())

    def to_json(self) -> dict:
        return {"selection": self.selection, "dry_run": self.dry_run, "selected": self.selected,
                "landed": self.landed, "superseded": self.superseded, "still_failing": self.still_failing,
                "rows_by_table": self.rows_by_table, "letters": self.letters}

    def text(self) -> str:
        verb = "would" if self.dry_run else "did"
        lines = [f"replay of {self.selected} dead letter(s) ({self.selection})" + (" [dry run]" if self.dry_run else "")]
        for table, rows in sorted(self.rows_by_table.items()):
            lines.append(f"  {table}: {rows} row(s) {'would land' if self.dry_run else 'landed'}")
        lines.append(f"landed: {self.landed}" + (f", superseded by newer rows: {self.superseded}" if self.superseded else ""))
        if self.still_failing:
            lines.append(f"still failing ({verb} stay, with the new reason): " +
                         ", ".join(f"{r} {n}" for r, n in sorted(self.still_failing.items())))
        return "\n".join(lines)


def _outcomes(writer: ReplayWriter, ordered: pa.Table) -> tuple[dict[int, list], set[int]]:
    """(source row -> the new letters of that row that concern its letter, rows whose letter landed)."""
    targets = ordered.column(TARGET_TABLE).to_pylist()
    routes = ordered.column(TARGET_ROUTE).to_pylist()
    failing: dict[int, list] = defaultdict(list)
    for letter in writer.letters:
        for row in (letter.rows.to_pylist() if hasattr(letter.rows, "to_pylist") else list(letter.rows)):
            want_table, want_route = targets[row], routes[row]
            if want_table is not None and letter.table not in (None, want_table):
                continue  # another table's failure: the letter is about its own table
            if want_route is not None and letter.route not in (None, want_route):
                continue
            failing[row].append(replace(letter, rows=[row]))
    landed = set()
    for row, want_table in enumerate(targets):
        if row in failing:
            continue
        if want_table is None or row in writer.routed.get(want_table, ()):
            landed.add(row)
        else:  # the record no longer routes to the table it failed for: it stays, saying so
            failing[row].append(_unrouted(row, want_table, routes[row]))
    return failing, landed


def _unrouted(row: int, table: str, route: str | None):
    from router.executor.dead_letters import DeadLetter

    return DeadLetter([row], "replay_unrouted", f"the record no longer routes to {table}", table=table, route=route)


# ----------------------------------------------------------------------------- commits

def taken_offsets(ordered: pa.Table, rows) -> dict[str, list[int]]:
    taken: dict[str, list[int]] = defaultdict(list)
    topics, partitions, offsets = (ordered.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    for row in rows:
        taken[tp_key(topics[row], partitions[row])].append(offsets[row])
    return dict(taken)


def commit_target(config: RouterConfig, result: TableResult, taken: dict[str, list[int]]) -> tuple[str, int, int]:
    """One table's replayed rows and the offsets they came from, in one transaction: (status, rows,
    upsert keys a newer row kept).
    Status "held" when an earlier run's commit already took these offsets (it died before step 2)."""
    prop = REPLAYED_PROPERTY.format(job=config.job.name)
    last: Exception | None = None
    for attempt in range(COMMIT_RETRIES + 1):
        table = load_table(config.catalog, result.table, refresh=True)
        ranges = parse_ranges(table.metadata.properties.get(prop))
        if all(holds(ranges, key, o) for key, offsets in taken.items() for o in offsets):
            return "held", 0, 0
        deletes: list = []
        try:
            data_files, superseded = list(result.data_files), 0
            if result.upsert is not None:
                data_files, superseded = newer_rows_win(table, result)
                deletes = replaced_rows(table, result.upsert) if result.upsert.touched.num_rows else []
            tx = StagedTransaction(table)
            tx.set_properties({prop: json.dumps(add_offsets(ranges, taken))})
            summary = {"icerouter.replay": str(len(data_files)), **carried_progress(table)}
            if deletes or result.upsert is not None:
                row_delta(tx, data_files, deletes, snapshot_properties=summary)
            elif data_files:
                with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                    for data_file in data_files:
                        append.append_data_file(data_file)
            tx.commit_transaction()
            return "committed", sum(f.record_count for f in data_files), superseded
        except (CommitFailedException, ValidationException) as exc:
            last = exc
            if deletes:
                delete_quietly(table.io, [f.file_path for f in deletes])
            backoff(attempt)
    raise RuntimeError(f"replay commit of {result.table} failed after {COMMIT_RETRIES + 1} attempts: {last}")


def newer_rows_win(table, result: TableResult) -> tuple[list, int]:
    """An upsert result's images, without those whose key's live row came from a newer record
    (module docstring); `result.upsert.touched` loses those keys too. (data files, keys dropped)."""
    from router.catalog.locate import locate_keys

    work = result.upsert
    names = set(table.schema().column_names)
    if not {"_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"} <= names:
        raise ReplayRefused(f"upsert table {result.table} has no Kafka metadata columns: a replay cannot tell "
                            "a newer row from an older change (tables.metadata_columns)", table=result.table)
    located = locate_keys(table, work.touched, work.key_columns)
    if located.num_rows == 0:
        return list(result.data_files), 0
    live = _coordinates(table, located, work.key_columns)
    images = pa.concat_tables([_read(table, f.file_path) for f in result.data_files]) if result.data_files else None
    if images is None or images.num_rows == 0:
        return list(result.data_files), 0
    newer = set()
    image_rows = images.select([*work.key_columns, "_kafka_topic", "_kafka_partition", "_kafka_offset",
                                "_kafka_timestamp"]).to_pylist()
    for image in image_rows:
        key = tuple(image[c] for c in work.key_columns)
        for row in live.get(key, ()):
            same = (row["_kafka_topic"], row["_kafka_partition"]) == (image["_kafka_topic"], image["_kafka_partition"])
            if (same and row["_kafka_offset"] > image["_kafka_offset"]) or (
                    not same and row["_kafka_timestamp"] is not None and image["_kafka_timestamp"] is not None
                    and row["_kafka_timestamp"] > image["_kafka_timestamp"]):
                newer.add(key)
    if not newer:
        return list(result.data_files), 0
    keep = pa.array([tuple(r[c] for c in work.key_columns) not in newer for r in image_rows])
    kept = images.filter(keep)
    files = write_data_files(table, kept) if kept.num_rows else []
    touched = work.touched.filter(pa.array([tuple(r[c] for c in work.key_columns) not in newer
                                            for r in work.touched.select(list(work.key_columns)).to_pylist()]))
    result.upsert = replace(work, touched=touched)
    delete_quietly(table.io, [f.file_path for f in result.data_files])
    result.data_files = files
    return files, len(newer)


def _read(table, path: str) -> pa.Table:
    with table.io.new_input(path).open() as stream:
        return pq.read_table(stream)


def _coordinates(table, located: pa.Table, key_columns) -> dict[tuple, list[dict]]:
    """key -> the Kafka coordinates of its live rows."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    columns = ["_kafka_topic", "_kafka_partition", "_kafka_offset", "_kafka_timestamp"]
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
        letters = letters_at(dlq, Selection())
        rows = letters.select(["table_name", "route", "topic", "partition", "offset", FILE, POS]).to_pylist()
        gone = [(r[FILE], r[POS]) for r in rows if identity(r) in done]
        written, deletes = [], []
        try:
            deletes = write_position_deletes(dlq, pa.table({"file_path": [p for p, _ in gone],
                                                            "pos": pa.array([i for _, i in gone], pa.int64())}),
                                             files) if gone else []
            written = write_data_files(dlq, new_letters) if new_letters.num_rows else []
            previous = json.loads(dlq.metadata.properties.get(prop) or "{}")
            stats = {k: int(previous.get(k, 0)) + counts.get(k, 0) for k in REPLAY_COUNTS}
            stats["last_run"] = round(time.time(), 3)
            tx = StagedTransaction(dlq)
            tx.set_properties({prop: json.dumps(stats, sort_keys=True)})
            row_delta(tx, written, deletes, snapshot_properties={"icerouter.replay": str(len(gone)),
                                                                 **carried_progress(dlq)})
            tx.commit_transaction()
            return
        except (CommitFailedException, ValidationException) as exc:
            last = exc
            delete_quietly(dlq.io, [f.file_path for f in [*written, *deletes]])
            backoff(attempt)
    raise RuntimeError(f"replay commit of {config.dlq.table} failed after {COMMIT_RETRIES + 1} attempts: {last}")


# ----------------------------------------------------------------------------- the command

def replay(config: RouterConfig, selection: Selection, dry_run: bool = False) -> ReplayReport:
    """Replay the selected letters (module docstring); the report says what landed where and what still fails."""
    if not config.dlq.table:
        raise ConfigError("dlq replay: the configuration has no dlq.table")
    report = ReplayReport(selection.describe(), dry_run)
    try:
        dlq = load_table(config.catalog, config.dlq.table, refresh=True)
    except NoSuchTableError:
        return report
    letters = letters_at(dlq, selection)
    seen, unique = set(), []
    for i, row in enumerate(letters.select(["table_name", "route", "topic", "partition", "offset"]).to_pylist()):
        if identity(row) not in seen:
            seen.add(identity(row))
            unique.append(i)
    letters = letters.take(pa.array(unique, pa.int64()))
    report.selected = letters.num_rows
    if not letters.num_rows:
        return report
    ctx = DispatchContext.for_config(config, -1, commit_in_tasks=False, dlq_producer=None)
    writer = ReplayWriter(ctx, dry=dry_run)
    results = {r.table: r for r in writer.run(as_source(letters))}
    ordered = writer.source
    failing, landed = _outcomes(writer, ordered)
    identities = [identity(r) for r in ordered.select(["__replay_table", "__replay_route", "topic", "partition",
                                                       "offset"]).rename_columns(
        ["table_name", "route", "topic", "partition", "offset"]).to_pylist()]
    crash_point("replay_write")
    if dry_run:
        report.rows_by_table = dict(writer.would_write)
    else:
        for table_id, result in sorted(results.items()):
            # the rows this table took: handed to it, and no new letter of theirs is about it
            failed_here = {row for row, found in failing.items() for letter in found if letter.table == table_id}
            rows = sorted(r for r in writer.routed.get(table_id, ()) if r not in failed_here)
            if not rows or (not result.data_files and result.upsert is None):
                _drop_files(config, result)
                continue
            status, written, superseded = commit_target(config, result, taken_offsets(ordered, rows))
            report.rows_by_table[table_id] = written
            report.superseded += superseded
            crash_point("replay_table")
    new = [letter for row in sorted(failing) for letter in failing[row]]
    report.landed = len(landed)
    report.still_failing = dict(Counter(letter.error_class for letter in new))
    for row, ident in enumerate(identities):
        outcome = "landed" if row in landed else "still failing"
        report.letters.append({"topic": ident[2], "partition": ident[3], "offset": ident[4],
                               "table": ident[0] or None, "outcome": outcome,
                               "reason": "; ".join(f"{l.error_class}: {l.reason}" for l in failing.get(row, []))[:500]
                               or None})
    if dry_run:
        return report
    done = {identities[row] for row in landed} | {identities[row] for row in failing}
    fresh = dead_letter_batch(ordered, new, config.job.name)
    commit_letters(config, done, fresh, {"runs": 1, "landed": report.landed, "superseded": report.superseded,
                                         "still_failing": report.failed})
    crash_point("replay_letters")
    return report


def _drop_files(config: RouterConfig, result: TableResult) -> None:
    """Files a result wrote that no commit takes (the dead-letter table's, a table's whose letters stay)."""
    if result.data_files:
        try:
            table = load_table(config.catalog, result.table)
            delete_quietly(table.io, [f.file_path for f in result.data_files])
        except Exception:  # an orphan file, removed by maintenance later
            pass
