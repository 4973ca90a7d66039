"""`icerouter dlq replay`: dead letters back through the job's own path, exactly once.

Why: after a fix (a policy relaxed, a schema registered, a table unquarantined, a producer
fixed) the records in the dead-letter table must reach their tables, once, and the letters go.

How: the selected letters become source rows again (their original key, value, headers,
topic, partition, offset, timestamp) and run through the job's partition writer
(router/executor/partition.py: decode, route, evolve, write), with two rules of their own
(`ReplayWriter`), where a letter goes:

- a letter for a table goes to that table only (its record may have reached the others already);
- a letter of a route that named no table (a table name refused) goes through that route, or, when
  the route is gone (renamed), through the routes that match the record now;
- a letter from before routing (not decodable, no route took its topic) goes through the routes
  that match now.

Whether a table already holds a letter's record is its ledger's answer (router/ledger.py
`Ledger.holds_letter`): taken by an earlier replay, or read by the job after the letter was
written (a route added since backfilled it); a table the letter does not concern (another route's,
when its own route is gone) holds what it read then. A record no route takes now stays, with
reason ``replay_unrouted``, unless ``unmatched: drop`` drops it. Then, in this order:

1. each target table commits its rows with the letters' offsets added to its ledger (the job's
   offsets document, property and snapshot summary) in the same transaction: a replay run again
   finds them there and writes nothing twice, the job's backfills skip them, and a rollback past
   the replay gives them back to the job to read again;
2. the dead-letter table, in one transaction, position-deletes the letters replayed and appends
   the letters that still fail with their new reason (they stay), and counts the run in
   ``icerouter.replays.<job>`` (the job's metrics read it).

Killed between 1 and 2, a second run finds the letters, writes nothing the tables hold, and
finishes step 2: no row twice, none lost. The job's contiguous offsets are unchanged by a replay.

Upsert tables: an image from a letter replaces a key's live row only when that row came from an
older record (same partition: a lower offset; another partition: an older Kafka timestamp); a
newer row wins and the letter counts as superseded (recorded in the table's ledger with the
commit, so the counts are the same whatever step a run was killed at). The dry run reduces the
letters per key as the upsert writer does and asks the same supersession check, writing nothing.
This needs the rows' Kafka metadata columns (`tables.metadata_columns`, the default); without them
an upsert replay is refused. A key a newer change deleted has no row left to compare with: its
older image comes back.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import NoSuchTableError

from router.catalog import load_table
from router.catalog.dead_letter_table import SOURCE_COLUMNS
from router.catalog.tables import delete_quietly
from router.config import RouterConfig
from router.changes.dedup import last_change_per_key
from router.changes.extract import DEBEZIUM, UPSERT, ChangeSpec, extract_changes
from router.decisions import decide_schema, resolve_policy
from router.descriptors import DispatchContext, TableResult
from router.exceptions import ConfigError
from router.executor.dead_letters import dead_letter_batch
from router.executor.partition import PartitionWriter
from router.executor.upsert import key_columns
from router.faults import crash_point
from router.operations.letters import Selection
from router.ledger import Ledger, add_offsets, table_ledger
from router.operations.replay_commits import (
    COORDINATES, ReplayRefused, commit_letters, commit_target, identity, letters_at, superseded_images,
    taken_offsets,
)
from router.source.offsets import tp_key

__all__ = ["ReplayRefused", "ReplayReport", "ReplayWriter", "replay"]
TARGET_TABLE, TARGET_ROUTE = "__replay_table", "__replay_route"
FAILED_MS, CONCERNED, LETTER_ROUTE = "__replay_failed_ms", "__replay_concerned", "__replay_letter_route"
UNROUTED = "replay_unrouted"


def as_source(letters: pa.Table, routes: set[str]) -> pa.Table:
    """The letters' records as the Kafka source gives them, one row per letter, with its target (a
    route no longer in `routes` does not restrict it; the tables it then reaches are not its own)."""
    n = letters.num_rows
    columns = {name: letters.column(name) for name in SOURCE_COLUMNS}
    columns["timestampType"] = pa.array([0] * n, pa.int32())
    columns[TARGET_TABLE] = letters.column("table_name")
    tables, named = letters.column("table_name").to_pylist(), letters.column("route").to_pylist()
    columns[TARGET_ROUTE] = pa.array([r if r in routes else None for r in named], pa.string())
    columns[LETTER_ROUTE] = letters.column("route")
    columns[CONCERNED] = pa.array([t is not None or r is None or r in routes for t, r in zip(tables, named)])
    failed = pc.cast(letters.column("failed_at"), pa.timestamp("us", tz="UTC")).cast(pa.int64())
    columns[FAILED_MS] = pc.fill_null(pc.divide(failed, 1000), 0)
    return pa.table(columns)


# ----------------------------------------------------------------------------- the job's path, for letters

class ReplayWriter(PartitionWriter):
    """The job's partition writer with a replay's rules (module docstring); `dry`: decide, write nothing."""

    def __init__(self, ctx: DispatchContext, dry: bool = False) -> None:
        super().__init__(ctx)
        self.dry = dry
        self.routed: dict[str, set[int]] = defaultdict(set)  # table -> source rows handed to it
        self.already: dict[str, set[int]] = defaultdict(set)  # table -> source rows it holds already
        self.passed: dict[str, set[int]] = defaultdict(set)  # of those, rows it read when their letter was new
        self.taken: dict[str, set[tuple]] = defaultdict(set)  # table -> (key, offset) handed to it in this run
        self.would_write: Counter = Counter()  # dry run: table -> rows
        self.superseded_dry: dict[str, dict] = {}  # dry run: table -> offsets of images a newer row wins over

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

    def not_held(self, table_id: str, rows: pa.Array) -> pa.Array | None:
        """The table's ledger decides per letter (module docstring); a record two letters of this run
        hand to one table goes to it once."""
        ledger = self.held_offsets(table_id)
        source, taken = self.source, self.taken[table_id]
        columns = [pc.take(source.column(c), rows).to_pylist() for c in ("topic", "partition", "offset", FAILED_MS,
                                                                         CONCERNED)]
        keep = []
        for row, topic, partition, offset, failed_ms, concerned in zip(rows.to_pylist(), *columns):
            key = tp_key(topic, partition)
            new = (key, offset) not in taken and not ledger.holds_letter(key, offset, failed_ms, concerned)
            if new:
                taken.add((key, offset))
            else:
                self.already[table_id].add(row)
                if not concerned and not ledger.holds_letter(key, offset, failed_ms):
                    self.passed[table_id].add(row)  # not the letter's table: it does not land the letter
            keep.append(new)
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
            table = load_table(ctx.catalog, table_id)
            current = table.metadata.schema()
        except NoSuchTableError:
            table, current = None, None
        policy = resolve_policy(ctx.policies, items[0].topic if items else "", route.evolution, ctx.tables.auto_create)
        admitted = []
        for item in items:
            if item.iceberg_schema is None:  # tombstones of an upsert table: deletes
                admitted.append(item)
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
                if d.drop_columns and not route.write.cdc:  # as the writer admits them (discard_value)
                    item = dataclasses.replace(item, batch=item.batch.select(
                        [n for n in item.batch.schema.names if n not in d.drop_columns]))
                admitted.append(item)
        if route.write.upsert and table is not None and admitted:
            self.dry_upsert(table, table_id, admitted)
        else:
            self.would_write[table_id] += sum(len(item.rows) for item in admitted)

    def dry_upsert(self, table, table_id: str, items) -> None:
        """An upsert table's letters reduced to one image per key and checked against the live rows as
        the replay does (the upsert writer's reduction, router/executor/upsert.py; `superseded_images`)."""
        route, source = items[0].route, self.source
        key = key_columns(items)
        if key is None:
            self.would_write[table_id] += sum(len(item.rows) for item in items)
            return
        spec = ChangeSpec(DEBEZIUM if route.write.cdc else UPSERT, key, route.write.sequence_by)
        sets = []
        for item in items:
            changes = extract_changes(spec, item.batch, topic=item.topic,
                                      partition=pc.take(source.column("partition"), item.rows),
                                      offset=pc.take(source.column("offset"), item.rows),
                                      kafka_keys=item.keys, rows=item.rows, source=item)
            for bad in changes.bad:
                self.dead_letter(pa.array(bad.rows, pa.int64()), bad.error_class, bad.reason, table=table_id,
                                 route=item.route.name)
            if len(changes):
                sets.append(changes)
        if not sets:
            return
        resolved = last_change_per_key(sets)
        if not resolved.inserts:
            return
        rows = pa.array(np.concatenate([final.rows for final in resolved.inserts]), pa.int64())
        keys = pa.concat_tables([final.image.select(list(key)) for final in resolved.inserts],
                                promote_options="permissive")
        coordinates = source.select(["topic", "partition", "offset", "timestamp"]).take(rows)
        images = pa.Table.from_arrays([*keys.columns, *coordinates.columns],
                                      names=[*keys.column_names, *COORDINATES])  # as the replay's files hold them
        _, lost = superseded_images(table, table_id, resolved.touched, key, images)
        self.would_write[table_id] += images.num_rows - sum(len(v) for v in lost.values())
        self.superseded_dry[table_id] = lost

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
    """(source row -> the new letters of that row that concern its letter, rows whose letter landed).

    A letter lands when a table took its record (or holds it already) and no new letter of it
    concerns that table; a letter whose record no route takes now stays as `replay_unrouted`, unless
    it named no table and the configuration drops unmatched records."""
    targets = ordered.column(TARGET_TABLE).to_pylist()
    routes = ordered.column(TARGET_ROUTE).to_pylist()
    letter_routes = ordered.column(LETTER_ROUTE).to_pylist()
    failing: dict[int, list] = defaultdict(list)
    for letter in writer.letters:
        for row in (letter.rows.to_pylist() if hasattr(letter.rows, "to_pylist") else list(letter.rows)):
            want_table, want_route = targets[row], routes[row]
            if want_table is not None and letter.table not in (None, want_table):
                continue  # another table's failure: the letter is about its own table
            if want_route is not None and letter.route not in (None, want_route):
                continue
            if letter.error_class == "unmatched":
                letter = _unrouted(row, want_table, "no route takes the record now", letter_routes[row])
            failing[row].append(replace(letter, rows=[row]))
    # rows a table took, or holds; a table a gone route's letter does not concern does not land it
    taken = set().union(*(rows - writer.passed.get(t, set()) for t, rows in writer.routed.items()))
    landed = set()
    for row, want_table in enumerate(targets):
        if row in failing:
            continue
        if row in taken or (want_table is None and writer.ctx.unmatched == "drop"):
            landed.add(row)
        else:  # the record no longer routes to the table it failed for: it stays, saying so
            failing[row].append(_unrouted(row, want_table, f"the record no longer routes to {want_table}"
                                          if want_table else "no route takes the record now", letter_routes[row]))
    return failing, landed


def _unrouted(row: int, table: str | None, reason: str, route: str | None):
    """A letter that stays: it keeps its table and route, so a later replay sends it where this one would."""
    from router.executor.dead_letters import DeadLetter

    return DeadLetter([row], UNROUTED, reason, table=table, route=route)


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
    letters = _unique(letters_at(dlq, selection))
    report.selected = letters.num_rows
    if not letters.num_rows:
        return report
    ctx = DispatchContext.for_config(config, -1, commit_in_tasks=False, dlq_producer=None)
    writer = ReplayWriter(ctx, dry=dry_run)
    results = {r.table: r for r in writer.run(as_source(letters, {r.name for r in config.routes}))}
    ordered = writer.source
    failing, landed = _outcomes(writer, ordered)
    identities = [identity({"table_name": t, "route": r, "topic": topic, "partition": p, "offset": o})
                  for t, r, topic, p, o in zip(*(ordered.column(c).to_pylist() for c in (
                      TARGET_TABLE, LETTER_ROUTE, "topic", "partition", "offset")))]
    crash_point("replay_write")
    superseded: dict[str, dict] = {}  # table -> the offsets of its letters a newer row won over
    for table_id, result in sorted(results.items()):
        # the rows this table takes: handed to it, not held already, and no new letter of theirs is about it
        failed_here = {row for row, found in failing.items() for letter in found if letter.table == table_id}
        rows = sorted(r for r in writer.routed.get(table_id, ()) if r not in failed_here
                      and r not in writer.already.get(table_id, ()))
        if not rows or (not result.data_files and result.upsert is None):
            _drop_files(config, result)
            continue
        status, written = commit_target(config, result, taken_offsets(ordered, rows))
        report.rows_by_table[table_id] = written
        crash_point("replay_table")
    if dry_run:
        report.rows_by_table = {t: n for t, n in writer.would_write.items() if n}
        superseded = {t: Ledger(superseded=add_offsets({}, lost)) for t, lost in writer.superseded_dry.items()}
    else:
        superseded = _recorded_supersession(config, list(writer.routed))
    report.superseded = _count_superseded(ordered, landed, writer, superseded)
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
    fresh = dead_letter_batch(ordered.drop_columns([c for c in ordered.column_names if c.startswith("__replay")]),
                              new, config.job.name)
    commit_letters(config, done, fresh, {"runs": 1, "landed": report.landed, "superseded": report.superseded,
                                         "still_failing": report.failed})
    crash_point("replay_letters")
    return report


def _unique(letters: pa.Table) -> pa.Table:
    """One row per letter identity (a record re-dead-lettered keeps its newest time of failure)."""
    newest: dict[tuple, int] = {}
    rows = letters.select(["table_name", "route", "topic", "partition", "offset", "failed_at"]).to_pylist()
    for i, row in enumerate(rows):
        ident = identity(row)
        if ident not in newest or (row["failed_at"] or 0) > (rows[newest[ident]]["failed_at"] or 0):
            newest[ident] = i
    return letters.take(pa.array(sorted(newest.values()), pa.int64()))


def _recorded_supersession(config: RouterConfig, tables: list[str]) -> dict[str, Ledger]:
    """table -> its ledger after the commits: the supersession it recorded, whatever run recorded it."""
    out = {}
    for table_id in tables:
        try:
            out[table_id] = table_ledger(load_table(config.catalog, table_id, refresh=True), config.job.name)
        except NoSuchTableError:
            continue
    return out


def _count_superseded(ordered: pa.Table, landed: set[int], writer: ReplayWriter,
                      superseded: dict[str, Ledger]) -> int:
    """Landed letters whose image lost to a newer row (as the tables' ledgers record, or the dry run's)."""
    topics, partitions, offsets = (ordered.column(c).to_pylist() for c in ("topic", "partition", "offset"))
    count = 0
    for row in landed:
        key = tp_key(topics[row], partitions[row])
        for table_id, lost in superseded.items():
            if row not in writer.routed.get(table_id, ()):
                continue
            if lost.was_superseded(key, offsets[row]):
                count += 1
                break
    return count


def _drop_files(config: RouterConfig, result: TableResult) -> None:
    """Files a result wrote that no commit takes (the dead-letter table's, a table's whose letters stay)."""
    if result.data_files:
        try:
            table = load_table(config.catalog, result.table)
            delete_quietly(table.io, [f.file_path for f in result.data_files])
        except Exception:  # an orphan file, removed by maintenance later
            pass
