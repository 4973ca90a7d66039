"""A table's layout (partition spec and sort order) planned like its columns. Pure.

The configuration names a layout in terms (``partition_by: [day(ts), bucket(16, id)]``,
``sort_by: [id, ts desc nulls last]``); a table holds a PartitionSpec and a SortOrder.
``plan_layout`` compares the two on the table's schema and yields the changes that
bring the table to the configured layout, or, where the policy freezes them
(``partition_change`` / ``sort_order_change``), the violations that refuse them.

Rules, in short:

* a layout left unset (``None``) is not managed: an existing table keeps whatever
  spec or order it has, so tables made elsewhere are never rewritten by default;
* a term whose column is not in the schema, or whose transform cannot take the
  column's type, is left out (with a note): the same terms create and evolve a table;
* partition specs compare as sets of (column, transform): fields the configuration
  keeps stay where they are, removed ones go, new ones are added at the end, so an
  evolved spec is never planned again for being in another order; old data files
  stay in the spec they were written in (Iceberg's partition evolution);
* sort orders compare in order (a sort order is a sequence); ascending sorts put
  nulls first and descending ones nulls last unless the term says otherwise
  (Iceberg's defaults).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortOrder
from pyiceberg.transforms import VoidTransform

from evolution.changes import Change, ChangePartitionSpec, ChangeSortOrder, Violation
from evolution.layout_terms import (
    TRANSFORM_NAMES, Layout, PartitionTerm, SortTerm, parse_partition_term, parse_sort_term, partition_field_name,
    transform_term,
)
from evolution.policy import EvolutionPolicy, Mode
from evolution.variant_type import is_variant

__all__ = ["Layout", "TableLayout", "PartitionTerm", "SortTerm", "TRANSFORM_NAMES", "parse_partition_term",
           "parse_sort_term", "partition_terms", "sort_terms", "usable_partition_terms", "usable_sort_terms",
           "plan_layout", "partition_field_name"]


def _column(schema: Schema, source_id: int) -> str:
    return schema.find_column_name(source_id) or f"<field {source_id}>"


def partition_terms(spec: PartitionSpec, schema: Schema) -> tuple[str, ...]:
    """A spec as the configuration would name it (void fields, left by v1 removals, are not terms)."""
    out = []
    for f in spec.fields:
        if isinstance(f.transform, VoidTransform):
            continue
        term = transform_term(f.transform, _column(schema, f.source_id))
        out.append(str(term) if term is not None else f"{f.transform}({_column(schema, f.source_id)})")
    return tuple(out)


def sort_terms(order: SortOrder, schema: Schema) -> tuple[str, ...]:
    out = []
    for f in order.fields:
        term = transform_term(f.transform, _column(schema, f.source_id))
        if term is None:
            out.append(f"{f.transform}({_column(schema, f.source_id)}) {f.direction} {f.null_order}")
            continue
        out.append(str(SortTerm(term, f.direction == SortDirection.DESC, f.null_order == NullOrder.NULLS_FIRST)))
    return tuple(out)


def _usable(schema: Schema, term: PartitionTerm, notes: list[str], what: str) -> bool:
    try:
        field = schema.find_field(term.column)
    except ValueError:
        return False  # applied where the column exists: tables without it take the others
    if is_variant(field.field_type):  # pyiceberg's identity takes any primitive; the spec takes no variant
        notes.append(f"{what} {term}: a variant column cannot be a {what.split('_')[0]} term; left out")
        return False
    if not term.to_transform().can_transform(field.field_type):
        notes.append(f"{what} {term}: {term.transform} cannot take a {field.field_type} column; left out")
        return False
    return True


def usable_partition_terms(schema: Schema, partition_by: Sequence[str], notes: list[str] | None = None
                           ) -> tuple[PartitionTerm, ...]:
    """The configured partition terms this schema can take, in configuration order, without duplicates."""
    notes = notes if notes is not None else []
    terms = dict.fromkeys(parse_partition_term(t) for t in partition_by)
    return tuple(t for t in terms if _usable(schema, t, notes, "partition_by"))


def usable_sort_terms(schema: Schema, sort_by: Sequence[str], notes: list[str] | None = None) -> tuple[SortTerm, ...]:
    notes = notes if notes is not None else []
    terms = [parse_sort_term(t) for t in sort_by]
    seen, out = set(), []
    for t in terms:
        if t.term not in seen and _usable(schema, t.term, notes, "sort_by"):
            seen.add(t.term)
            out.append(t)
    return tuple(out)


@dataclass(frozen=True)
class TableLayout:
    """The layout a table has: its default partition spec and sort order, and its format version (what
    types it may hold: a variant column needs v3)."""

    spec: PartitionSpec
    sort_order: SortOrder
    format_version: int = 2

    @classmethod
    def of(cls, metadata: Any) -> TableLayout:
        return cls(metadata.spec(), metadata.sort_order(), int(metadata.format_version))


def _frozen(entity: str, mode: Mode, what: str, before: tuple[str, ...], after: tuple[str, ...],
            empty: str) -> Violation:
    return Violation((), entity, f"{what} {', '.join(before) or empty} -> {', '.join(after) or empty}", mode)


def plan_layout(schema: Schema, current: TableLayout | None, desired: Layout | None,
                policy: EvolutionPolicy) -> tuple[tuple[Change, ...], tuple[Violation, ...], tuple[str, ...]]:
    """What brings a table of ``schema`` with layout ``current`` (None: a table yet to be created) to
    ``desired``: (changes, violations, notes). For a new table the changes describe the layout it is
    created with (no policy applies: ``new_table`` decides whether it is created at all)."""
    changes: list[Change] = []
    violations: list[Violation] = []
    notes: list[str] = []
    if desired is None:
        return (), (), ()
    if desired.partition_by is not None:
        want = tuple(str(t) for t in usable_partition_terms(schema, desired.partition_by, notes))
        have = partition_terms(current.spec, schema) if current is not None else ()
        if set(want) != set(have) and (want or current is not None):
            after = tuple(t for t in have if t in want) + tuple(t for t in want if t not in have)
            if current is None or policy.partition_change is Mode.EVOLVE:
                changes.append(ChangePartitionSpec(have, after))
            else:
                violations.append(_frozen("partition_change", policy.partition_change, "partition spec", have,
                                          after, "unpartitioned"))
    if desired.sort_by is not None:
        want = tuple(str(t) for t in usable_sort_terms(schema, desired.sort_by, notes))
        have = sort_terms(current.sort_order, schema) if current is not None else ()
        if want != have and (want or current is not None):
            if current is None or policy.sort_order_change is Mode.EVOLVE:
                changes.append(ChangeSortOrder(have, want))
            else:
                violations.append(_frozen("sort_order_change", policy.sort_order_change, "sort order", have, want,
                                          "unsorted"))
    return tuple(changes), tuple(violations), tuple(notes)
