"""How a route writes its table (append or upsert by key), and what an upsert table refuses.

Shared by the executors, the driver's start check, `plan` and `check`, so that
a key problem reads the same everywhere. Pure: pyiceberg schemas in, plan
adjustments and reasons out.

A table is an upsert table exactly when its schema has identifier fields (the
key columns, required, top-level, primitive and not float/double as the
Iceberg spec asks). Switching a table between append and upsert, or to other
key columns, is refused: rows written under one rule cannot be re-keyed in place.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

from pyiceberg.schema import Schema

from evolution.changes import EvolutionPlan, MakeOptional, MappedSchema, Violation, WidenColumn
from evolution.policy import Mode
from router.changes.envelope import check_key_columns

__all__ = ["TableWrite", "APPEND", "table_key", "mode_conflict", "key_problems", "with_key", "apply_write"]


@dataclass(frozen=True)
class TableWrite:
    """A route's write rule (route keys mode, key, cdc, sequence_by; checked at load)."""

    mode: str = "append"  # append | upsert (the latest row per key)
    key: tuple[str, ...] | None = None  # upsert key columns; None: the fields of the Kafka record key
    cdc: str | None = None  # "debezium": values are change envelopes (op, before, after, source)
    sequence_by: str | None = None  # column path ordering changes of one key across partitions/topics

    @property
    def upsert(self) -> bool:
        return self.mode == "upsert"


APPEND = TableWrite()


def table_key(schema: Schema | None) -> tuple[str, ...]:
    """The key columns of an existing table (empty: an append table)."""
    if schema is None:
        return ()
    return tuple(schema.find_column_name(i) for i in sorted(schema.identifier_field_ids))


def mode_conflict(table: str, schema: Schema | None, write: TableWrite, key: Sequence[str] | None = None) -> str | None:
    """Why `write` cannot go to the existing table (None: it can). `key`: the resolved key columns."""
    if schema is None:
        return None
    held = table_key(schema)
    key = tuple(key or write.key or ())
    if not write.upsert and held:
        return (f"table {table} is an upsert table keyed by {', '.join(held)}; an append route cannot write it "
                "(set mode: upsert on the route, or route to another table)")
    if write.upsert and not held:
        return (f"table {table} is an append table; switching it to upsert is refused (its rows have no key "
                "to replace by): route the changes to a new table")
    if write.upsert and key and tuple(sorted(key)) != tuple(sorted(held)):
        return f"table {table} is keyed by {', '.join(held)}, the route by {', '.join(key)}"
    return None


def key_problems(schema: Schema, key: Sequence[str]) -> list[tuple[str, str]]:
    """(column, reason) for each key column a writer schema cannot key a table by.

    An optional key column is fine here: the table keeps its key required and a
    record whose key is null is dead-lettered on its own (router/changes/extract.py).
    """
    return [(p.column, str(p)) for p in check_key_columns(schema, key) if p.kind != "optional"]


def with_key(schema: Schema, key: Sequence[str]) -> Schema:
    """`schema` with its key columns required and set as the identifier fields (a new upsert table)."""
    wanted = set(key)
    fields = [f.model_copy(update={"required": True}) if f.name in wanted else f for f in schema.fields]
    ids = [f.field_id for f in fields if f.name in wanted]
    return Schema(*fields, schema_id=schema.schema_id, identifier_field_ids=ids)


def apply_write(plan: EvolutionPlan, incoming: Sequence[Schema | MappedSchema], write: TableWrite,
                key: Sequence[str] | None = None) -> EvolutionPlan:
    """The evolution plan adjusted for an upsert table: key checks as violations, keyed target.

    A key column missing from a writer schema, or of a type no key can have,
    dead-letters that schema's records; the table's own key columns stay
    required (a null key is a bad record, never a reason to relax the table)
    and are never retyped (another type is another key).
    """
    key = tuple(key or write.key or ())
    table = plan.table or "<table>"
    conflict = mode_conflict(table, plan.current, write, key)
    if conflict:
        return replace(plan, changes=(), violations=(Violation((), "table_mode", conflict, Mode.FREEZE),),
                       new_table=False, target=plan.current)
    if not write.upsert or not key:
        return plan
    violations = list(plan.violations)
    for view in incoming:
        schema = view.schema if isinstance(view, MappedSchema) else view
        violations += [Violation((column,), "key_column", reason, Mode.DLQ)
                       for column, reason in key_problems(schema, key)]
    changes = []
    for change in plan.changes:
        on_key = len(change.path) == 1 and change.path[0] in key
        if on_key and isinstance(change, MakeOptional):
            continue
        if on_key and isinstance(change, WidenColumn):
            violations.append(Violation(change.path, "key_column", f"key column {change.path[0]!r} would change "
                                        f"type {change.from_type} -> {change.to_type}", Mode.DLQ))
            continue
        changes.append(change)
    target = plan.target
    if plan.new_table and target is not None and not key_problems(target, key):
        target = with_key(target, key)
    notes = plan.notes + ((f"upsert by {', '.join(key)}" + (f", changes ordered by {write.sequence_by}"
                                                           if write.sequence_by else "")),)
    return replace(plan, changes=tuple(changes), violations=tuple(dict.fromkeys(violations)), target=target,
                   notes=notes)
