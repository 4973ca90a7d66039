"""Policy parsing, validation and resolution (route -> topic pattern -> global)."""
from __future__ import annotations

import pickle

import pytest

from evolution.exceptions import PolicyConfigError
from evolution.policy import EvolutionPolicy, Mode, PolicySet, parse_policy_spec


def test_defaults() -> None:
    p = EvolutionPolicy()
    assert (p.new_table, p.new_column, p.type_change) == (Mode.EVOLVE, Mode.EVOLVE, Mode.DLQ)
    assert p.optional_on_create is True


def test_shorthand_freeze_applies_to_all() -> None:
    p = EvolutionPolicy.from_spec("freeze")
    assert (p.new_table, p.new_column, p.type_change) == (Mode.FREEZE,) * 3


def test_shorthand_evolve_leaves_type_change_default() -> None:
    p = EvolutionPolicy.from_spec("evolve", base=EvolutionPolicy(type_change=Mode.FREEZE))
    assert (p.new_table, p.new_column, p.type_change) == (Mode.EVOLVE, Mode.EVOLVE, Mode.FREEZE)


def test_shorthand_discard_value_skips_new_table() -> None:
    assert parse_policy_spec("discard_value") == {"new_column": Mode.DISCARD_VALUE,
                                                  "type_change": Mode.DISCARD_VALUE}


def test_dict_spec_and_case() -> None:
    p = EvolutionPolicy.from_spec({"new_column": "DLQ", "type_change": "discard_row",
                                   "optional_on_create": False})
    assert p.new_column is Mode.DLQ and p.type_change is Mode.DISCARD_ROW
    assert p.optional_on_create is False and p.new_table is Mode.EVOLVE


@pytest.mark.parametrize("spec,key,match", [
    ({"new_colum": "evolve"}, "new_colum", "unknown key 'new_colum'"),
    ({"new_column": "grow"}, "new_column", "unknown mode 'grow'"),
    ({"type_change": "evolve"}, "type_change", "cannot evolve an incompatible type change"),
    ({"new_table": "discard_value"}, "new_table", "not allowed for 'new_table'"),
    ({"optional_on_create": "yes"}, "optional_on_create", "true or false"),
    ("sometimes", "<shorthand>", "unknown mode"),
])
def test_rejections(spec, key, match) -> None:
    with pytest.raises(PolicyConfigError, match=match) as err:
        EvolutionPolicy.from_spec(spec)
    assert err.value.key == key


def test_rejects_non_mapping_spec() -> None:
    with pytest.raises(PolicyConfigError, match="expected a mode string or a mapping"):
        parse_policy_spec(["evolve"])


def test_direct_construction_validated() -> None:
    with pytest.raises(PolicyConfigError):
        EvolutionPolicy(type_change="evolve")
    assert EvolutionPolicy(new_column="dlq").new_column is Mode.DLQ


def test_resolution_order() -> None:
    ps = PolicySet.from_config(
        {"type_change": "freeze"},
        {r"audit\..*": "freeze", r"orders\..*": {"new_column": "dlq"}, r"orders\.eu": {"new_column": "freeze"}},
    )
    assert ps.resolve("clicks") == EvolutionPolicy(type_change=Mode.FREEZE)
    assert ps.resolve("audit.login") == EvolutionPolicy(Mode.FREEZE, Mode.FREEZE, Mode.FREEZE,
                                                        partition_change=Mode.FREEZE, sort_order_change=Mode.FREEZE)
    # first matching pattern wins, the global layer stays underneath
    assert ps.resolve("orders.eu") == EvolutionPolicy(new_column=Mode.DLQ, type_change=Mode.FREEZE)
    # route rule overrides only the keys it names
    assert ps.resolve("orders.us", {"type_change": "discard_value"}) == EvolutionPolicy(
        new_column=Mode.DLQ, type_change=Mode.DISCARD_VALUE)
    explicit = EvolutionPolicy(new_table=Mode.DLQ)
    assert ps.resolve("orders.us", explicit) is explicit


def test_pattern_is_full_match() -> None:
    ps = PolicySet.from_config(None, {"orders": "freeze"})
    assert ps.resolve("orders").new_column is Mode.FREEZE
    assert ps.resolve("orders_v2").new_column is Mode.EVOLVE


def test_topic_errors_name_the_pattern() -> None:
    with pytest.raises(PolicyConfigError) as err:
        PolicySet.from_config("evolve", {"pay.*": {"type_change": "evolve"}})
    assert err.value.topic == "pay.*" and "pay.*" in str(err.value)
    with pytest.raises(PolicyConfigError, match="invalid topic pattern"):
        PolicySet.from_config(None, {"(": "freeze"})


def test_to_dict_and_pickle() -> None:
    ps = PolicySet.from_config("freeze", {"a.*": {"type_change": "dlq"}})
    again = pickle.loads(pickle.dumps(ps))
    assert again.resolve("a.b") == ps.resolve("a.b")
    assert ps.resolve("a.b").to_dict() == {"new_table": "freeze", "new_column": "freeze",
                                           "type_change": "dlq", "optional_on_create": True,
                                           "partition_change": "freeze", "sort_order_change": "freeze"}
