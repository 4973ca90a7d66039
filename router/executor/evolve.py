"""Executor side evolution: decide per writer schema, then apply once per table.

Why on the executors: data files carry Iceberg field ids, so a new column must
exist in the table before a file with it is written. The alternative, a first
Spark pass that only collects schema ids, re-reads Kafka for every batch (the
batch DataFrame is lazy) and doubled the source cost; schema changes are rare,
so the executors commit them directly, in a transaction of their own. The
commit is idempotent: after a conflict we back off, refresh and re-plan, and a
plan that is already applied is a no-op; after SCHEMA_COMMIT_ATTEMPTS we give
up. The data append is a later, separate commit (router/catalog/commit.py), by
the task that wrote the files (``job.commit_in_tasks``, the default) or by the
driver. A missing table is created here, or, with ``tables.auto_create`` off,
its records are dead-lettered.

The table's layout goes the same way: the configured partition spec and sort order
(route over ``tables``) are planned with the columns (``plan_table``, evolution/layout.py),
a change is applied in the same idempotent commit loop, and a frozen one fails the table
with the decision's one-line reason like a frozen column change.

Decision per (table, writer schema), taken by ``router.decisions.decide_schema``
from the plan `plan` and `check` compute too (``plan_table``): the policy
outcome of its violations (worst wins) gives the action. discard_value: write,
without the offending top-level columns; discard_row: drop the records; dlq:
dead-letter them; freeze: fail, the table is failed for this batch and its
records are dead-lettered with the reason (router/executor/partition.py), so
nothing is lost and the other tables are not held up.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, replace
from typing import Any, Hashable, Sequence

from cachetools import LRUCache

from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.schema import Schema

from evolution.apply import apply_plan
from evolution.changes import MappedSchema
from evolution.exceptions import ApplyError
from evolution.layout import Layout, TableLayout
from evolution.policy import EvolutionPolicy
from router.catalog import backoff, create_table, load_table
from router.config import CatalogConfig, TablesConfig
from router.decisions import (
    SchemaDecision, decide_format, decide_schema, plan_table, table_layout, wanted_format_version,
)
from router.table_writes import APPEND, TableWrite

log = logging.getLogger("icerouter.evolve")

SCHEMA_COMMIT_ATTEMPTS = 8

#: Settled tables: (table uuid, current schema id, incoming schemas, policy...) -> the decisions
#: for a table that needed no change. A few hundred tables a worker, a few writer schemas each.
SETTLED_CACHE_SIZE = 4096
_settled: LRUCache = LRUCache(maxsize=SETTLED_CACHE_SIZE)
_settled_lock = threading.Lock()


@dataclass
class TableDecision:
    table: Any  # pyiceberg Table, None when nothing is written
    per_schema: dict[int, SchemaDecision] = field(default_factory=dict)
    changes: list[str] = field(default_factory=list)


def evolve_table(catalog: CatalogConfig, tables: TablesConfig, table_id: str,
                 incoming: dict[int, Schema | MappedSchema], policy: EvolutionPolicy,
                 route_layout: Layout | None = None, write: TableWrite = APPEND,
                 key: Sequence[str] | None = None, format_version: int | None = None) -> TableDecision:
    """Make `table_id` ready for the writable schemas in `incoming`; returns the decisions.

    `route_layout`: the route's own partition_by / sort_by (``tables`` fills what it leaves unset);
    the table's layout is planned and applied with its columns, under the same policy.
    `format_version`: the route's (None: ``tables.format_version``), for a table created here."""
    case_sensitive = tables.case_sensitive
    layout = table_layout(tables, *((route_layout.partition_by, route_layout.sort_by) if route_layout else ()))
    try:
        table = load_table(catalog, table_id)
        metadata = table.metadata  # one read: another thread may refresh the cached handle in place
        current = metadata.schema()
    except NoSuchTableError:
        table, metadata, current = None, None, None

    settled = _settled_key(metadata, table_id, incoming, policy, case_sensitive, write, key, layout)
    with _settled_lock:
        hit = _settled.get(settled) if settled is not None else None
    if hit is not None and all(a is b for a, b in zip(hit[0], incoming.values())):
        return TableDecision(table, {sid: replace(d) for sid, d in hit[1].items()})

    decision = TableDecision(table)
    for attempt in range(SCHEMA_COMMIT_ATTEMPTS):
        shape = TableLayout.of(metadata) if metadata is not None else None
        decision.per_schema = {sid: decide_schema(current, s, policy, case_sensitive, table_id, write, key,
                                                  layout, shape) for sid, s in incoming.items()}
        writable = [_without(incoming[sid], d.drop_columns) for sid, d in decision.per_schema.items()
                    if d.action == "write"]
        if not writable:
            _settle(metadata, table_id, incoming, policy, case_sensitive, write, key, layout, decision)
            return decision
        plan = plan_table(current, writable, policy, case_sensitive, table_id, write, key, layout, shape)
        if current is None:
            if not tables.auto_create:
                for d in decision.per_schema.values():
                    d.action, d.reason = "dlq", f"table {table_id} does not exist and tables.auto_create is off"
                return decision
            created = decide_format(None, wanted_format_version(tables.format_version, format_version))
            decision.table = create_table(catalog, table_id, plan.target, layout.partition_by or (),
                                          {**tables.properties, "format-version": str(created.wanted)},
                                          sort_by=layout.sort_by or ())
            decision.changes.append(f"created {table_id}")
            table = decision.table
            metadata = table.metadata
            current = metadata.schema()
            continue  # re-plan against what the catalog really has (someone may have won the race)
        if not plan.changes:
            decision.table = table
            _settle(metadata, table_id, incoming, policy, case_sensitive, write, key, layout, decision)
            return decision
        try:
            with table.transaction() as tx:
                apply_plan(tx, plan, case_sensitive=case_sensitive)
            decision.changes += [c.describe() for c in plan.changes]
            log.info("evolved %s: %s", table_id, "; ".join(c.describe() for c in plan.changes))
        except (CommitFailedException, ApplyError):
            backoff(attempt)  # someone else changed the schema: refresh and re-plan
        table = load_table(catalog, table_id, refresh=True)
        metadata = table.metadata
        current = metadata.schema()
    raise CommitFailedException(f"schema of {table_id} kept changing under us; gave up after "
                                f"{SCHEMA_COMMIT_ATTEMPTS} attempts")


