"""JSON Schema payloads: confluent JSONSerializer -> real registry -> Arrow."""
from __future__ import annotations

import base64
import datetime as dt
import json
import uuid

import pytest
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from evolution.arrow import iceberg_to_arrow
from evolution.jsonschema import jsonschema_to_iceberg
from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.decode import decode_values

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Payment", "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "amount": {"type": "number"},
        "paid": {"type": "boolean"},
        "at": {"type": "string", "format": "date-time"},
        "day": {"type": ["string", "null"], "format": "date"},
        "blob": {"type": "string", "contentEncoding": "base64"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "attrs": {"type": "object", "additionalProperties": {"type": "integer"}},
        "free": {"type": "object"},
        "either": {"type": ["integer", "string"]},
        "address": {"type": "object", "properties": {"city": {"type": "string"}},
                    "required": ["city"]},
    },
    "required": ["id", "name", "at"],
}
UTC = dt.timezone.utc


def _row(i: int) -> dict:
    return {"id": i, "name": f"p{i}", "amount": i * 1.5, "paid": i % 2 == 0,
            "at": f"2024-03-04T05:06:{i % 60:02d}.123456Z", "day": None if i % 3 else "2024-02-29",
            "blob": base64.b64encode(bytes([i % 256, 1])).decode(), "tags": ["a", f"t{i}"],
            "attrs": {"x": i}, "free": {"k": [1, 2]}, "either": i if i % 2 else f"s{i}",
            "address": {"city": "Oslo"}}


@pytest.fixture(scope="module")
def setup(any_registry_url):
    reg = CachedRegistry(RegistryConfig(url=any_registry_url))
    ser = JSONSerializer(json.dumps(SCHEMA), reg.client)
    ctx = SerializationContext(f"json-{uuid.uuid4().hex[:8]}", MessageField.VALUE)
    return reg, ser, ctx


def test_json_round_trip(setup):
    reg, ser, ctx = setup
    values = [ser(_row(i), ctx) for i in range(20)]
    res = decode_values(reg, values)
    assert res.failures == []
    (group,) = res.groups
    assert group.artifacts.schema_type == "JSON"
    assert group.batch.schema == iceberg_to_arrow(jsonschema_to_iceberg(SCHEMA))
    rows = group.batch.to_pylist()
    assert [r["id"] for r in rows] == list(range(20))
    r = rows[3]
    assert r["at"] == dt.datetime(2024, 3, 4, 5, 6, 3, 123456, tzinfo=UTC)
    assert rows[1]["day"] is None and r["day"] == dt.date(2024, 2, 29)
    assert r["blob"] == bytes([3, 1]) and r["tags"] == ["a", "t3"]
    assert r["attrs"] == [("x", 3)] and json.loads(r["free"]) == {"k": [1, 2]}
    assert r["either"] == {"integer": 3, "string": None}
    assert rows[4]["either"] == {"integer": None, "string": "s4"}
    assert r["address"] == {"city": "Oslo"} and r["amount"] == 4.5 and r["paid"] is False


def test_json_invalid_payloads_become_failures(setup):
    reg, ser, ctx = setup
    good = ser(_row(1), ctx)
    prefix = good[:5]
    missing = dict(_row(2))
    del missing["name"]
    wrong_type = dict(_row(3), id="three")
    bad_date = dict(_row(4), at="not a date")
    values = [good, prefix + b"{not json", prefix + json.dumps(missing).encode(),
              prefix + json.dumps(wrong_type).encode(), prefix + json.dumps(bad_date).encode(), good]
    res = decode_values(reg, values)
    assert [(f.index, f.error_class) for f in res.failures] == [
        (1, "decode_error"), (2, "decode_error"), (3, "decode_error"), (4, "decode_error")]
    assert "name" in res.failures[1].reason and "id" in res.failures[2].reason
    assert res.groups[0].indices.tolist() == [0, 5]
