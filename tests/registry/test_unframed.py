"""Values without registry framing: raw bytes, inferred JSON, JSON declared by a schema file or a
registry subject, and Kafka Connect's JsonConverter envelope, decoded to per-schema groups and
failures with the shape `decode_values` gives framed values."""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
import re
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.formats import ValueFormat
from registry.unframed import decode_unframed

README = Path(__file__).resolve().parents[2] / "README.md"


def values(*items) -> pa.Array:
    return pa.array([i if i is None or isinstance(i, bytes) else json.dumps(i).encode() for i in items], pa.binary())


def rows(result) -> dict[int, dict]:
    return {int(i): row for g in result.groups for i, row in zip(g.indices, g.batch.to_pylist())}


def failures(result) -> dict[int, tuple[str, str]]:
    return {f.index: (f.error_class, f.reason) for f in result.failures}


def test_raw_keeps_every_record_as_its_bytes():
    result = decode_unframed(None, ValueFormat("raw"), pa.array([b"\xff\x00", None, b"{}"]),
                             pa.array([b"k1", None, b"k3"]))
    assert rows(result) == {0: {"key": b"k1", "value": b"\xff\x00"}, 1: {"key": None, "value": None},
                            2: {"key": b"k3", "value": b"{}"}}
    assert result.failures == []
    assert [str(f.field_type) for f in result.groups[0].artifacts.iceberg_schema.fields] == ["binary", "binary"]


def test_inferred_json_types_a_batch_and_keeps_strings_as_text():
    result = decode_unframed(None, ValueFormat("json"), values(
        {"id": 1, "at": "2024-01-01T00:00:00Z", "tags": ["a"], "geo": {"lat": 1.5, "lon": 2}, "gone": None},
        {"id": 2, "at": "later", "extra": True}, None))
    assert failures(result) == {2: ("tombstone", "null value")}
    [group] = result.groups
    schema = {f.name: re.sub(r"\d+: ", "", str(f.field_type)) for f in group.artifacts.iceberg_schema.fields}
    assert schema == {"id": "long", "at": "string", "tags": "list<string>",
                      "geo": "struct<lat: optional double, lon: optional long>", "extra": "boolean"}
    assert rows(result)[1] == {"id": 2, "at": "later", "tags": None, "geo": None, "extra": True}


def test_inferred_json_numbers_as_double_on_request():
    result = decode_unframed(None, ValueFormat("json", numbers="double"), values({"n": 1}, {"n": 2.5}))
    assert rows(result) == {0: {"n": 1.0}, 1: {"n": 2.5}}
    assert str(result.groups[0].artifacts.iceberg_schema.find_field("n").field_type) == "double"


def test_bad_json_records_fail_alone_with_their_reason():
    result = decode_unframed(None, ValueFormat("json"), values(
        {"a": 1}, b"\xff\xfe{", b"{nope", [1, 2], "text", {"a": 2}, b"", {"a": 3}))
    assert rows(result) == {0: {"a": 1}, 5: {"a": 2}, 7: {"a": 3}}
    got = failures(result)
    assert got[1] == ("invalid_utf8", "value is not valid UTF-8")
    assert got[2][0] == "decode_error" and got[2][1].startswith("invalid JSON")
    assert got[3] == ("decode_error", "a JSON array where an object was expected")
    assert got[4] == ("decode_error", "a JSON string where an object was expected")
    assert got[6][0] == "decode_error" and got[6][1].startswith("invalid JSON")


def test_records_that_disagree_within_a_batch_form_groups_of_one_shape():
    result = decode_unframed(None, ValueFormat("json"), values({"a": 1}, {"a": "x"}, {"a": 2}, {"a": "y"}))
    shapes = {str(g.artifacts.iceberg_schema.find_field("a").field_type): sorted(map(int, g.indices))
              for g in result.groups}
    assert shapes == {"long": [0, 2], "string": [1, 3]}  # the table's type_change policy decides the odd ones
    assert result.failures == []


def test_a_key_seen_only_as_null_adds_no_column():
    result = decode_unframed(None, ValueFormat("json"), values({"a": None, "b": {}, "c": []}, {"a": None}))
    [group] = result.groups
    assert group.artifacts.iceberg_schema.fields == () and group.batch.num_rows == 2


