"""Every Avro type round-trips: confluent serializer -> real registry -> our decoder.

Each case registers a schema, serializes values with confluent-kafka's
AvroSerializer, decodes them with ``decode_values`` on both the columnar
(polars) path and the per-record (fastavro) path, and compares the Arrow values
and the Arrow schema exactly.
"""
from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal

import numpy as np
import pytest
from confluent_kafka.schema_registry import header_schema_id_serializer
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_to_iceberg
from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.decode import decode_values

UTC = dt.timezone.utc
NESTED = {"type": "record", "name": "Inner", "fields": [
    {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "string"], "default": None}]}

# name -> (avro type of field "v", values written, values expected back from Arrow or None=same)
CASES = {
    "decimal_bytes": ({"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
                      [Decimal("12.34"), Decimal("-0.01"), Decimal("99999999.99"), Decimal("0.00")], None),
    "decimal_fixed": ({"type": "fixed", "name": "D8", "size": 8, "logicalType": "decimal",
                       "precision": 18, "scale": 4},
                      [Decimal("1.5000"), Decimal("-12345678901234.5678"), Decimal("0.0001")], None),
    "date": ({"type": "int", "logicalType": "date"},
             [dt.date(1970, 1, 1), dt.date(2024, 2, 29), dt.date(1900, 12, 31)], None),
    "time_millis": ({"type": "int", "logicalType": "time-millis"},
                    [dt.time(0, 0), dt.time(23, 59, 59, 999000), dt.time(12, 0, 1, 1000)], None),
    "time_micros": ({"type": "long", "logicalType": "time-micros"},
                    [dt.time(12, 34, 56, 789012), dt.time(0, 0, 0, 1)], None),
    "timestamp_millis": ({"type": "long", "logicalType": "timestamp-millis"},
                         [dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=UTC),
                          dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)], None),
    "timestamp_micros": ({"type": "long", "logicalType": "timestamp-micros"},
                         [dt.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=UTC),
                          dt.datetime(1950, 1, 1, tzinfo=UTC)], None),
    "local_timestamp_millis": ({"type": "long", "logicalType": "local-timestamp-millis"},
                               [dt.datetime(2024, 5, 6, 7, 8, 9, 123000),
                                dt.datetime(1960, 1, 1, 0, 0, 0, 1000)], None),
    "local_timestamp_micros": ({"type": "long", "logicalType": "local-timestamp-micros"},
                               [dt.datetime(2024, 5, 6, 7, 8, 9, 123456)], None),
    "uuid": ({"type": "string", "logicalType": "uuid"},
             [uuid.UUID(int=1), uuid.UUID("12345678-1234-5678-1234-567812345678")],
             ["00000000-0000-0000-0000-000000000001", "12345678-1234-5678-1234-567812345678"]),
    "enum": ({"type": "enum", "name": "Color", "symbols": ["RED", "GREEN", "BLUE"]},
             ["GREEN", "RED", "BLUE", "GREEN"], None),
    "fixed": ({"type": "fixed", "name": "F4", "size": 4}, [b"abcd", b"\x00\xff\x00\xff"], None),
    "bytes": ("bytes", [b"", b"\x00\x01\x02", b"x" * 300], None),
    "nested_record": (NESTED, [{"x": 1, "y": "a"}, {"x": -2, "y": None}], None),
    "array_of_records": ({"type": "array", "items": NESTED},
                         [[{"x": 1, "y": "a"}, {"x": 2, "y": None}], []], None),
    "map": ({"type": "map", "values": "long"}, [{"a": 1, "b": -2}, {}],
            [[("a", 1), ("b", -2)], []]),
    "map_of_records": ({"type": "map", "values": NESTED}, [{"k": {"x": 5, "y": None}}],
                       [[("k", {"x": 5, "y": None})]]),
    "null_first": (["null", "string"], [None, "hello", ""], None),
    "null_last": (["string", "null"], ["hello", None], None),
    "multi_union": (["null", "int", "string", NESTED], [7, "seven", {"x": 7, "y": "z"}, None],
                    [{"int": 7, "string": None, "Inner": None},
                     {"int": None, "string": "seven", "Inner": None},
                     {"int": None, "string": None, "Inner": {"x": 7, "y": "z"}}, None]),
    "primitives_array": ({"type": "array", "items": ["null", "double"]}, [[1.5, None], []], None),
}
# schemas polars reads correctly take the columnar path; the rest must not
PER_RECORD_ONLY = {"map", "map_of_records", "multi_union"}


