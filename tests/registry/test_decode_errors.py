"""Bad input never misreads: every bad row is reported, every good row decodes exactly."""
from __future__ import annotations

import datetime as dt
import io
import json
import random
import uuid
from decimal import Decimal

import fastavro
import numpy as np
import pytest
from confluent_kafka.schema_registry import Schema

from registry.client import CachedRegistry
from registry.config import RegistryConfig
from registry.decode import decode_keys, decode_values

UTC = dt.timezone.utc
SCHEMA = {
    "type": "record", "name": "Event", "namespace": "icerouter.test", "fields": [
        {"name": "name", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal",
                                    "precision": 12, "scale": 2}},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "inner", "type": {"type": "record", "name": "In", "fields": [
            {"name": "k", "type": "string"}, {"name": "v", "type": "double"}]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ]}
PARSED = fastavro.parse_schema(SCHEMA)


def _record(i: int) -> dict:
    return {"name": f"event-{i}-" + "x" * (i % 17), "n": i * 1_000_003, "note": None if i % 4 else f"n{i}",
            "amount": Decimal(i) / 100,
            "at": dt.datetime(2024, 1, 1, tzinfo=UTC) + dt.timedelta(milliseconds=i),
            "inner": {"k": f"k{i % 13}", "v": i / 7}, "tags": [f"t{j}" for j in range(i % 4)]}


def _encode(schema_id: int, rec: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, PARSED, rec)
    return b"\x00" + schema_id.to_bytes(4, "big") + buf.getvalue()


def _fastavro_rejects(payload: bytes) -> bool:
    try:
        fastavro.schemaless_reader(io.BytesIO(payload), PARSED, None)
        return False
    except Exception:
        return True


@pytest.fixture(scope="module", params=[True, False], ids=["columnar", "per_record"])
def setup(request, any_registry_url):
    reg = CachedRegistry(RegistryConfig(url=any_registry_url, retry_backoff_seconds=0.01),
                         columnar=request.param)
    sid = reg.client.register_schema(f"errors-{uuid.uuid4().hex[:8]}-value",
                                     Schema(json.dumps(SCHEMA), "AVRO"))
    return reg, sid


def _rows_by_index(res) -> dict[int, dict]:
    out = {}
    for g in res.groups:
        for idx, row in zip(g.indices.tolist(), g.batch.to_pylist()):
            assert idx not in out
            out[idx] = row
    return out


def _expected(i: int) -> dict:
    rec = _record(i)
    return rec


