"""Protobuf schema changes through the job, `plan --subject`, `plan --schema-file` (.proto) and
`check --schemas` (.proto files): the same outcome, on SQLite and PostgreSQL."""
from __future__ import annotations

import json
import re

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from router.catalog import load_table
from router.planning.check import check_command
from router.planning.plan import plan_command
from tests import protobuf_data as pb
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch  # noqa: F401

V1 = """syntax = "proto3";
package grid;
import "google/protobuf/timestamp.proto";
message Order { int64 id = 1; int32 qty = 2; string name = 3; google.protobuf.Timestamp at = 4; }
"""
CASES = {
    # id: (v2 text, v2 field values, blocked, what the plan says)
    "rename-by-number": (V1.replace("string name = 3", "string title = 3"), {"id": 2, "title": "t"}, False,
                         "rename_column"),
    "widen-int32-int64": (V1.replace("int32 qty = 2", "int64 qty = 2"), {"id": 2, "qty": 5_000_000_000}, False,
                          "widen_column"),
    "add-field": (V1.replace("}\n", " repeated string tags = 5; }\n"), {"id": 2, "tags": ["a"]}, False, "add_column"),
    "number-reused-other-type": (V1.replace("int32 qty = 2", "string qty = 2"), {"id": 2, "qty": "x"}, True,
                                 "type_change"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_job_plan_and_check_agree_on_protobuf(case, catalog_config, registry_url, unique_name, tmp_path):  # noqa: F811
    v2_text, v2_value, blocked, kind = CASES[case]
    ns = unique_name("gp")
    topic, subject, table = f"{ns}.orders", f"{ns}.orders-value", f"{ns}.{ns}_orders"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns,
                                 [{"name": "main", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"}])
    config = dispatcher.config
    SchemaRegistryClient({"url": registry_url}).set_compatibility(subject, "NONE")  # only the table decides
    v1 = pb.register(registry_url, subject, V1)
    first = pb.message_class(pb.load(V1))(id=1, qty=3, name="one")
    _, report = run_batch(dispatcher, [source_batch([(topic, 0, 0, pb.encode(v1, first), None)])], 0)
    assert not report.failed
    v2 = pb.register(registry_url, subject, v2_text)

    by_subject = json.loads(plan_command(config, subjects=[subject], fmt="json")[0])["plans"]
    schema_file = tmp_path / f"{topic}.proto"
    schema_file.write_text(v2_text)
    by_file = json.loads(plan_command(config, schema_file=str(schema_file), table=table, fmt="json")[0])["plans"]
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / schema_file.name).write_text(v2_text)
    report, code, unreachable = check_command(config, str(schemas), fmt="json")
    checked = json.loads(report)["results"][0]
    assert checked["schema_type"] == "PROTOBUF"
    assert checked["compatibility"] == "compatible" and not unreachable

    second = pb.message_class(pb.load(v2_text))(**v2_value)
    results, _ = run_batch(dispatcher, [source_batch([(topic, 0, 1, pb.encode(v2, second), None)])], 1)
    outcome = results[table]
    written = outcome.written == 1 and outcome.failure is None and outcome.dead_letters == 0

    plans = [by_subject[0], by_file[0], checked["tables"][0]["plan"]]
    assert len({p["status"] for p in plans}) == 1, [p["status"] for p in plans]
    assert plans[0]["violations"] == plans[1]["violations"] == plans[2]["violations"]
    assert plans[0]["blocked"] is plans[1]["blocked"] is (code == 1) is (not written) is blocked
    said = [c["kind"] for c in plans[0]["changes"]] + [v["kind"] for v in plans[0]["violations"]]
    assert kind in said, said
    rows = read(catalog_config, table, "id", order="id")
    assert [r[0] for r in rows] == ([1] if blocked else [1, 2])
    if written:
        columns = [f.name for f in load_table(config.catalog, table, refresh=True).schema().fields]
        assert re.findall(r"^\s*\d+: ([^:]+):", plans[0]["target_schema"], re.M) == columns