def _schema(case: str, vtype) -> dict:
    return {"type": "record", "name": f"Case_{case}", "namespace": "icerouter.test",
            "fields": [{"name": "i", "type": "long"}, {"name": "v", "type": vtype}]}


@pytest.fixture(scope="module", params=[True, False], ids=["columnar", "per_record"])
def registry(request, any_registry_url):
    return CachedRegistry(RegistryConfig(url=any_registry_url), columnar=request.param)


@pytest.mark.parametrize("case", sorted(CASES))
def test_type_round_trip(case, registry, any_registry_url):
    vtype, values, expected = CASES[case]
    schema = _schema(case, vtype)
    ser = AvroSerializer(registry.client, schema_str=__import__("json").dumps(schema))
    ctx = SerializationContext(f"types-{case}-{uuid.uuid4().hex[:6]}", MessageField.VALUE)
    payloads = [ser({"i": i, "v": v}, ctx) for i, v in enumerate(values)]

    res = decode_values(registry, payloads)

    assert res.failures == []
    assert len(res.groups) == 1
    group = res.groups[0]
    assert group.batch.schema == iceberg_to_arrow(avro_to_iceberg(schema))
    np.testing.assert_array_equal(group.indices, np.arange(len(values)))
    assert group.batch.column("i").to_pylist() == list(range(len(values)))
    assert group.batch.column("v").to_pylist() == (expected if expected is not None else values)
    assert group.artifacts.columnar == (registry.columnar and case not in PER_RECORD_ONLY)


def test_non_record_root_becomes_value_column(registry):
    ser = AvroSerializer(registry.client, schema_str='"string"')
    ctx = SerializationContext(f"root-{uuid.uuid4().hex[:6]}", MessageField.VALUE)
    res = decode_values(registry, [ser(s, ctx) for s in ["a", "", "ccc"]])
    assert res.failures == []
    assert res.groups[0].batch.to_pydict() == {"value": ["a", "", "ccc"]}


def test_header_guid_and_magic_one_framing(registry):
    schema = _schema("guid", "string")
    ser = AvroSerializer(registry.client, schema_str=__import__("json").dumps(schema),
                         conf={"schema.id.serializer": header_schema_id_serializer})
    topic = f"guid-{uuid.uuid4().hex[:6]}"
    headers_rows, values = [], []
    for i in range(3):
        headers: list = []
        values.append(ser({"i": i, "v": f"h{i}"}, SerializationContext(topic, MessageField.VALUE,
                                                                      headers)))
        headers_rows.append(headers)
    guid = uuid.UUID(bytes=headers_rows[0][0][1][1:17])
    framed = b"\x01" + guid.bytes + values[0]          # magic 1 + GUID prefix
    res = decode_values(registry, values + [framed], headers=headers_rows + [None])
    assert res.failures == []
    assert len(res.groups) == 1 and res.groups[0].schema_id == str(guid)
    batch = res.groups[0].batch
    order = np.argsort(res.groups[0].indices)
    assert [batch.column("v")[int(k)].as_py() for k in order] == ["h0", "h1", "h2", "h0"]


def test_many_schemas_in_one_batch_keep_indices(registry):
    payloads, expected = [], {}
    sers = []
    for k in range(3):
        schema = _schema(f"multi{k}", "string")
        sers.append(AvroSerializer(registry.client, schema_str=__import__("json").dumps(schema)))
    run = uuid.uuid4().hex[:6]
    ctxs = [SerializationContext(f"many-{run}-{k}", MessageField.VALUE) for k in range(3)]
    for i in range(300):
        k = (i * 7) % 3
        payloads.append(sers[k]({"i": i, "v": f"s{k}"}, ctxs[k]))
        expected[i] = f"s{k}"
    res = decode_values(registry, payloads)
    assert res.failures == [] and len(res.groups) == 3
    seen = {}
    for g in res.groups:
        for idx, i, v in zip(g.indices, g.batch.column("i").to_pylist(), g.batch.column("v").to_pylist()):
            assert idx == i
            seen[int(idx)] = v
    assert seen == expected
