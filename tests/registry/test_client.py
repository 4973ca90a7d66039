"""CachedRegistry against a real HTTP registry that the tests stop, restart and break."""
from __future__ import annotations

import io
import json
import pickle
import time
import uuid

import fastavro
import pytest
from confluent_kafka.schema_registry import Schema

from registry.client import CachedRegistry, get_registry
from registry.config import RegistryConfig
from registry.decode import decode_values
from registry.exceptions import RegistryError, RegistryUnavailable, SchemaNotFound


def _schema(version: int) -> dict:
    fields = [{"name": "a", "type": "long"}]
    fields += [{"name": f"extra{k}", "type": ["null", "string"], "default": None}
               for k in range(1, version)]
    return {"type": "record", "name": "Ttl", "fields": fields}


def _register(reg: CachedRegistry, subject: str, schema: dict) -> int:
    return reg.client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


def _framed(sid: int, schema: dict, rec: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(schema), rec)
    return b"\x00" + sid.to_bytes(4, "big") + buf.getvalue()


def _config(url: str, **kw) -> RegistryConfig:
    kw.setdefault("retry_backoff_seconds", 0.01)
    return RegistryConfig(url=url, **kw)


def test_latest_respects_ttl(any_registry_url):
    reg = CachedRegistry(_config(any_registry_url, latest_ttl_seconds=0.6))
    subject = f"ttl-{uuid.uuid4().hex[:8]}-value"
    v1 = _register(reg, subject, _schema(1))
    assert reg.latest(subject).schema_id == v1
    v2 = _register(reg, subject, _schema(2))
    assert v2 != v1
    assert reg.latest(subject).schema_id == v1          # cached: not seen before the TTL
    time.sleep(0.8)
    assert reg.latest(subject).schema_id == v2          # seen after the TTL
    assert reg.latest(subject).version == 2


def test_cache_served_while_registry_is_down(local_registry):
    reg = CachedRegistry(_config(local_registry.url, latest_ttl_seconds=1.0, retry_attempts=2))
    subject = "down-value"
    schema = _schema(2)
    sid = _register(reg, subject, schema)
    values = [_framed(sid, schema, {"a": i, "extra1": str(i)}) for i in range(100)]
    assert decode_values(reg, values).decoded_rows == 100
    assert reg.latest(subject).schema_id == sid
    requests_before = local_registry.state.requests

    local_registry.stop()
    res = decode_values(reg, values)                    # ids are immutable: served from cache
    assert res.failures == [] and res.decoded_rows == 100
    assert reg.latest(subject).schema_id == sid         # within TTL
    time.sleep(1.1)
    assert reg.latest(subject).schema_id == sid         # expired, registry down: last known
    assert reg.latest(subject).schema_id == sid         # ... kept for another TTL
    assert reg.stats["stale_served"] == 1
    other = decode_values(reg, [_framed(sid + 100, schema, {"a": 1, "extra1": None})])
    assert [(f.error_class, f.transient) for f in other.failures] == [("registry_unavailable", True)]
    with pytest.raises(RegistryUnavailable) as err:
        reg.latest("never-seen-value")
    assert err.value.transient and err.value.attempts == 2

    local_registry.start()                              # same port
    time.sleep(1.1)
    assert reg.latest(subject).schema_id == sid
    assert local_registry.state.requests == requests_before + 1


def test_5xx_is_retried_then_unavailable(local_registry):
    reg = CachedRegistry(_config(local_registry.url, retry_attempts=3))
    local_registry.state.fail_status = 503
    with pytest.raises(RegistryUnavailable) as err:
        reg.schema(1)
    assert err.value.status == 503 and err.value.attempts == 3
    assert local_registry.state.requests == 3
    assert reg.stats["retries"] == 2


def test_other_http_errors_are_terminal(local_registry):
    reg = CachedRegistry(_config(local_registry.url, retry_attempts=3))
    local_registry.state.fail_status = 401
    with pytest.raises(RegistryError) as err:
        reg.schema(1)
    assert not err.value.transient and err.value.status == 401
    assert local_registry.state.requests == 1


def test_404_is_schema_not_found(any_registry_url):
    reg = CachedRegistry(_config(any_registry_url))
    with pytest.raises(SchemaNotFound) as err:
        reg.schema(999_999)
    assert err.value.schema_id == 999_999 and not err.value.transient
    with pytest.raises(SchemaNotFound) as err:
        reg.latest(f"missing-{uuid.uuid4().hex}")
    assert err.value.subject.startswith("missing-")


def test_schema_by_guid_and_artifacts_cached_once(local_registry):
    reg = CachedRegistry(_config(local_registry.url))
    schema = _schema(1)
    sid = _register(reg, "guid-value", schema)
    guid = local_registry.state.schemas[sid - 1]["guid"]
    assert json.loads(reg.schema(guid).schema_str) == schema
    art = reg.artifacts(sid)
    assert art.schema_id == sid and art.schema_type == "AVRO" and art.columnar
    assert art.arrow_schema.names == ["a"]
    before = local_registry.state.requests
    for _ in range(5):
        assert reg.artifacts(sid) is art
        decode_values(reg, [_framed(sid, schema, {"a": 1})])
    assert local_registry.state.requests == before


def test_get_registry_is_a_per_process_singleton(any_registry_url):
    cfg = _config(any_registry_url)
    reg = get_registry(cfg)
    assert get_registry(pickle.loads(pickle.dumps(cfg))) is reg    # config travels, not the client
    assert get_registry(_config(any_registry_url, latest_ttl_seconds=5)) is not reg


