"""The format_version setting (tables default, route override) and the one rule the job, plan and
maintain take a table's format version by (router.decisions.decide_format)."""

from __future__ import annotations

import pytest

from router.config.load import parse_config
from router.decisions import decide_format, wanted_format_version
from router.exceptions import ConfigError
from router.maintenance.run import routed_format_version


def config(routes=None, **tables):
    return parse_config({"kafka": {"bootstrap_servers": "b:9092", "topics": ["orders"]},
                         "registry": {"url": "http://registry:8081"},
                         "tables": tables, "routes": routes or [{"name": "raw", "table": "raw.{topic}"}]})


def test_the_default_is_v2_and_a_route_overrides_the_tables_setting():
    assert config().tables.format_version == 2
    c = config([{"name": "a", "table": "raw.a"}, {"name": "b", "table": "raw.b", "format_version": 2}],
               format_version=3)
    assert c.tables.format_version == 3
    assert [wanted_format_version(c.tables.format_version, r.format_version) for r in c.routes] == [3, 2]


@pytest.mark.parametrize("tables, routes, message", [
    ({"format_version": 4}, None, "tables.format_version: 4 is not one of 2, 3"),
    ({"format_version": 1}, None, "tables.format_version: 1 is not one of 2, 3"),
    ({"format_version": True}, None, "tables.format_version: True"),
    ({"format_version": "3"}, None, "tables.format_version: expected int"),
    ({}, [{"table": "raw.a", "format_version": 5}], "routes[0].format_version: 5"),
    ({"format_versions": 3}, None, "tables: unknown key 'format_versions'"),
    ({"properties": {"format-version": "3"}}, None, "tables.properties.format-version"),
    ({}, [{"name": "a", "table": "raw.t"}, {"name": "b", "table": "raw.t", "format_version": 3}],
     "'a' and 'b' both feed raw.t but ask for format_version (tables.format_version) and 3"),
])
def test_bad_settings_are_refused_at_load(tables, routes, message):
    with pytest.raises(ConfigError) as caught:
        config(routes, **tables)
    assert message in caught.value.message


def test_properties_may_repeat_the_same_version():
    assert config(format_version=3, properties={"format-version": "3"}).tables.format_version == 3


@pytest.mark.parametrize("current, wanted, action", [
    (None, 2, "create"), (None, 3, "create"), (2, 3, "upgrade"), (2, 2, "keep"), (3, 3, "keep"), (3, 2, "refuse"),
])
def test_decide_format(current, wanted, action):
    decision = decide_format(current, wanted)
    assert decision.action == action
    assert ("v2 -> v3" in decision.note) == (action == "upgrade")
    assert ("downgrade" in decision.note) == (action == "refuse")


def test_maintain_finds_the_version_a_table_s_routes_ask_for():
    c = config([{"name": "cdc", "table": "mirror.{topic}", "format_version": 3},
                {"name": "logs", "table": "logs_{topic}"}], format_version=2)
    assert routed_format_version(c, "mirror.orders") == 3
    assert routed_format_version(c, "raw.logs_orders") == 2  # no namespace: the default one; tables' version
    assert routed_format_version(c, "ops.others") is None  # no route names it: left alone
    # the dead-letter table follows tables.format_version (replays delete letters as its format says)
    assert routed_format_version(c, c.dlq.table) == 2
    v3 = config([{"name": "logs", "table": "logs_{topic}"}], format_version=3)
    assert v3.dlq.table and routed_format_version(v3, v3.dlq.table) == 3