def _settled_key(metadata: Any, table_id: str, incoming: dict, policy: EvolutionPolicy, case_sensitive: bool,
                 write: TableWrite, key: Sequence[str] | None, layout: Layout) -> Hashable | None:
    """What the decisions for an existing table depend on; None when there is no table yet.

    The decisions are pure functions of the table's current schema and the incoming
    schemas (router.decisions), so a table that needed no change for the same inputs
    needs none again: the re-planning (~0.7 ms a table) is skipped. The table's schema
    is named by its uuid and current schema id (an Iceberg table never reuses a schema
    id, a re-created table has a new uuid), so a schema evolved by another writer is a
    new key. Incoming schemas are named by identity (``table_view`` returns the same
    object for the same writer schema and route), checked on a hit. The layout decisions
    depend on the table's spec and sort order (ids never reused either) and the configured layout.
    """
    if metadata is None:
        return None
    return (str(metadata.table_uuid), metadata.current_schema_id, table_id, metadata.default_spec_id,
            metadata.default_sort_order_id, layout,
            tuple((sid, id(s)) for sid, s in incoming.items()), policy, case_sensitive, write,
            tuple(key) if key is not None else None)


def _settle(metadata: Any, table_id: str, incoming: dict, policy: EvolutionPolicy, case_sensitive: bool,
            write: TableWrite, key: Sequence[str] | None, layout: Layout, decision: TableDecision) -> None:
    """Remember the decisions for a table that needed no change (its schema as `metadata` has it)."""
    settled = _settled_key(metadata, table_id, incoming, policy, case_sensitive, write, key, layout)
    if settled is None:
        return
    entry = (tuple(incoming.values()), {sid: replace(d) for sid, d in decision.per_schema.items()})
    with _settled_lock:
        _settled[settled] = entry


def clear_cache() -> None:
    """Forget the settled tables (tests)."""
    with _settled_lock:
        _settled.clear()


def _without(schema: Schema | MappedSchema, columns: Sequence[str]) -> Schema | MappedSchema:
    if not columns:
        return schema
    if isinstance(schema, MappedSchema):
        aliases = {p: a for p, a in schema.aliases.items() if p and p[0] not in columns}
        return MappedSchema(_without(schema.schema, columns), aliases, schema.source)
    keep = [f for f in schema.fields if f.name not in columns]
    return Schema(*keep, schema_id=schema.schema_id)
