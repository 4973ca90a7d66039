"""Real wire-format records (confluent serializers -> the registry emulator) -> decode -> changes -> last per key.

``changes_of`` does what the executor's write path does with one topic's rows:
decode the values per writer schema and the keys once, extract the changes of
every schema group and of the tombstones, then resolve them together.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from decimal import Decimal

import numpy as np
import pyarrow as pa
import pytest
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_to_iceberg
from evolution.jsonschema import jsonschema_to_iceberg
from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.decode import decode_values
from router.changes.dedup import last_change_per_key
from router.changes.envelope import debezium_table_schema
from router.changes.extract import OP_DELETE, ChangeSpec, decode_kafka_keys, extract_changes
from tests.router.changes.debezium_schemas import (
    ENVELOPE, JSON_ENVELOPE, JSON_KEY, KEY, MY_ENVELOPE, MY_KEY, ROW, envelope,
)

UTC = dt.timezone.utc


@pytest.fixture(scope="module", params=[True, False], ids=["columnar", "per_record"])
def registry(request, registry_url):
    return CachedRegistry(RegistryConfig(url=registry_url), columnar=request.param)


class Topic:
    """Serializes keys and values of one topic through the registry (subjects <topic>-key / <topic>-value)."""

    def __init__(self, registry, value_schema: dict, key_schema: dict | str, kind: str = "avro",
                 name: str = "") -> None:
        self.name = name or f"cdc-{uuid.uuid4().hex[:8]}"
        make = (lambda s: AvroSerializer(registry.client, json.dumps(s))) if kind == "avro" else \
            (lambda s: JSONSerializer(json.dumps(s), registry.client))
        self.value, self.key = make(value_schema), make(key_schema)

    def record(self, key, value) -> tuple[bytes | None, bytes | None]:
        k = None if key is None else self.key(key, SerializationContext(self.name, MessageField.KEY))
        v = None if value is None else self.value(value, SerializationContext(self.name, MessageField.VALUE))
        return k, v


def changes_of(registry, spec, records, *, topic="t", partitions=None, offsets=None):
    """records: (key bytes, value bytes); returns (ChangeSets, Resolved, dead letters as {row: (class, reason)})."""
    n = len(records)
    partitions = np.asarray(partitions if partitions is not None else [0] * n)
    offsets = np.asarray(offsets if offsets is not None else range(n))
    values = decode_values(registry, [v for _, v in records])
    keys = decode_kafka_keys(registry, [k for k, _ in records])
    sets = []
    for group in values.groups:
        sets.append(extract_changes(spec, group.batch, topic=topic, partition=partitions[group.indices],
                                    offset=offsets[group.indices], kafka_keys=keys.take(group.indices),
                                    rows=group.indices, source=group.schema_id))
    tombstones = np.array([f.index for f in values.failures if f.error_class == "tombstone"], dtype=np.int64)
    letters = {f.index: (f.error_class, f.reason) for f in values.failures if f.error_class != "tombstone"}
    if len(tombstones):
        sets.append(extract_changes(spec, None, topic=topic, partition=partitions[tombstones],
                                    offset=offsets[tombstones], kafka_keys=keys.take(tombstones), rows=tombstones))
    for s in sets:
        for bad in s.bad:
            letters.update({int(r): (bad.error_class, bad.reason) for r in bad.rows})
    return sets, last_change_per_key(sets), letters


def source(lsn: int) -> dict:
    return {"version": "2.7.0.Final", "connector": "postgresql", "name": "pg", "ts_ms": 1_700_000_000_000 + lsn,
            "snapshot": "false", "db": "shop", "sequence": None, "schema": "public", "table": "customers",
            "txId": 700 + lsn, "lsn": lsn, "xmin": None}


def customer(i: int, name: str = "Ann", balance: str = "10.50") -> dict:
    return {"id": i, "email": f"c{i}@example.com", "name": name, "balance": Decimal(balance),
            "updated_at": 1_700_000_000_000_000 + i}


def event(op: str, lsn: int, before=None, after=None) -> dict:
    return {"before": before, "after": after, "source": source(lsn), "op": op, "ts_ms": 1_700_000_000_100 + lsn,
            "transaction": None}


def images(resolved) -> dict:
    return {row["id"]: row for f in resolved.inserts for row in f.image.to_pylist()}


def test_debezium_postgres_stream(registry):
    t = Topic(registry, ENVELOPE, KEY)
    a, a2, b, c = customer(1), customer(1, "Ann B", "11.00"), customer(2, "Bo"), customer(3, "Cy")
    moved = dict(a2, id=4)
    records = [
        t.record({"id": 1}, event("r", 1, None, a)),  # 0 snapshot
        t.record({"id": 2}, event("c", 2, None, b)),  # 1
        t.record({"id": 1}, event("u", 3, a, a2)),  # 2
        t.record({"id": 2}, event("d", 4, b, None)),  # 3
        t.record({"id": 2}, None),  # 4 tombstone after the delete: consumed
        t.record({"id": 3}, event("c", 5, None, c)),  # 5
        t.record({"id": 3}, event("d", 6, None, None)),  # 6 delete without before: the Kafka key says 3
        t.record({"id": 3}, None),  # 7
        t.record({"id": 1}, event("d", 7, a2, None)),  # 8 primary key change 1 -> 4
        t.record({"id": 1}, None),  # 9
        t.record({"id": 4}, event("c", 7, None, moved)),  # 10
    ]
    sets, resolved, letters = changes_of(registry, ChangeSpec("debezium", ("id",), "source.lsn"), records)
    assert letters == {}
    assert sets[-1].consumed.tolist() == [4, 7, 9] and len(sets[-1]) == 0
    table = debezium_table_schema(avro_to_iceberg(ENVELOPE))
    for f in resolved.inserts:
        assert f.image.schema == iceberg_to_arrow(table)
    assert sorted(resolved.touched.column("id").to_pylist()) == [1, 2, 3, 4]
    assert images(resolved) == {4: dict(moved, balance=Decimal("11.00"))}
    assert [r for f in resolved.inserts for r in f.rows.tolist()] == [10]
    assert resolved.deleted == 3


def test_fan_in_of_two_topics_ordered_by_lsn(registry):
    """The same table fed by two topics (e.g. a connector moved to new topic names): source.lsn decides."""
    old, new = Topic(registry, ENVELOPE, KEY), Topic(registry, ENVELOPE, KEY)
    spec = ChangeSpec("debezium", ("id",), "source.lsn")
    first = [old.record({"id": 1}, event("c", 1, None, customer(1, "v1"))),
             old.record({"id": 2}, event("c", 2, None, customer(2, "v1"))),
             old.record({"id": 1}, event("u", 5, customer(1, "v1"), customer(1, "v5")))]
    second = [new.record({"id": 1}, event("u", 3, customer(1, "v1"), customer(1, "v3"))),
              new.record({"id": 2}, event("d", 4, customer(2, "v1"), None)),
              new.record({"id": 2}, None)]
    sets_a, _, _ = changes_of(registry, spec, first, topic=old.name)
    sets_b, _, letters = changes_of(registry, spec, second, topic=new.name)
    resolved = last_change_per_key(sets_a + sets_b)
    assert letters == {}
    assert {k: v["name"] for k, v in images(resolved).items()} == {1: "v5"}
    assert dict(zip(resolved.touched.column("id").to_pylist(), resolved.last_op.tolist()))[2] == OP_DELETE


def test_mysql_composite_key_from_the_kafka_key(registry):
    t = Topic(registry, MY_ENVELOPE, MY_KEY)
    row = {"tenant": "acme", "id": 7, "total": 1.5}
    records = [t.record({"tenant": "acme", "id": 7}, event("c", 1, None, row)),
               t.record({"tenant": "acme", "id": 8}, event("c", 2, None, dict(row, id=8))),
               t.record({"tenant": "acme", "id": 7}, event("d", 3, None, None))]
    _, resolved, letters = changes_of(registry, ChangeSpec("debezium", ("tenant", "id")), records)
    assert letters == {}
    assert sorted(resolved.touched.to_pylist(), key=lambda r: r["id"]) == [{"tenant": "acme", "id": 7},
                                                                            {"tenant": "acme", "id": 8}]
    assert [r["id"] for f in resolved.inserts for r in f.image.to_pylist()] == [8]


def test_json_schema_envelope_and_keys(registry):
    t = Topic(registry, JSON_ENVELOPE, JSON_KEY, kind="json")

    def ev(op, lsn, before=None, after=None):
        return {"before": before, "after": after, "source": {"lsn": lsn, "ts_ms": lsn}, "op": op, "ts_ms": lsn}

    row = {"id": 1, "email": "a@x", "name": "Ann"}
    records = [t.record({"id": 1}, ev("c", 1, None, row)), t.record({"id": 2}, ev("c", 2, None, dict(row, id=2))),
               t.record({"id": 1}, ev("u", 3, row, dict(row, name="B"))), t.record({"id": 2}, ev("d", 4)),
               t.record({"id": 2}, None)]
    _, resolved, letters = changes_of(registry, ChangeSpec("debezium", ("id",), "source.lsn"), records)
    assert letters == {}
    assert images(resolved) == {1: {"id": 1, "email": "a@x", "name": "B"}}
    assert resolved.deleted == 1
    table = debezium_table_schema(jsonschema_to_iceberg(JSON_ENVELOPE))
    assert resolved.inserts[0].image.schema == iceberg_to_arrow(table)


def test_upsert_with_json_schema_keys_and_tombstones(registry):
    value = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
             "required": ["id"]}
    t = Topic(registry, value, JSON_KEY, kind="json")
    records = [t.record({"id": 1}, {"id": 1, "name": "a"}), t.record({"id": 2}, {"id": 2, "name": "b"}),
               t.record({"id": 1}, None),  # a tombstone alone deletes its key
               t.record({"id": 3}, None),  # even a key never seen
               t.record({"id": 2}, {"id": 2, "name": "b2"})]
    _, resolved, letters = changes_of(registry, ChangeSpec("upsert", ("id",)), records)
    assert letters == {}
    assert sorted(resolved.touched.column("id").to_pylist()) == [1, 2, 3]
    assert images(resolved) == {2: {"id": 2, "name": "b2"}}


def test_upsert_value_without_key_fields_takes_a_primitive_kafka_key(registry):
    value = {"type": "record", "name": "Reading", "fields": [{"name": "temp", "type": "double"}]}
    t = Topic(registry, value, "long")
    records = [t.record(5, {"temp": 1.0}), t.record(6, {"temp": 2.0}), t.record(5, {"temp": 3.0}), t.record(6, None)]
    sets, resolved, letters = changes_of(registry, ChangeSpec("upsert", ("sensor",)), records)
    assert letters == {}
    assert sets[0].keys.to_pylist() == [{"sensor": 5}, {"sensor": 6}, {"sensor": 5}]
    assert resolved.touched.to_pylist() == [{"sensor": 5}, {"sensor": 6}]
    assert [r for f in resolved.inserts for r in f.image.to_pylist()] == [{"temp": 3.0}]


def test_bad_records_are_dead_lettered_with_their_reason(registry):
    nullable_id = dict(ROW, name="NullableValue", fields=[{"name": "id", "type": ["null", "int"], "default": None}]
                       + ROW["fields"][1:])
    t = Topic(registry, envelope(nullable_id), KEY)
    good = customer(9)
    records = [
        t.record({"id": 9}, event("c", 1, None, good)),  # 0 fine, nothing holds it up
        t.record({"id": 1}, event("x", 2, None, customer(1))),  # 1
        t.record({"id": 1}, event("t", 3)),  # 2 truncate
        t.record({"id": 1}, event("u", 4, customer(1), None)),  # 3
        t.record({"id": 1}, event("c", 5, None, dict(customer(1), id=None))),  # 4
        t.record(None, event("d", 6)),  # 5
        (b"\x00\x01", t.record(None, event("d", 7))[1]),  # 6 key bytes not wire format
        t.record({"id": 1}, event("d", 8, dict(customer(1), id=None), None)),  # 7 before without key: Kafka key
    ]
    _, resolved, letters = changes_of(registry, ChangeSpec("debezium", ("id",)), records)
    assert letters == {
        1: ("unknown_op", "unknown Debezium op 'x'"),
        2: ("unknown_op", "Debezium op 't' (truncate) is not applied"),
        3: ("missing_after", "Debezium change without 'after'"),
        4: ("null_key", "key column 'id' is null"),
        5: ("delete_without_key", "Debezium delete without a key in 'before'; Kafka key: null key"),
        6: ("delete_without_key", "Debezium delete without a key in 'before'; Kafka key: magic 0 needs 5 header "
                                  "bytes, value has 2"),
    }
    assert sorted(resolved.touched.column("id").to_pylist()) == [1, 9]
    assert images(resolved)[9]["id"] == 9


def test_bad_upsert_tombstones_and_keys(registry):
    value = {"type": "record", "name": "Item", "fields": [{"name": "name", "type": "string"}]}
    t = Topic(registry, value, {"type": "record", "name": "ItemKey", "fields": [{"name": "sku", "type": "string"}]})
    records = [t.record({"sku": "a"}, {"name": "A"}), t.record(None, None), (b"junk", None),
               t.record(None, {"name": "no key"}), t.record({"sku": "a"}, None)]
    _, resolved, letters = changes_of(registry, ChangeSpec("upsert", ("sku",)), records)
    assert letters[1] == ("null_key", "tombstone; Kafka key: null key")
    assert letters[2] == ("key_wire_format", "tombstone; Kafka key: unknown magic byte 0x6a")
    assert letters[3] == ("null_key", "the value has no key columns; Kafka key: null key")
    assert set(letters) == {1, 2, 3}
    assert resolved.touched.to_pylist() == [{"sku": "a"}] and resolved.inserts == ()
    _, _, letters = changes_of(registry, ChangeSpec("upsert", ("id",)), records[:1])
    assert letters == {0: ("missing_key", "the value has no key columns; the Kafka key has no column 'id'")}


def test_kafka_keys_of_two_schemas(registry):
    subject = f"keys-{uuid.uuid4().hex[:8]}"
    ctx = SerializationContext(subject, MessageField.KEY)

    def ser(schema, value, context=ctx):
        return AvroSerializer(registry.client, json.dumps(schema))(value, context)

    v1 = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "int"}]}
    v2 = {"type": "record", "name": "K", "fields": [{"name": "id", "type": "long"}]}
    clash = {"type": "record", "name": "K2", "fields": [{"name": "id", "type": "string"}]}
    keys = decode_kafka_keys(registry, [ser(v1, {"id": 1}), ser(v2, {"id": 1 << 40}), ser(v1, {"id": 3}),
                                        ser(clash, {"id": "x"}, SerializationContext(subject + "x", MessageField.KEY))])
    assert keys.table.column("id").type == pa.int64()
    assert keys.table.column("id").to_pylist() == [1, 1 << 40, 3, None]
    assert keys.error_class.tolist() == [None, None, None, "key_schema_conflict"]
    assert "does not match the other keys' columns" in keys.reason[3]


def test_sequence_field_missing_and_not_an_envelope(registry):
    t = Topic(registry, ENVELOPE, KEY)
    records = [t.record({"id": 1}, event("c", 1, None, customer(1)))]
    _, _, letters = changes_of(registry, ChangeSpec("debezium", ("id",), "source.nope"), records)
    assert letters == {0: ("missing_sequence", "the value has no field 'source.nope' (sequence_by)")}
    plain = Topic(registry, ROW, KEY)
    _, _, letters = changes_of(registry, ChangeSpec("debezium", ("id",)), [plain.record({"id": 1}, customer(1))])
    assert letters == {0: ("not_envelope", "not a Debezium envelope: no 'op' field")}


def test_null_op_and_timestamps_as_sequence_without_registry():
    """Shapes Avro cannot carry (a null op) and a timestamp sequence column, straight from Arrow."""
    row = pa.struct([pa.field("id", pa.int64(), nullable=False)])
    values = pa.table({"before": pa.nulls(3, row), "after": pa.array([{"id": 1}, {"id": 1}, {"id": 2}], row),
                       "op": pa.array([None, "u", "c"], pa.string()),
                       "at": pa.array([dt.datetime(2024, 1, 2, tzinfo=UTC), dt.datetime(2024, 1, 1, tzinfo=UTC),
                                       dt.datetime(2024, 1, 1, tzinfo=UTC)], pa.timestamp("ms", tz="UTC"))})
    cs = extract_changes(ChangeSpec("debezium", ("id",), "at"), values, topic="t", partition=[0, 0, 0],
                         offset=[0, 1, 2], rows=[10, 11, 12])
    assert [(b.rows.tolist(), b.error_class, b.reason) for b in cs.bad] == [([10], "unknown_op", "Debezium op is null")]
    assert cs.rows.tolist() == [11, 12] and cs.sequence.type == pa.timestamp("ms", tz="UTC")
    with pytest.raises(ValueError, match="differ in length"):
        extract_changes(ChangeSpec("debezium", ("id",)), values, topic="t", partition=[0], offset=[0, 1, 2])


def test_keys_that_all_fail_keep_their_own_reasons(registry):
    keys = decode_kafka_keys(registry, [b"junk", None])
    assert len(keys) == 2 and keys.table.num_columns == 0
    cs = extract_changes(ChangeSpec("upsert", ("id",)), None, topic="t", partition=[0, 0], offset=[0, 1],
                         kafka_keys=keys.take([1, 0]), rows=[1, 0])
    assert sorted((b.rows.tolist(), b.error_class, b.reason) for b in cs.bad) == [
        ([0], "key_wire_format", "tombstone; Kafka key: unknown magic byte 0x6a"),
        ([1], "null_key", "tombstone; Kafka key: null key")]
    assert len(cs) == 0


ROW_ID = pa.struct([pa.field("id", pa.int64(), nullable=False), pa.field("v", pa.int64())])


def _keys(ids, type_=pa.int64()):
    none = np.array([None] * len(ids), dtype=object)
    from router.changes.extract import KafkaKeys
    return KafkaKeys(pa.table({"id": pa.array(ids, type_)}), none, none)


@pytest.mark.parametrize("spec,values,keys,expected", [
    (ChangeSpec("debezium", ["key"]), pa.table({"after": pa.array([{"id": 1, "v": 1}], ROW_ID), "op": ["c"]}), None,
     ("missing_key", "the row has no key columns; no Kafka key was given")),
    (ChangeSpec("upsert", ["id"]), None, _keys([None]), ("null_key", "tombstone; the Kafka key's column 'id' is null")),
    (ChangeSpec("debezium", ["id"]), pa.table({"before": pa.nulls(1, ROW_ID), "after": pa.nulls(1, ROW_ID),
                                               "op": ["d"]}), _keys(["abc"], pa.string()),
     ("delete_without_key", "Debezium delete without a key in 'before'; the Kafka key's column 'id' does not fit "
                            "int64: Failed to parse string: 'abc' as a scalar of type int64")),
    (ChangeSpec("debezium", ["id"]), pa.table({"after": pa.array([{"id": 1, "v": 1}], ROW_ID), "op": ["m"]}), None,
     ("unknown_op", "Debezium op 'm' (message) is not applied")),
    (ChangeSpec("debezium", ["id"]), pa.table({"op": ["c"]}), None,
     ("not_envelope", "not a Debezium envelope: no 'after' struct")),
    (ChangeSpec("upsert", ["id"], "meta"), pa.table({"id": [1], "meta": pa.array([{"x": 1}])}), None,
     ("missing_sequence", "sequence_by 'meta' has type struct<x: int64>, which does not order changes")),
])
def test_more_bad_input_reasons(spec, values, keys, expected):
    cs = extract_changes(spec, values, topic="t", partition=[0], offset=[5], kafka_keys=keys, rows=[42])
    assert [(b.rows.tolist(), b.error_class, b.reason) for b in cs.bad] == [([42], *expected)]
    assert len(cs) == 0 and cs.keys.num_rows == 0


def test_spec_is_checked():
    from router.changes.exceptions import ChangeStreamError
    assert ChangeSpec("upsert", ["a", "b"]).key == ("a", "b")
    with pytest.raises(ChangeStreamError, match="unknown change mode 'merge'"):
        ChangeSpec("merge", ("id",))
    with pytest.raises(ChangeStreamError, match="distinct and at least one"):
        ChangeSpec("upsert", ())
    with pytest.raises(ChangeStreamError, match="distinct and at least one"):
        ChangeSpec("upsert", ("id", "id"))
