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
newer change deleted has no row left to compare with: its older image comes back.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import NoSuchTableError

from router.catalog import load_table
from router.catalog.dead_letter_table import SOURCE_COLUMNS
from router.catalog.tables import delete_quietly
from router.config import RouterConfig
from router.decisions import decide_schema, resolve_policy
from router.descriptors import DispatchContext, TableResult
from router.exceptions import ConfigError
from router.executor.dead_letters import dead_letter_batch
from router.executor.partition import PartitionWriter
from router.faults import crash_point
from router.operations.letters import Selection
from router.operations.replay_commits import (
    REPLAYED_PROPERTY, ReplayRefused, commit_letters, commit_target, holds, identity, letters_at, parse_ranges,
    taken_offsets,
)
from router.source.offsets import tp_key

__all__ = ["REPLAYED_PROPERTY", "ReplayRefused", "ReplayReport", "ReplayWriter", "replay"]
TARGET_TABLE, TARGET_ROUTE = "__replay_table", "__replay_route"


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
    identities = [identity({"table_name": t, "route": r, "topic": topic, "partition": p, "offset": o})
                  for t, r, topic, p, o in zip(*(ordered.column(c).to_pylist() for c in (
                      TARGET_TABLE, TARGET_ROUTE, "topic", "partition", "offset")))]
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
