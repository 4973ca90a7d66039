"""Layout planning (evolution/layout.py): terms, changes, refusals under the policy. Pure, no catalog."""
from __future__ import annotations

import pytest
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, NullOrder, SortDirection, SortField, SortOrder
from pyiceberg.transforms import BucketTransform, DayTransform, IdentityTransform, VoidTransform
from pyiceberg.types import LongType, NestedField, StringType, TimestamptzType

from evolution.changes import ChangePartitionSpec, ChangeSortOrder
from evolution.exceptions import PolicyConfigError
from evolution.layout import (
    Layout, TableLayout, parse_partition_term, parse_sort_term, partition_terms, plan_layout, sort_terms,
)
from evolution.policy import EvolutionPolicy, Mode, PolicySet

SCHEMA = Schema(NestedField(1, "id", LongType()), NestedField(2, "ts", TimestamptzType()),
                NestedField(3, "name", StringType()))
DAY_TS = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"))
BY_ID_DESC = SortOrder(SortField(1, IdentityTransform(), SortDirection.DESC, NullOrder.NULLS_LAST), order_id=1)


def test_terms_parse_to_canonical_text() -> None:
    assert str(parse_partition_term(" bucket( 16 ,id ) ")) == "bucket(16, id)"
    assert str(parse_partition_term("day(ts)")) == "day(ts)"
    assert str(parse_sort_term("id")) == "id asc nulls first"  # Iceberg's default null order per direction
    assert str(parse_sort_term("ts DESC")) == "ts desc nulls last"
    assert str(parse_sort_term("day(ts) asc nulls last")) == "day(ts) asc nulls last"
    assert str(parse_sort_term("bucket(4, id) desc nulls first")) == "bucket(4, id) desc nulls first"
    for bad, message in [("weekly(ts)", "is not one of"), ("bucket(id)", "needs a width"),
                         ("day(3, ts)", "takes no width"), ("id", "is not one of")]:
        with pytest.raises(ValueError, match=message):
            parse_partition_term(bad)
    with pytest.raises(ValueError, match="is not one of <column> or"):
        parse_sort_term("id sideways")


def test_a_table_layout_reads_back_as_terms() -> None:
    spec = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"),
                         PartitionField(1, 1001, BucketTransform(16), "id_bucket"),
                         PartitionField(3, 1002, VoidTransform(), "name"))  # a v1 removal: not a term
    assert partition_terms(spec, SCHEMA) == ("day(ts)", "bucket(16, id)")
    assert sort_terms(BY_ID_DESC, SCHEMA) == ("id desc nulls last",)
    assert sort_terms(UNSORTED_SORT_ORDER, SCHEMA) == ()


def test_unset_layout_leaves_the_table_alone_and_empty_lists_reset_it() -> None:
    current = TableLayout(DAY_TS, BY_ID_DESC)
    assert plan_layout(SCHEMA, current, Layout(), EvolutionPolicy()) == ((), (), ())
    changes, violations, _ = plan_layout(SCHEMA, current, Layout((), ()), EvolutionPolicy())
    assert changes == (ChangePartitionSpec(("day(ts)",), ()), ChangeSortOrder(("id desc nulls last",), ()))
    assert [c.describe() for c in changes] == ["~ partition spec: day(ts) -> unpartitioned",
                                               "~ sort order: id desc nulls last -> unsorted"]
    assert not violations


def test_spec_changes_keep_the_fields_that_stay_and_are_planned_once() -> None:
    current = TableLayout(DAY_TS, UNSORTED_SORT_ORDER)
    desired = Layout(("bucket(8, id)", "day(ts)"), None)
    [change], _, _ = plan_layout(SCHEMA, current, desired, EvolutionPolicy())
    assert change.to_terms == ("day(ts)", "bucket(8, id)")  # kept first, added after
    assert change.to_dict() == {"kind": "partition_spec", "path": [], "from": ["day(ts)"],
                                "to": ["day(ts)", "bucket(8, id)"]}
    evolved = PartitionSpec(PartitionField(2, 1000, DayTransform(), "ts_day"),
                            PartitionField(1, 1001, BucketTransform(8), "id_bucket"))
    assert plan_layout(SCHEMA, TableLayout(evolved, UNSORTED_SORT_ORDER), desired, EvolutionPolicy()) == ((), (), ())


