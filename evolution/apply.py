"""Apply an EvolutionPlan with pyiceberg's UpdateSchema (the only impure module here).

``apply_plan`` stages the changes inside a caller's ``Transaction`` so the
router can commit schema update + fast append + offset properties atomically;
given a ``Table`` it commits on its own. Before touching anything it checks
that the table still has the schema the plan was made from: if not, it raises
``ApplyError`` (transient) so the caller reloads and plans again. A new-table
plan is not applied here: the caller creates the table from ``plan.target``
with its own properties and partition spec.
"""
from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction

from evolution.changes import AddColumn, EvolutionPlan, MakeOptional, RenameColumn, WidenColumn
from evolution.exceptions import ApplyError, EvolutionViolation
from evolution.policy import Mode

__all__ = ["apply_plan"]


def _raise_if_frozen(plan: EvolutionPlan) -> None:
    frozen = plan.violations_by_outcome(Mode.FREEZE)
    if frozen:
        v = frozen[0]
        raise EvolutionViolation(v.reason, table=plan.table, column=".".join(v.path) or None,
                                 kind=v.kind)


def _current_schema(target: Table | Transaction) -> Schema:
    if isinstance(target, Transaction):
        return target.table_metadata.schema()
    return target.schema()


def apply_plan(transaction_or_table: Table | Transaction, plan: EvolutionPlan,
               case_sensitive: bool = True) -> Schema:
    """Stage (Transaction) or commit (Table) the plan's changes; return the new schema."""
    _raise_if_frozen(plan)
    if plan.new_table:
        raise ApplyError("plan creates a new table; create it from plan.target", table=plan.table)
    current = _current_schema(transaction_or_table)
    if plan.current is None or current.as_struct() != plan.current.as_struct():
        raise ApplyError("table schema changed since the plan was made; plan again",
                         table=plan.table)
    if not plan.changes:
        return current
    update = transaction_or_table.update_schema(allow_incompatible_changes=False,
                                                case_sensitive=case_sensitive)
    try:
        for change in plan.changes:
            _stage(update, change)
        update.commit()
    except (ValueError, TypeError) as exc:  # pyiceberg raises ValueError/ValidationError
        raise ApplyError(str(exc), table=plan.table) from exc
    return _current_schema(transaction_or_table) if isinstance(
        transaction_or_table, Transaction) else transaction_or_table.refresh().schema()


def _stage(update: Any, change: Any) -> None:
    if isinstance(change, AddColumn):
        update.add_column(change.path, change.type, doc=change.doc, required=False)
    elif isinstance(change, WidenColumn):
        update.update_column(change.path, field_type=change.to_type)
    elif isinstance(change, MakeOptional):
        update.make_column_optional(change.path)
    elif isinstance(change, RenameColumn):
        update.rename_column(change.path, change.new_name)
    else:  # pragma: no cover - closed union
        raise TypeError(f"unknown change {change!r}")
