"""Routing rules: topic / header / field matching and table-name templates that data cannot abuse."""

from __future__ import annotations

import pickle

import pytest

from router.config import parse_config
from router.exceptions import TableNameError
from router.routing import RoutingTable, normalise_identifier_part


def routing(routes, allowed=("raw", "tenant_a", "tenant_b", "an")):
    config = parse_config({"kafka": {"bootstrap_servers": "b", "pattern": ".*"}, "registry": {"url": "http://x"},
                           "routes": routes, "tables": {"allowed_namespaces": list(allowed)}})
    return RoutingTable(config.routes, config.tables, config.dlq)


@pytest.mark.parametrize("topic, expected", [
    ("orders", "orders"), ("Orders.EU-1", "orders_eu_1"), ("9lives", "t_9lives"), ("a$b", "a_b"),
])
def test_topic_names_are_normalised(topic, expected):
    assert normalise_identifier_part(topic) == expected


def test_topic_template_and_fan_out():
    rt = routing([{"name": "raw", "topic": "orders\\..*", "table": "raw.{topic}"},
                  {"name": "all", "topic": "orders\\..*", "table": "an.orders"},
                  {"name": "other", "topic": "clicks", "table": "an.clicks"}])
    routes = rt.routes_for_topic("orders.eu")
    assert [r.name for r in routes] == ["raw", "all"]
    assert [rt.render(r, "orders.eu") for r in routes] == ["raw.orders_eu", "an.orders"]
    assert rt.routes_for_topic("payments") == ()


def test_header_and_field_templates_validate_values():
    rt = routing([{"name": "tenant", "table": "{header.tenant}.events"},
                  {"name": "kind", "table": "an.{field.kind}"}])
    tenant, kind = rt.routes
    assert rt.render(tenant, "events", {"tenant": "tenant_a"}) == "tenant_a.events"
    assert rt.render(kind, "events", values={"kind": "Click-Stream"}) == "an.click_stream"
    for bad in ("../x", "other_db.t", "a/b", "", "x" * 200):
        with pytest.raises(TableNameError):
            rt.render(tenant, "events", {"tenant": bad})
    with pytest.raises(TableNameError, match="not in tables.allowed_namespaces"):
        rt.render(tenant, "events", {"tenant": "secret_ns"})
    with pytest.raises(TableNameError, match="missing"):
        rt.render(tenant, "events", {})


def test_header_and_field_names():
    rt = routing([{"name": "eu", "topic": "p", "headers": {"region": "eu|uk"}, "fields": {"kind": ["a", "b"]},
                   "table": "raw.p"}])
    route = rt.routes[0]
    assert route.header_names == ("region",) and route.field_names == ("kind",)


def test_default_namespace_and_invalid_names():
    rt = routing([{"name": "plain", "table": "{topic}"}])
    assert rt.render(rt.routes[0], "Orders") == "raw.orders"
    with pytest.raises(TableNameError):
        rt.validate_table_name("raw.bad name")


def test_routing_table_pickles_with_its_cache():
    rt = routing([{"name": "raw", "topic": "o.*", "table": "raw.{topic}"}])
    rt.routes_for_topic("orders")
    again = pickle.loads(pickle.dumps(rt))
    assert [r.name for r in again.routes_for_topic("orders")] == ["raw"]