@pytest.mark.parametrize("damage", ["corrupt", "truncated"])
def test_one_bad_record_in_the_middle_of_10000(setup, damage):
    reg, sid = setup
    values = [_encode(sid, _record(i)) for i in range(10_000)]
    bad_at = 5_123
    v = values[bad_at]
    if damage == "corrupt":
        # the string length claims more bytes than the payload holds
        values[bad_at] = v[:5] + fastavro_len(len(v) + 50) + v[6:]
    else:
        values[bad_at] = v[: len(v) // 2]
    assert _fastavro_rejects(values[bad_at][5:])  # the reference decoder rejects it too

    res = decode_values(reg, values)

    assert [(f.index, f.error_class, f.schema_id, f.transient) for f in res.failures] == \
        [(bad_at, "decode_error", sid, False)]
    rows = _rows_by_index(res)
    assert sorted(rows) == [i for i in range(10_000) if i != bad_at]
    for i in (0, 1, bad_at - 1, bad_at + 1, bad_at + 2, 9_999):
        assert rows[i] == _expected(i)
    assert all(rows[i] == _expected(i) for i in range(0, 10_000, 1) if i != bad_at)


def fastavro_len(n: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, {"type": "long"}, n)
    return buf.getvalue()


def test_many_random_bad_records_isolated_exactly(setup):
    reg, sid = setup
    rng = random.Random(7)
    values = [_encode(sid, _record(i)) for i in range(3_000)]
    bad = sorted(rng.sample(range(3_000), 25))
    for k, i in enumerate(bad):
        v = values[i]
        values[i] = v[: 5 + (len(v) - 5) // 3] if k % 2 else v[:5] + fastavro_len(len(v) * 3) + v[6:]
        assert _fastavro_rejects(values[i][5:])
    res = decode_values(reg, values)
    assert [f.index for f in res.failures] == bad
    rows = _rows_by_index(res)
    assert all(rows[i] == _expected(i) for i in range(3_000) if i not in set(bad))


def test_trailing_bytes_are_ignored_like_confluent(setup):
    """The misaligned record goes to fastavro, which ignores trailing bytes."""
    reg, sid = setup
    values = [_encode(sid, _record(i)) for i in range(100)]
    values[40] = values[40] + b"\x01\x02\x03"
    res = decode_values(reg, values)
    assert res.failures == []
    assert _rows_by_index(res) == {i: _expected(i) for i in range(100)}


def test_wire_format_failures_and_tombstones(setup):
    reg, sid = setup
    good = _encode(sid, _record(1))
    values = [good, None, b"", b"plain text", b"\x00\x00\x01", b"\x01" + b"\x00" * 5, good]
    res = decode_values(reg, values)
    assert [(f.index, f.error_class) for f in res.failures] == [
        (1, "tombstone"), (2, "wire_format"), (3, "wire_format"), (4, "wire_format"),
        (5, "wire_format")]
    assert all(not f.transient for f in res.failures)
    assert "magic" in res.failures[2].reason
    assert sorted(_rows_by_index(res)) == [0, 6]


def test_unknown_schema_id_is_terminal_failure(setup):
    reg, sid = setup
    unknown = 987_654
    values = [_encode(sid, _record(0)), _encode(unknown, _record(1)), _encode(unknown, _record(2))]
    res = decode_values(reg, values)
    assert [(f.index, f.error_class, f.schema_id, f.transient) for f in res.failures] == [
        (1, "schema_not_found", unknown, False), (2, "schema_not_found", unknown, False)]
    assert sorted(_rows_by_index(res)) == [0]


def test_registry_unreachable_is_transient_failure():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]   # closed once we leave the block: connection refused
    reg = CachedRegistry(RegistryConfig(url=f"http://127.0.0.1:{port}", retry_attempts=2,
                                        retry_backoff_seconds=0.01, request_timeout_seconds=2))
    res = decode_values(reg, [_encode(1, _record(0)), None])
    assert [(f.index, f.error_class, f.transient) for f in res.failures] == [
        (0, "registry_unavailable", True), (1, "tombstone", False)]
    assert reg.stats["requests"] == 2


def test_headers_schema_id(setup):
    reg, sid = setup
    bare = [_encode(sid, _record(i))[5:] for i in range(3)]
    header = b"\x00" + sid.to_bytes(4, "big")
    res = decode_values(reg, bare, headers=[[("__value_schema_id", header)], {"__value_schema_id": header},
                                            [("other", b"x"), ("__value_schema_id", header)]])
    assert res.failures == []
    assert _rows_by_index(res) == {i: _expected(i) for i in range(3)}


def test_decode_keys_modes(setup):
    reg, sid = setup
    keys = [b"alpha", None, b"\xff\xfe", "ü".encode()]
    s = decode_keys(None, keys, "string")
    assert [(f.index, f.error_class) for f in s.failures] == [(2, "invalid_utf8")]
    assert s.groups[0].batch.column("key").to_pylist() == ["alpha", None, "ü"]
    np.testing.assert_array_equal(s.groups[0].indices, [0, 1, 3])
    b = decode_keys(None, keys, "bytes")
    assert b.failures == [] and b.groups[0].batch.column("key").to_pylist() == keys
    a = decode_keys(reg, [_encode(sid, _record(3)), None], "avro")
    assert [(f.index, f.error_class) for f in a.failures] == [(1, "null_key")]
    assert _rows_by_index(a) == {0: _expected(3)}
    with pytest.raises(ValueError):
        decode_keys(None, keys, "protobuf")


def test_fuzzed_records_never_misread(setup):
    """Random byte damage never shifts other rows: every undamaged row decodes
    exactly, and a damaged row is either reported or decodes as fastavro decodes it.

    (Damage that keeps a record's length is undetectable without a checksum;
    polars also tolerates an out-of-range branch index of a [null, X] union
    where fastavro raises, so such a row may decode instead of failing.)
    """
    reg, sid = setup
    rng = random.Random(11)
    values = [_encode(sid, _record(i)) for i in range(4_000)]
    damaged = set(rng.sample(range(4_000), 60))
    for i in damaged:
        v = bytearray(values[i])
        for _ in range(rng.randrange(1, 4)):
            v[rng.randrange(5, len(v))] = rng.randrange(256)
        values[i] = bytes(v) if rng.random() < 0.7 else bytes(v[: rng.randrange(6, len(v))])
    res = decode_values(reg, values)
    rows = _rows_by_index(res)
    failed = {f.index for f in res.failures}
    assert failed <= damaged
    assert failed | set(rows) == set(range(4_000)) and not failed & set(rows)
    assert all(rows[i] == _expected(i) for i in range(4_000) if i not in damaged)
    for i in damaged & set(rows):
        try:
            reference = fastavro.schemaless_reader(io.BytesIO(values[i][5:]), PARSED, None)
        except Exception:
            continue
        assert rows[i] == reference
    assert len(failed) >= len(damaged) // 3   # most damage is detected at all


def test_failures_convert_to_picklable_exceptions(setup):
    import pickle
    from registry.exceptions import DecodeError, SchemaNotFound, WireFormatError
    reg, sid = setup
    good = _encode(sid, _record(0))
    res = decode_values(reg, [b"junk", _encode(987_655, _record(0)), good[: len(good) // 2]])
    excs = [f.to_exception(topic="orders", partition=2, offset=100 + f.index) for f in res.failures]
    assert [type(e) for e in excs] == [WireFormatError, SchemaNotFound, DecodeError]
    back = pickle.loads(pickle.dumps(excs[2]))
    assert (back.topic, back.partition, back.offset, back.schema_id) == ("orders", 2, 102, sid)
    assert not any(e.transient for e in excs)