def test_json_declared_by_a_schema_file(tmp_path):
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "at": {"type": "string", "format": "date-time"}},
              "required": ["id"]}
    fmt = ValueFormat("json", schema_text=json.dumps(schema), schema_source="s.json")
    result = decode_unframed(None, fmt, values({"id": 1, "at": "2024-01-01T00:00:00Z"}, {"at": "x"}, [1]))
    assert rows(result) == {0: {"id": 1, "at": dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)}}
    assert set(failures(result)) == {1, 2} and all(c == "decode_error" for c, _ in failures(result).values())
    assert result.groups[0].schema_id == fmt.declared_id


def test_json_declared_by_a_registry_subject_follows_its_latest_version(registry_url):
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    subject = f"unframed-{uuid.uuid4().hex[:8]}-value"
    client = SchemaRegistryClient({"url": registry_url})
    v1 = {"type": "object", "properties": {"id": {"type": "integer"}}}
    client.register_schema(subject, Schema(json.dumps(v1), "JSON"))
    registry = CachedRegistry(RegistryConfig(url=registry_url, latest_ttl_seconds=0.01))
    fmt = ValueFormat("json", subject=subject)
    first = decode_unframed(registry, fmt, values({"id": 1, "name": "a"}))
    assert rows(first) == {0: {"id": 1}}
    v2 = {"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}}}
    client.register_schema(subject, Schema(json.dumps(v2), "JSON"))
    import time

    time.sleep(0.05)
    second = decode_unframed(registry, fmt, values({"id": 2, "name": "b"}))
    assert rows(second) == {0: {"id": 2, "name": "b"}}
    assert second.groups[0].schema_id != first.groups[0].schema_id
    pinned = decode_unframed(registry, ValueFormat("json", subject=subject, version=1), values({"id": 3, "name": "c"}))
    assert rows(pinned) == {0: {"id": 3}}


def connect(schema: dict, payload, **extra) -> dict:
    return {"schema": schema, "payload": payload, **extra}


ORDER = {"type": "struct", "name": "shop.Order", "optional": False, "fields": [
    {"field": "id", "type": "int32", "optional": False},
    {"field": "price", "type": "bytes", "optional": True, "name": "org.apache.kafka.connect.data.Decimal",
     "version": 1, "parameters": {"scale": "2", "connect.decimal.precision": "10"}},
    {"field": "day", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Date", "version": 1},
    {"field": "at_time", "type": "int32", "optional": True, "name": "org.apache.kafka.connect.data.Time", "version": 1},
    {"field": "at", "type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
    {"field": "tags", "type": "array", "optional": True, "items": {"type": "string", "optional": False}},
    {"field": "attrs", "type": "map", "optional": True, "keys": {"type": "string", "optional": False},
     "values": {"type": "int64", "optional": True}},
    {"field": "blob", "type": "bytes", "optional": True},
]}


def test_connect_json_envelope_gives_the_columns_and_logical_types():
    price = base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode()
    result = decode_unframed(None, ValueFormat("connect_json"), values(
        connect(ORDER, {"id": 7, "price": price, "day": 19000, "at_time": 3_600_000, "at": 1_700_000_000_123,
                        "tags": ["x"], "attrs": {"k": 1}, "blob": base64.b64encode(b"\x00\x01").decode()}),
        {"payload": {"id": 1}}, connect(ORDER, {"id": None}), {"schema": ORDER}, b"{", None))
    schema = {f.name: str(f.field_type) for f in result.groups[0].artifacts.iceberg_schema.fields}
    assert schema == {"id": "int", "price": "decimal(10, 2)", "day": "date", "at_time": "time", "at": "timestamptz",
                      "tags": "list<string>", "attrs": "map<string, long>", "blob": "binary"}
    assert rows(result) == {0: {"id": 7, "price": decimal.Decimal("123.45"), "day": dt.date(2022, 1, 8),
                                "at_time": dt.time(1, 0), "at": dt.datetime(2023, 11, 14, 22, 13, 20, 123000,
                                                                              tzinfo=dt.timezone.utc),
                                "tags": ["x"], "attrs": [("k", 1)], "blob": b"\x00\x01"}}
    got = failures(result)
    assert "no 'schema' object" in got[1][1]
    assert got[2] == ("decode_error", "payload does not fit its Connect schema: payload.id is required but null")
    assert got[3] == ("decode_error", "Kafka Connect JSON envelope without a 'payload'")
    assert got[4][1].startswith("invalid JSON") and got[5][0] == "tombstone"


def test_connect_json_schema_change_is_a_new_writer_schema():
    v2 = {**ORDER, "fields": ORDER["fields"] + [{"field": "note", "type": "string", "optional": True}]}
    result = decode_unframed(None, ValueFormat("connect_json"), values(connect(ORDER, {"id": 1}),
                                                                       connect(v2, {"id": 2, "note": "n"})))
    assert len({g.schema_id for g in result.groups}) == 2
    assert rows(result)[1]["note"] == "n"


def readme_type_table() -> list[tuple[str, str, str]]:
    text = README.read_text()
    section = text[text.index("| JSON value |"):]
    out = []
    for line in section.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip().strip("`") for c in line.strip("|").split("|")]
        out.append((cells[0], cells[1], cells[2]))
    return out


def test_the_readme_has_the_json_type_table():
    assert len(readme_type_table()) >= 8


@pytest.mark.parametrize("row", readme_type_table(), ids=lambda r: r[0])
def test_each_row_of_the_readmes_json_type_table(row):
    """The README's JSON-to-Iceberg table, row by row: its example inferred alone (numbers as long),
    the column `v` it gives (or none)."""
    _, example, iceberg = row
    numbers = "double" if "numbers: double" in iceberg else "long"
    result = decode_unframed(None, ValueFormat("json", numbers=numbers), values(json.loads(f'{{"v": {example}}}')))
    field = next((f for f in result.groups[0].artifacts.iceberg_schema.fields if f.name == "v"), None)
    got = "no column" if field is None else re.sub(r"\d+: ", "", str(field.field_type))
    assert got == re.sub(r" \(.*\)$", "", iceberg)


FLAT_ORDER = {**ORDER, "fields": [f for f in ORDER["fields"] if f["type"] != "map"]}


def test_connect_json_column_wise_and_record_by_record_give_the_same_rows():
    """A schema without maps is read column-wise (the payload text only, once the schema's bytes are
    known); a record whose payload does not fit makes its group go record by record, with the reason."""
    from registry.connect_json import connect_artifacts

    price = base64.b64encode((12345).to_bytes(2, "big", signed=True)).decode()
    payloads = [{"id": i, "price": price if i % 2 else None, "day": 19000 + i, "at_time": 1000 * i,
                 "at": 1_700_000_000_000 + i, "tags": ["a", "b"][: i % 3], "blob": base64.b64encode(b"x").decode()}
                for i in range(50)]
    art = connect_artifacts(FLAT_ORDER)
    columns = art.decoder.columns(pa.array([json.dumps(p).encode() for p in payloads], pa.binary()))
    records, ok, bad = art.decoder.rows(payloads)
    assert columns is not None and not bad and columns.to_pylist() == records.to_pylist()
    compact = values(*[json.dumps({"schema": FLAT_ORDER, "payload": p}, separators=(",", ":")).encode()
                       for p in payloads])
    assert [r for g in decode_unframed(None, ValueFormat("connect_json"), compact).groups
            for r in g.batch.to_pylist()] == records.to_pylist()
    broken = values(*[connect(FLAT_ORDER, p) for p in payloads[:3]], connect(FLAT_ORDER, {"id": "seven"}))
    result = decode_unframed(None, ValueFormat("connect_json"), broken)
    assert sorted(rows(result)) == [0, 1, 2] and failures(result)[3][0] == "decode_error"


def test_connect_json_records_that_share_the_schema_text_but_break_after_it_fail_alone():
    good = [json.dumps({"schema": FLAT_ORDER, "payload": {"id": i}}, separators=(",", ":")).encode() for i in range(4)]
    head = good[0][:good[0].index(b'"payload":') + len(b'"payload":')]
    extra = json.dumps({"schema": FLAT_ORDER, "payload": {"id": 9}, "note": "x"}, separators=(",", ":")).encode()
    result = decode_unframed(None, ValueFormat("connect_json"), values(*good, head + b'{"id": 5', extra, head + b"[1]}"))
    assert sorted(rows(result)) == [0, 1, 2, 3, 5]  # an envelope with an extra key is still one
    assert rows(result)[5]["id"] == 9
    got = failures(result)
    assert got[4][1].startswith("invalid JSON") and got[6][0] == "decode_error"


def _debezium_values(seed: int = 3) -> tuple[list[bytes | None], dict]:
    """Debezium's JSON converter output for a script (snapshot, updates, inserts, deletes and their
    tombstones), then the same table after a column was added (a second envelope schema)."""
    import router.cli.demo_cdc as cdc

    encode = cdc.DebeziumJsonEncoder(schemas=True)
    script = cdc.ChangeScript(seed=seed)
    out = [encode("dbz.customers", e)[2] for e in [*script.snapshot(30), *script.mixed(60)]]
    envelope = json.loads(next(v for v in out if v is not None))["schema"]
    widened = json.loads(json.dumps(envelope))
    for field in widened["fields"]:
        if field["field"] in ("before", "after"):
            field["fields"].append({"field": "vip", "type": "boolean", "optional": True})
    for i, value in enumerate(out[:10]):  # the first ten again, written after the column was added
        if value is not None:
            payload = json.loads(value)["payload"]
            for image in ("before", "after"):
                if payload[image] is not None:
                    payload[image]["vip"] = i % 2 == 0
            out.append(json.dumps({"schema": widened, "payload": payload}).encode())
    return out, widened


def test_debezium_json_batch_read_column_wise_gives_each_records_own_rows():
    """Every Debezium JSON record of a batch (nested before/after images, null images, tombstones,
    a schema change, malformed records) decodes to the row its own payload gives record by record."""
    import orjson

    from registry.connect_json import connect_artifacts

    good, widened = _debezium_values()
    broken = [b'{"schema": {"type": "struct"', b"", b'{"payload": {"id": 1}}', b'\xff{"schema": 1}']
    batch = [*good[:40], *broken, *good[40:]]
    result = decode_unframed(None, ValueFormat("connect_json"), values(*batch))
    expected = {}
    for i, value in enumerate(batch):
        if value is None or value in broken:
            continue
        doc = orjson.loads(value)
        records, _, bad = connect_artifacts(doc["schema"]).decoder.rows([doc["payload"]])
        assert not bad
        expected[i] = records.to_pylist()[0]
    got = rows(result)
    assert got == expected
    assert {g.schema_id for g in result.groups} == {connect_artifacts(json.loads(good[0])["schema"]).schema_id,
                                                    connect_artifacts(widened).schema_id}
    assert any(r["before"] is None for r in got.values()) and any(r["after"] is None for r in got.values())
    assert any(r["after"] and r["after"].get("vip") is True for r in got.values())
    fails = failures(result)
    assert sorted(fails) == sorted([i for i, v in enumerate(batch) if v is None] + [40, 41, 42, 43])
    assert {fails[i][0] for i, v in enumerate(batch) if v is None} == {"tombstone"}
    assert fails[40][0] == fails[41][0] == fails[42][0] == "decode_error" and fails[43][0] == "invalid_utf8"


def test_inferred_json_read_column_wise_gives_the_rows_of_the_record_by_record_block():
    """The batch joined by Arrow kernels reads as the bytes joined one by one did: nested objects,
    lists, nulls, a value pretty-printed over lines, and a slice of a larger column."""
    from registry.json_infer import _group, _shape, infer_json

    docs = [{"id": i, "price": i + 0.5, "who": {"name": f"n{i}", "tags": ["a"] * (i % 3)},
             "note": None if i % 2 else "x"} for i in range(40)]
    raw = [json.dumps(d).encode() for d in docs]
    raw[7] = json.dumps(docs[7], indent=2).encode()
    column = values(None, *raw, None).slice(1, len(raw))
    found, bad = infer_json(column)
    assert not bad and len(found) == 1
    art, batch, positions = found[0]
    by_record_art, by_record = _group(*_shape(raw, "long"))  # the bytes objects joined one by one
    assert positions.tolist() == list(range(40)) and art.schema_id == by_record_art.schema_id
    assert batch.to_pylist() == by_record.to_pylist()
    assert [f.name for f in art.arrow_schema] == ["id", "price", "who", "note"]
    assert batch.to_pylist()[7]["who"] == {"name": "n7", "tags": ["a"]} and batch.to_pylist()[1]["note"] is None