def test_unsupported_schema_type_is_a_failure(local_registry):
    reg = CachedRegistry(_config(local_registry.url))
    sid = reg.client.register_schema("proto-value", Schema('syntax = "proto3"; message M {}',
                                                           "PROTOBUF"))
    res = decode_values(reg, [b"\x00" + sid.to_bytes(4, "big") + b"\x00"])
    assert [(f.error_class, f.transient) for f in res.failures] == [("unsupported_schema", False)]


def test_schema_references_are_resolved(local_registry):
    from confluent_kafka.schema_registry import SchemaReference
    reg = CachedRegistry(_config(local_registry.url))
    inner = {"type": "record", "name": "Money", "namespace": "shop",
             "fields": [{"name": "cents", "type": "long"}, {"name": "ccy", "type": "string"}]}
    reg.client.register_schema("shop.Money", Schema(json.dumps(inner), "AVRO"))
    outer = {"type": "record", "name": "Order", "namespace": "shop",
             "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "shop.Money"},
                        {"name": "items", "type": {"type": "array", "items": "shop.Money"}}]}
    sid = reg.client.register_schema("orders-value", Schema(
        json.dumps(outer), "AVRO", [SchemaReference("shop.Money", "shop.Money", 1)]))
    named: dict = {}
    fastavro.parse_schema(inner, named_schemas=named)
    full = fastavro.parse_schema(outer, named_schemas=named)
    recs = [{"id": i, "total": {"cents": i * 100, "ccy": "EUR"},
             "items": [{"cents": i, "ccy": "USD"}] * (i % 3)} for i in range(50)]
    values = []
    for rec in recs:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, full, rec)
        values.append(b"\x00" + sid.to_bytes(4, "big") + buf.getvalue())
    res = decode_values(reg, values)
    assert res.failures == []
    assert res.groups[0].batch.to_pylist() == recs
    assert res.groups[0].artifacts.columnar


def test_concurrent_decoding_fetches_each_schema_once(local_registry):
    from concurrent.futures import ThreadPoolExecutor
    reg = CachedRegistry(_config(local_registry.url))
    schemas = [dict(_schema(1), name=f"Conc{k}") for k in range(4)]
    sids = [_register(reg, f"conc{k}-value", s) for k, s in enumerate(schemas)]
    values = [_framed(sids[i % 4], schemas[i % 4], {"a": i}) for i in range(2_000)]
    before = local_registry.state.requests
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: decode_values(reg, values), range(16)))
    for res in results:
        assert res.failures == [] and res.decoded_rows == 2_000
        for g in res.groups:
            assert g.batch.column("a").to_pylist() == g.indices.tolist()
    assert local_registry.state.requests - before == 4     # one GET per schema id


def _avro(*fields: tuple[str, str]) -> str:
    return json.dumps({"type": "record", "name": "C", "fields": [{"name": n, "type": t} for n, t in fields]})


def test_compatibility_uses_the_per_version_endpoint_at_the_subject_level(registry_api_url):
    reg = CachedRegistry(_config(registry_api_url))
    subject = f"compat-{uuid.uuid4().hex[:8]}-value"
    assert reg.compatibility(subject, _avro(("a", "int"))).verdict == "new"
    reg.client.set_compatibility(subject, "NONE")
    reg.client.register_schema(subject, Schema(_avro(("a", "int")), "AVRO"))
    reg.client.register_schema(subject, Schema(_avro(("a", "string")), "AVRO"))
    reg.client.set_compatibility(subject, "BACKWARD")
    back_to_int = _avro(("a", "int"))  # fine for v1, refused by v2 (string -> int)
    latest = reg.compatibility(subject, _avro(("a", "string"), ("b", "long")))
    assert (latest.verdict, latest.level, latest.versions) == ("incompatible", "BACKWARD", (1, 2))
    assert latest.messages and all(m.startswith("version 2: ") for m in latest.messages)
    # v2 alone accepts a string field: compatible at BACKWARD, refused by v1 at BACKWARD_TRANSITIVE
    assert reg.compatibility(subject, _avro(("a", "string"))).verdict == "compatible"
    reg.client.set_compatibility(subject, "BACKWARD_TRANSITIVE")
    transitive = reg.compatibility(subject, _avro(("a", "string")))
    assert (transitive.verdict, transitive.level) == ("incompatible", "BACKWARD_TRANSITIVE")
    assert [m.split(":")[0] for m in transitive.messages] == ["version 1"]
    assert reg.compatibility(subject, back_to_int).verdict == "incompatible"
    # no subject-level config: the global level applies
    other = f"compat-{uuid.uuid4().hex[:8]}-value"
    reg.client.register_schema(other, Schema(_avro(("a", "int")), "AVRO"))
    assert reg.compatibility(other, _avro(("a", "int"))).level == reg.client.get_compatibility()
    invalid = reg.compatibility(other, '{"type": "record", "name": "X", "fields": [{"name": "a"}]}')
    assert invalid.verdict == "invalid" and invalid.messages


def test_compatibility_when_the_registry_is_down_is_unavailable_with_its_url():
    reg = CachedRegistry(_config("http://user:s3cret@127.0.0.1:9", retry_attempts=2))
    with pytest.raises(RegistryUnavailable) as err:
        reg.compatibility("orders-value", _avro(("a", "int")))
    assert err.value.transient and err.value.url == "http://user:***@127.0.0.1:9"
    assert "s3cret" not in str(err.value)
