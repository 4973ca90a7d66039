"""One schema change through the job, `plan --subject`, `plan --schema-file` and `check`: same outcome.

The job runs its executor path without Spark (`process_partition` + the real commit), against the
real registry and the SQLite and PostgreSQL catalogs; plan and check run on the same config. Each
case changes one input of the decision: policy (default, topic pattern, route), the route's column
projection, case sensitivity, `tables.auto_create`, and the table's layout: a `partition_by` or
`sort_by` that differs from the table's (the table made by a first run with `first`'s settings).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

import router.cli.demo_data as data
from evolution.layout import partition_terms, sort_terms
from router.planning.check import check_command
from router.planning.plan import plan_command
from router.catalog import get_catalog, load_table
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch  # noqa: F401


def rec(*fields: tuple[str, Any]) -> dict:
    return {"type": "record", "name": "Order", "namespace": "grid",
            "fields": [{"name": n, "type": t, **({"default": None} if isinstance(t, list) else {})}
                       for n, t in fields]}


NOTE = ("note", ["null", "string"])
V1 = rec(("id", "long"), ("total", "double"), ("extra", "int"))
V1_VALUE = {"id": 1, "total": 2.5, "extra": 3}


@dataclass
class Case:
    id: str
    v2: dict
    v2_value: dict
    blocked: bool
    route: dict = field(default_factory=dict)
    config: dict = field(default_factory=dict)
    v1: dict | None = field(default_factory=lambda: V1)
    v1_value: dict = field(default_factory=lambda: V1_VALUE)
    first: dict | None = None  # the first run's config (the table's layout before), else `config`


CASES = [
    Case("add-optional-column", rec(("id", "long"), ("total", "double"), ("extra", "int"), NOTE),
         {"id": 2, "total": 1.0, "extra": 4, "note": "n"}, blocked=False),
    Case("type-change-default-dlq", rec(("id", "string"), ("total", "double"), ("extra", "int")),
         {"id": "x", "total": 1.0, "extra": 4}, blocked=True),
    Case("new-column-route-freeze", rec(("id", "long"), ("total", "double"), ("extra", "int"), NOTE),
         {"id": 2, "total": 1.0, "extra": 4, "note": "n"}, blocked=True, route={"evolution": {"new_column": "freeze"}}),
    Case("new-column-topic-pattern-discard-row", rec(("id", "long"), ("total", "double"), ("extra", "int"), NOTE),
         {"id": 2, "total": 1.0, "extra": 4, "note": "n"}, blocked=True,
         config={"evolution": {"default": "evolve", "topics": {".*orders": {"new_column": "discard_row"}}}}),
    Case("type-change-in-projected-away-column", rec(("id", "long"), ("total", "double"), ("extra", "string")),
         {"id": 2, "total": 1.0, "extra": "x"}, blocked=False, route={"columns": ["id", "total"]}),
    Case("type-change-in-projected-column", rec(("id", "long"), ("total", "string"), ("extra", "int")),
         {"id": 2, "total": "x", "extra": 4}, blocked=True, route={"columns": ["id", "total"]}),
    Case("column-differing-only-by-case", rec(("id", "long"), ("UserId", "long"), ("userid", ["null", "long"])),
         {"id": 2, "UserId": 5, "userid": 6}, blocked=True,
         v1=rec(("id", "long"), ("UserId", "long")), v1_value={"id": 1, "UserId": 5}),
    Case("case-insensitive-maps-onto-the-column", rec(("id", "long"), ("userid", "long")),
         {"id": 2, "userid": 6}, blocked=False, config={"tables": {"case_sensitive": False}},
         v1=rec(("id", "long"), ("UserId", "long")), v1_value={"id": 1, "UserId": 5}),
    Case("new-table", V1, V1_VALUE, blocked=False, v1=None),
    Case("new-table-without-auto-create", V1, V1_VALUE, blocked=True, config={"tables": {"auto_create": False}},
         v1=None),
    Case("partition-spec-change", V1, V1_VALUE, blocked=False, first={"tables": {"partition_by": ["bucket(4, id)"]}},
         config={"tables": {"partition_by": ["truncate(10, id)"]}}),
    Case("partition-spec-change-frozen", V1, V1_VALUE, blocked=True,
         first={"tables": {"partition_by": ["bucket(4, id)"]}},
         config={"tables": {"partition_by": ["truncate(10, id)"]},
                 "evolution": {"default": {"partition_change": "freeze"}}}),
    Case("sort-order-change", V1, V1_VALUE, blocked=False, first={}, config={"tables": {"sort_by": ["total desc"]}}),
    Case("sort-order-change-route-freeze", V1, V1_VALUE, blocked=True, first={},
         config={"tables": {"sort_by": ["id"]}}, route={"evolution": {"sort_order_change": "freeze"}}),
    Case("partition-by-a-column-the-change-adds", rec(("id", "long"), ("total", "double"), ("extra", "int"), NOTE),
         {"id": 2, "total": 1.0, "extra": 4, "note": "n"}, blocked=False,
         config={"tables": {"partition_by": ["identity(note)"]}}),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_job_plan_and_check_agree(case: Case, catalog_config, registry_url, unique_name, tmp_path):  # noqa: F811
    ns = unique_name("g")
    topic, subject = f"{ns}.orders", f"{ns}.orders-value"
    table = f"{ns}.{ns}_orders"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns,
                                 [{"name": "main", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}",
                                   **case.route}], **case.config)
    config = dispatcher.config
    SchemaRegistryClient({"url": registry_url}).set_compatibility(subject, "NONE")  # only the table decides
    if case.v1 is not None:
        enc = data.Encoder(case.v1, data.register(registry_url, subject, case.v1))
        route = {"name": "main", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"}
        first = dispatcher if case.first is None else make_dispatcher(catalog_config, registry_url, ns, [route],
                                                                      **case.first)
        _, report = run_batch(first, [source_batch([(topic, 0, 0, enc(case.v1_value), None)])], 0)
        assert not report.failed
    else:
        get_catalog(catalog_config)  # the job's first run creates the catalog; plan and check never do
    enc2 = data.Encoder(case.v2, data.register(registry_url, subject, case.v2))

    by_subject = json.loads(plan_command(config, subjects=[subject], fmt="json")[0])["plans"]
    schema_file = tmp_path / f"{topic}.avsc"
    schema_file.write_text(json.dumps(case.v2))
    by_file = json.loads(plan_command(config, schema_file=str(schema_file), table=table, fmt="json")[0])["plans"]
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / schema_file.name).write_text(json.dumps(case.v2))
    report, code, unreachable = check_command(config, str(schemas), fmt="json")
    checked = json.loads(report)["results"][0]
    assert checked["compatibility"] in ("compatible", "new") and not unreachable

    results, _ = run_batch(dispatcher, [source_batch([(topic, 0, 1, enc2(case.v2_value), None)])], 1)
    outcome = results[table]
    written = outcome.written == 1 and outcome.failure is None and outcome.dead_letters == 0
    rows = read(catalog_config, table, "id") if case.v1 is not None or written else []

    assert len(by_subject) == len(by_file) == len(checked["tables"]) == 1
    statuses = {by_subject[0]["status"], by_file[0]["status"], checked["tables"][0]["plan"]["status"]}
    assert len(statuses) == 1, statuses
    assert by_subject[0]["violations"] == by_file[0]["violations"] == checked["tables"][0]["plan"]["violations"]
    assert by_subject[0]["changes"] == by_file[0]["changes"] == checked["tables"][0]["plan"]["changes"]
    if {v["kind"] for v in by_subject[0]["violations"]} & {"partition_change", "sort_order_change"}:
        assert "\n" not in outcome.failure and outcome.failure.startswith(f"{table}: ")  # one line naming it
    assert by_subject[0]["blocked"] is by_file[0]["blocked"] is (code == 1) is (not written) is case.blocked
    assert len(rows) == (case.v1 is not None) + written
    if written:  # the table has exactly the columns the plans announced (metadata columns included)
        columns = [f.name for f in load_table(config.catalog, table, refresh=True).schema().fields]
        assert re.findall(r"^\s*\d+: ([^:]+):", by_subject[0]["target_schema"], re.M) == columns
        metadata = load_table(config.catalog, table).metadata
        for change in by_subject[0]["changes"]:  # and the layout they announced
            if change["kind"] == "partition_spec":
                assert list(partition_terms(metadata.spec(), metadata.schema())) == change["to"]
            if change["kind"] == "sort_order":
                assert list(sort_terms(metadata.sort_order(), metadata.schema())) == change["to"]