def test_sort_orders_compare_in_order() -> None:
    current = TableLayout(PartitionSpec(), SortOrder(
        SortField(1, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST),
        SortField(3, IdentityTransform(), SortDirection.ASC, NullOrder.NULLS_FIRST), order_id=1))
    assert plan_layout(SCHEMA, current, Layout(None, ("id", "name")), EvolutionPolicy()) == ((), (), ())
    [change], _, _ = plan_layout(SCHEMA, current, Layout(None, ("name", "id")), EvolutionPolicy())
    assert change == ChangeSortOrder(("id asc nulls first", "name asc nulls first"),
                                     ("name asc nulls first", "id asc nulls first"))


def test_terms_the_schema_cannot_take_are_left_out_with_a_note() -> None:
    desired = Layout(("day(name)", "identity(missing)", "identity(name)"), ("missing desc", "id"))
    changes, violations, notes = plan_layout(SCHEMA, None, desired, EvolutionPolicy())
    assert changes == (ChangePartitionSpec((), ("identity(name)",)), ChangeSortOrder((), ("id asc nulls first",)))
    assert notes == ("partition_by day(name): day cannot take a string column; left out",)
    assert not violations


def test_a_new_table_describes_its_layout_whatever_the_policy() -> None:
    frozen = EvolutionPolicy(partition_change=Mode.FREEZE, sort_order_change=Mode.FREEZE)
    changes, violations, _ = plan_layout(SCHEMA, None, Layout(("day(ts)",), ("id desc",)), frozen)
    assert changes == (ChangePartitionSpec((), ("day(ts)",)), ChangeSortOrder((), ("id desc nulls last",)))
    assert violations == ()


def test_frozen_layout_changes_are_violations_naming_both_layouts() -> None:
    frozen = EvolutionPolicy(partition_change=Mode.FREEZE, sort_order_change=Mode.FREEZE)
    changes, violations, _ = plan_layout(SCHEMA, TableLayout(DAY_TS, BY_ID_DESC),
                                         Layout(("hour(ts)",), ("name",)), frozen)
    assert changes == ()
    assert [(v.kind, v.reason, v.outcome) for v in violations] == [
        ("partition_change", "partition spec day(ts) -> hour(ts)", Mode.FREEZE),
        ("sort_order_change", "sort order id desc nulls last -> name asc nulls first", Mode.FREEZE)]
    assert all(v.blocking for v in violations)


def test_layout_policy_entities_take_evolve_and_freeze_only() -> None:
    policies = PolicySet.from_config({"partition_change": "freeze"}, {"legacy\\..*": {"sort_order_change": "freeze"}})
    assert policies.resolve("orders").partition_change is Mode.FREEZE
    assert policies.resolve("orders").sort_order_change is Mode.EVOLVE
    assert policies.resolve("legacy.a").sort_order_change is Mode.FREEZE
    route = policies.resolve("legacy.a", {"partition_change": "evolve"})  # route over topic over default
    assert (route.partition_change, route.sort_order_change) == (Mode.EVOLVE, Mode.FREEZE)
    # a shorthand sets the layout entities only where its mode is legal for them
    assert EvolutionPolicy.from_spec("freeze").partition_change is Mode.FREEZE
    assert EvolutionPolicy.from_spec("dlq").partition_change is Mode.EVOLVE
    for mode in ("dlq", "discard_row", "discard_value"):
        with pytest.raises(PolicyConfigError, match="layout change concerns the table"):
            EvolutionPolicy.from_spec({"partition_change": mode})
    with pytest.raises(PolicyConfigError, match="unknown key 'layout_change'"):
        EvolutionPolicy.from_spec({"layout_change": "freeze"})
