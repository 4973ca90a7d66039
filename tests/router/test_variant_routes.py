"""Variant routes at config load (router/config/formats.py, router/config/load.py): the syntax, and the
one-line refusals (a format 2 table, an upsert, a filter on a variant field, a declared schema); and the
decision the job and `plan` share for a variant column headed for a table still at v2 (router/decisions.py)."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.types import LongType, NestedField

from evolution.layout import TableLayout
from evolution.policy import EvolutionPolicy, Mode
from evolution.variant_type import VariantType
from router.decisions import decide, plan_table

from router.config import parse_config
from router.exceptions import ConfigError


def config(route: dict, tables: dict | None = None):
    return parse_config({"kafka": {"bootstrap_servers": "b:9092", "topics": ["t"]},
                         "tables": tables or {}, "routes": [{"name": "r", "table": "db.t", **route}]})


def test_variant_syntax():
    fmt = config({"format": {"type": "json", "variant": True}}, {"format_version": 3}).routes[0].format
    assert fmt.variant_column == "value" and fmt.variant == () and fmt.has_variant and not fmt.inferred
    fmt = config({"format_version": 3, "format": {"type": "json", "variant": True, "variant_column": "doc"}}
                 ).routes[0].format
    assert fmt.variant_column == "doc"
    fmt = config({"format_version": 3, "format": {"type": "json", "variant": ["payload", "attrs"],
                                                  "numbers": "double"}}).routes[0].format
    assert fmt.variant == ("payload", "attrs") and fmt.inferred and fmt.numbers == "double"
    assert "variant payload, attrs" in fmt.describe()


@pytest.mark.parametrize("route, tables, message", [
    ({"format": {"type": "json", "variant": True}}, None,
     "routes[0].format.variant: variant columns need Iceberg format v3 (tables.format_version is 2"),
    ({"format_version": 2, "format": {"type": "json", "variant": ["p"]}}, {"format_version": 3},
     "(routes[0].format_version is 2"),
    ({"format_version": 3, "mode": "upsert", "key": ["id"], "format": {"type": "json", "variant": ["p"]}}, None,
     "variant columns are for append routes"),
    ({"format_version": 3, "fields": {"p.kind": "x"}, "format": {"type": "json", "variant": ["p"]}}, None,
     "routes[0].fields.p.kind: a variant column cannot be filtered on"),
    ({"format_version": 3, "format": {"type": "json", "variant": ["p"], "variant_column": "x"}}, None,
     "variant_column: only with variant: true"),
    ({"format_version": 3, "format": {"type": "json", "variant": ["a.b"]}}, None, "top-level field names"),
    ({"format_version": 3, "format": {"type": "json", "variant": True, "numbers": "double"}}, None,
     "with variant: true nothing is inferred"),
    ({"format_version": 3, "format": {"type": "connect_json", "variant": True}}, None,
     "only a json format has one"),
    ({"format_version": 3, "format": {"type": "json", "subject": "s-value", "variant": True}}, None,
     "variant is for inferred json"),
])
def test_refusals_are_one_line_with_their_path(route, tables, message):
    with pytest.raises(ConfigError) as info:
        config(route, tables)
    assert message in str(info.value) and "\n" not in str(info.value)


CURRENT = Schema(NestedField(1, "id", LongType()))
INCOMING = Schema(NestedField(1, "id", LongType()), NestedField(2, "payload", VariantType()))


@pytest.mark.parametrize("version, policy, action", [
    (3, EvolutionPolicy(), "write"),
    (2, EvolutionPolicy(), "dlq"),  # new_column evolve: the column cannot be added yet, the records wait in the DLQ
    (2, EvolutionPolicy(new_column=Mode.DISCARD_VALUE), "write"),  # written without it
    (2, EvolutionPolicy(new_column=Mode.FREEZE), "fail"),
])
def test_a_variant_column_waits_for_the_upgrade_of_a_v2_table(version, policy, action):
    layout = TableLayout(PartitionSpec(), UNSORTED_SORT_ORDER, version)
    plan = plan_table(CURRENT, [INCOMING], policy, True, "db.t", current_layout=layout)
    decision = decide(plan)
    assert decision.action == action
    if version == 3:
        assert [c.describe() for c in plan.changes] == ["+ payload: optional variant"]
    else:  # the policy's own refusal where it refuses new columns anyway
        assert plan.changes == ()
        assert ("needs a format v3 table (this one is v2" in decision.reason) == (action == "dlq")
        assert decision.drop_columns == (("payload",) if action == "write" else ())
