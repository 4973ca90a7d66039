"""Apply an EvolutionPlan with pyiceberg's UpdateSchema (the only impure module here).

``apply_plan`` stages the changes inside a caller's ``Transaction`` so the
router can commit schema update + fast append + offset properties atomically;
given a ``Table`` it commits on its own. Before touching anything it checks
that the table still has the schema the plan was made from: if not, it raises
``ApplyError`` (transient) so the caller reloads and plans again. A new-table
plan is not applied here: the caller creates the table from ``plan.target``
with its own properties and partition spec.

Layout changes (partition spec, sort order) are staged after the column changes, so a
spec may use a column the same plan adds; each checks that the table still has the layout
it was planned from (``ApplyError`` otherwise, as for the schema).
"""
from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table import Table, Transaction
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.table.update import AddSortOrderUpdate, AssertDefaultSortOrderId, SetDefaultSortOrderUpdate
from pyiceberg.transforms import VoidTransform

from evolution.changes import (
    LAYOUT_CHANGES, AddColumn, ChangePartitionSpec, ChangeSortOrder, EvolutionPlan, MakeOptional, RenameColumn,
    WidenColumn,
)
from evolution.exceptions import ApplyError, EvolutionViolation
from evolution.layout import parse_partition_term, parse_sort_term, partition_field_name, partition_terms, sort_terms
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
    columns = [c for c in plan.changes if not isinstance(c, LAYOUT_CHANGES)]
    try:
        if columns:
            update = transaction_or_table.update_schema(allow_incompatible_changes=False,
                                                        case_sensitive=case_sensitive)
            for change in columns:
                _stage(update, change)
            update.commit()
        for change in plan.changes:
            if isinstance(change, ChangePartitionSpec):
                _stage_spec(transaction_or_table, change, plan.table)
            elif isinstance(change, ChangeSortOrder):
                _stage_sort_order(transaction_or_table, change, plan.table, case_sensitive)
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


def _metadata(target: Table | Transaction) -> Any:
    return target.table_metadata if isinstance(target, Transaction) else target.metadata


def _stage_spec(target: Table | Transaction, change: ChangePartitionSpec, table: str | None) -> None:
    """Fields the new spec drops are removed, new ones added (named as at creation unless the name is
    taken by a field being replaced: then pyiceberg names it, ``id_bucket_32``)."""
    metadata = _metadata(target)
    spec, schema = metadata.spec(), metadata.schema()
    have = partition_terms(spec, schema)
    if have != change.from_terms:
        raise ApplyError("partition spec changed since the plan was made; plan again", table=table)
    update = target.update_spec()
    names = {f.name for f in spec.fields}
    for f, term in zip([f for f in spec.fields if not isinstance(f.transform, VoidTransform)], have):
        if term not in change.to_terms:
            update.remove_field(f.name)
    for text in change.to_terms:
        if text in have:
            continue
        term = parse_partition_term(text)
        name = partition_field_name(term)
        update.add_field(term.column, term.to_transform(), None if name in names else name)
    update.commit()


def _stage_sort_order(target: Table | Transaction, change: ChangeSortOrder, table: str | None,
                      case_sensitive: bool) -> None:
    metadata = _metadata(target)
    if sort_terms(metadata.sort_order(), metadata.schema()) != change.from_terms:
        raise ApplyError("sort order changed since the plan was made; plan again", table=table)
    if not change.to_terms and metadata.sort_order_by_id(UNSORTED_SORT_ORDER.order_id) is None:
        _add_unsorted(target, metadata.default_sort_order_id)
        return
    update = target.update_sort_order(case_sensitive=case_sensitive)
    for text in change.to_terms:
        term = parse_sort_term(text)
        add = update.desc if term.descending else update.asc
        add(term.term.column, term.term.to_transform(), term.null_order)
    update.commit()


def _add_unsorted(target: Table | Transaction, current_id: int) -> None:
    """Back to unsorted on a table created sorted (it has no order 0): pyiceberg 0.12's UpdateSortOrder
    sets "the last added order" as the highest order id, never 0, and fails; the updates are staged here."""
    if isinstance(target, Table):
        with target.transaction() as tx:
            _add_unsorted(tx, current_id)
        return
    target._apply((AddSortOrderUpdate(sort_order=UNSORTED_SORT_ORDER),
                   SetDefaultSortOrderUpdate(sort_order_id=UNSORTED_SORT_ORDER.order_id)),
                  (AssertDefaultSortOrderId(default_sort_order_id=current_id),))
