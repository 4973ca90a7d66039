"""Route evaluation on decoded batches: masks, data-dependent table names and refusals, column-wise."""

from __future__ import annotations

import pyarrow as pa

from router.routing.evaluate import evaluate_route
from tests.router.routing.test_routes import routing

BATCH = pa.record_batch({"id": pa.array([1, 2, 3, 4, 5], pa.int64()),
                         "kind": pa.array(["a", "b", "a", None, "../x"], pa.string()),
                         "meta": pa.array([{"region": "eu"}, {"region": "us"}, {"region": "eu"},
                                           {"region": None}, {"region": "eu"}])})
TENANTS = pa.array(["tenant_a", "tenant_b", None, "tenant_a", "tenant_a"], pa.string())


def headers(name):
    assert name == "tenant"
    return TENANTS


def outcome(destinations):
    return sorted((d.table or f"refused: {d.error.message}",
                   d.take(BATCH.column("id")).to_pylist()) for d in destinations)


def test_a_static_route_takes_every_row_without_a_copy():
    rt = routing([{"name": "all", "table": "raw.{topic}"}])
    [dest] = evaluate_route(rt, rt.routes[0], "Orders", BATCH, headers)
    assert dest.table == "raw.orders" and dest.rows is None and dest.take(BATCH) is BATCH


def test_header_and_nested_field_conditions_select_rows():
    rt = routing([{"name": "eu_a", "table": "an.eu", "headers": {"tenant": "tenant_a"},
                   "fields": {"meta.region": "eu"}}])
    assert outcome(evaluate_route(rt, rt.routes[0], "t", BATCH, headers)) == [("an.eu", [1, 5])]


def test_no_matching_row_gives_no_destination():
    rt = routing([{"name": "none", "table": "an.x", "fields": {"kind": ["zzz"]}}])
    assert evaluate_route(rt, rt.routes[0], "t", BATCH, headers) == []


def test_data_dependent_names_render_per_value_and_refuse_bad_values():
    rt = routing([{"name": "kind", "table": "an.{field.kind}", "headers": {"tenant": "tenant_.*"}}])
    assert outcome(evaluate_route(rt, rt.routes[0], "t", BATCH, headers)) == [
        ("an.a", [1]), ("an.b", [2]),
        ("refused: field 'kind' needed by the table template is missing", [4]),
        ("refused: field 'kind' value '../x' is not allowed in a table name", [5]),
    ]
    tenant = routing([{"name": "tenant", "table": "{header.tenant}.events"}], allowed=("tenant_a",))
    assert outcome(evaluate_route(tenant, tenant.routes[0], "t", BATCH, headers)) == [
        ("refused: header 'tenant' needed by the table template is missing", [3]),
        ("refused: namespace 'tenant_b' is not in tables.allowed_namespaces", [2]),
        ("tenant_a.events", [1, 4, 5]),
    ]
