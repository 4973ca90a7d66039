"""The registry emulator against confluent-kafka's SchemaRegistryClient and raw HTTP."""

from __future__ import annotations

import json
import os
import pickle
import shutil

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from router.devstack.exceptions import RegistryApiError, RegistryStoreError, ServiceStartError
from router.devstack.registry_server import RegistryServer
from tests.router.devstack.registry_helpers import avro, http, rec


def test_register_same_schema_two_subjects_same_id_and_reregister_is_idempotent(client, unique_name):
    s1, s2 = unique_name("a"), unique_name("b")
    text = rec(("id", "long"), ("name", "string"))
    first = client.register_schema(s1, avro(text))
    assert client.register_schema(s2, avro(text)) == first
    # whitespace and key order do not make a new schema
    pretty = json.dumps(json.loads(text), indent=4, sort_keys=True)
    assert client.register_schema(s1, avro(pretty)) == first
    assert client.get_versions(s1) == [1]
    second = client.register_schema(s1, avro(rec(("id", "long"), ("name", "string"), ("n", "int", 0))))
    assert second != first
    assert client.get_versions(s1) == [1, 2]
    latest = client.get_latest_version(s1)
    assert (latest.version, latest.schema_id) == (2, second)
    assert client.get_version(s1, 1).schema_id == first
    versions = client.get_schema_versions(first)
    assert {(v.subject, v.version) for v in versions} == {(s1, 1), (s2, 1)}
    assert sorted(client.get_subjects_by_schema_id(first)) == sorted([s1, s2])
    assert {s1, s2} <= set(client.get_subjects())


def test_lookup_and_fetch_by_id(client, server, unique_name):
    subject = unique_name("lookup")
    text = rec(("x", "int"))
    sid = client.register_schema(subject, avro(text))
    found = client.lookup_schema(subject, avro(text))
    assert (found.schema_id, found.version, found.subject) == (sid, 1, subject)
    fetched = client.get_schema(sid, subject_name=subject)
    assert json.loads(fetched.schema_str) == json.loads(text)
    status, body = http(f"{server.url}/schemas/ids/{sid}?subject={subject}")
    assert status == 200 and json.loads(body["schema"]) == json.loads(text)
    status, raw = http(f"{server.url}/subjects/{subject}/versions/latest/schema")
    assert status == 200 and raw == json.loads(text)
    status, raw = http(f"{server.url}/subjects/{subject}/versions/1/schema")
    assert status == 200 and raw == json.loads(text)
    # not registered under this subject
    with pytest.raises(SchemaRegistryError) as err:
        client.lookup_schema(subject, avro(rec(("y", "int"))))
    assert (err.value.http_status_code, err.value.error_code) == (404, 40403)
    status, body = http(f"{server.url}/subjects/{unique_name('nope')}", "POST", {"schema": text})
    assert (status, body["error_code"]) == (404, 40401)
    status, body = http(f"{server.url}/schemas/ids/999999")
    assert (status, body["error_code"]) == (404, 40403)
    status, body = http(f"{server.url}/schemas/ids/{sid}/versions")
    assert status == 200 and {"subject": subject, "version": 1} in body
    status, body = http(f"{server.url}/schemas/types")
    assert status == 200 and set(body) == {"AVRO", "JSON", "PROTOBUF"}


def test_version_errors(client, server, unique_name):
    subject = unique_name("ver")
    client.register_schema(subject, avro(rec(("x", "int"))))
    status, body = http(f"{server.url}/subjects/{subject}/versions/7")
    assert (status, body["error_code"]) == (404, 40402)
    status, body = http(f"{server.url}/subjects/{subject}/versions/abc")
    assert (status, body["error_code"]) == (422, 42202)
    status, body = http(f"{server.url}/subjects/{subject}/versions/0")
    assert (status, body["error_code"]) == (422, 42202)
    status, body = http(f"{server.url}/subjects/{unique_name('none')}/versions")
    assert (status, body["error_code"]) == (404, 40401)
    status, body = http(f"{server.url}/subjects/{unique_name('none')}/versions/latest")
    assert (status, body["error_code"]) == (404, 40401)


@pytest.mark.parametrize("body", [
    {"schema": "{not json"},
    {"schema": json.dumps({"type": "record", "name": "R", "fields": [{"name": "a", "type": "nosuchtype"}]})},
    {"schema": json.dumps({"type": "record", "fields": []})},
    {"schema": "[1, 2", "schemaType": "JSON"},
    {"schema": "42", "schemaType": "JSON"},
    {"schema": "{}", "schemaType": "PROTOBUF"},
    {"no_schema": True},
])
def test_invalid_schema_is_42201(server, unique_name, body):
    status, out = http(f"{server.url}/subjects/{unique_name('bad')}/versions", "POST", body)
    assert (status, out["error_code"]) == (422, 42201)
    assert out["message"]


def test_content_types(server, unique_name):
    subject = unique_name("ct")
    body = {"schema": rec(("x", "int"))}
    status, out = http(f"{server.url}/subjects/{subject}/versions", "POST", body, content_type="application/json")
    assert status == 200 and isinstance(out["id"], int)
    status, out = http(f"{server.url}/subjects/{subject}/versions", "POST", body, content_type="text/plain")
    assert (status, out["error_code"]) == (415, 415)
    status, out = http(f"{server.url}/nowhere")
    assert status == 404


# (level, history registered under NONE, candidate, compatible?)
COMPAT_CASES = [
    ("BACKWARD", [rec(("a", "int"))], rec(("a", "int"), ("b", "string", "")), True),
    ("BACKWARD", [rec(("a", "int"))], rec(("a", "int"), ("b", "string")), False),
    ("BACKWARD", [rec(("a", "int"), ("b", "string"))], rec(("a", "int")), True),
    ("BACKWARD", [rec(("a", "int"))], rec(("a", "long")), True),
    ("BACKWARD", [rec(("a", "long"))], rec(("a", "int")), False),
    ("BACKWARD", [rec(("a", "int"))], rec(("a", "string")), False),
    ("BACKWARD", [rec(("a", "int"))], rec(("a", ["null", "int"], None)), True),
    ("FORWARD", [rec(("a", "int"), ("b", "string"))], rec(("a", "int")), False),
    ("FORWARD", [rec(("a", "int"), ("b", "string", ""))], rec(("a", "int")), True),
    ("FORWARD", [rec(("a", "int"))], rec(("a", "int"), ("b", "string")), True),
    ("FORWARD", [rec(("a", "int"))], rec(("a", "long")), False),
    ("FULL", [rec(("a", "int"))], rec(("a", "int"), ("b", "string", "")), True),
    ("FULL", [rec(("a", "int"))], rec(("a", "int"), ("b", "string")), False),
    ("FULL", [rec(("a", "int"))], rec(("a", "long")), False),
    ("NONE", [rec(("a", "int"))], rec(("a", "string")), True),
    ("NONE", [rec(("a", "int")), rec(("a", "string"))], rec(("z", "bytes")), True),
    # three versions: the candidate matches the latest but not the first
    ("BACKWARD", [rec(("a", "int"), ("c", "string")), rec(("a", "int"))], rec(("a", "int"), ("c", "int", 0)), True),
    ("BACKWARD_TRANSITIVE", [rec(("a", "int"), ("c", "string")), rec(("a", "int"))],
     rec(("a", "int"), ("c", "int", 0)), False),
    ("BACKWARD_TRANSITIVE", [rec(("a", "int"), ("c", "string")), rec(("a", "int"))],
     rec(("a", "int"), ("c", "string", "")), True),
    ("FORWARD", [rec(("a", "int"), ("c", "string", "x")), rec(("a", "int"))], rec(("a", "int"), ("c", "int")), True),
    ("FORWARD_TRANSITIVE", [rec(("a", "int"), ("c", "string", "x")), rec(("a", "int"))],
     rec(("a", "int"), ("c", "int")), False),
    ("FULL", [rec(("a", "int"), ("c", "string", "x")), rec(("a", "int"))], rec(("a", "int"), ("c", "int", 0)), True),
    ("FULL_TRANSITIVE", [rec(("a", "int"), ("c", "string", "x")), rec(("a", "int"))],
     rec(("a", "int"), ("c", "int", 0)), False),
    ("BACKWARD", [json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]})],
     json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}), True),
    ("FORWARD", [json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B"]})],
     json.dumps({"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}), False),
]


@pytest.mark.parametrize("level,history,candidate,expected", COMPAT_CASES)
def test_compatibility_verdicts(client, server, unique_name, level, history, candidate, expected):
    subject = unique_name("compat")
    client.set_compatibility(subject, "NONE")
    for text in history:
        client.register_schema(subject, avro(text))
    assert client.get_versions(subject) == list(range(1, len(history) + 1))
    client.set_compatibility(subject, level)
    assert client.get_compatibility(subject) == level
    assert client.test_compatibility_all_versions(subject, avro(candidate)) is expected
    # the per-version endpoint checks one version: a transitive level is every version, one by one
    versions = client.get_versions(subject) if level.endswith("_TRANSITIVE") else ["latest"]
    answers = [http(f"{server.url}/compatibility/subjects/{subject}/versions/{v}?verbose=true",
                    "POST", {"schema": candidate}) for v in versions]
    assert all(status == 200 for status, _ in answers)
    assert all(body["is_compatible"] for _, body in answers) is expected
    assert any(body["messages"] for _, body in answers) is not expected
    if expected:
        assert client.register_schema(subject, avro(candidate)) > 0
        assert len(client.get_versions(subject)) == len(history) + 1
    else:
        with pytest.raises(SchemaRegistryError) as err:
            client.register_schema(subject, avro(candidate))
        assert (err.value.http_status_code, err.value.error_code) == (409, 409)
        assert len(client.get_versions(subject)) == len(history)


def test_compatibility_against_a_given_version_and_unknown_subject(client, server, unique_name):
    subject = unique_name("cv")
    client.set_compatibility(subject, "NONE")
    client.register_schema(subject, avro(rec(("a", "int"))))
    client.register_schema(subject, avro(rec(("a", "string"))))
    client.set_compatibility(subject, "BACKWARD")
    candidate = avro(rec(("a", "long")))
    assert client.test_compatibility(subject, candidate, version=1) is True
    assert client.test_compatibility(subject, candidate, version=2) is False
    status, body = http(f"{server.url}/compatibility/subjects/{subject}/versions/9", "POST",
                        {"schema": rec(("a", "long"))})
    assert (status, body["error_code"]) == (404, 40402)
    status, body = http(f"{server.url}/compatibility/subjects/{unique_name('x')}/versions/latest", "POST",
                        {"schema": rec(("a", "long"))})
    assert (status, body["error_code"]) == (404, 40401)


def test_config_global_and_subject(client, server, unique_name):
    subject = unique_name("cfg")
    assert client.get_compatibility() == "BACKWARD"
    status, body = http(f"{server.url}/config/{subject}")
    assert (status, body["error_code"]) == (404, 40408)
    status, body = http(f"{server.url}/config/{subject}?defaultToGlobal=true")
    assert (status, body) == (200, {"compatibilityLevel": "BACKWARD"})
    assert client.set_compatibility(subject, "full_transitive") == {"compatibility": "FULL_TRANSITIVE"}
    assert client.get_compatibility(subject) == "FULL_TRANSITIVE"
    status, body = http(f"{server.url}/config/{subject}", "PUT", {"compatibility": "SIDEWAYS"})
    assert (status, body["error_code"]) == (422, 42203)
    status, body = http(f"{server.url}/config", "PUT", {"compatibility": "FORWARD"})
    assert (status, body) == (200, {"compatibility": "FORWARD"})
    try:
        assert client.get_compatibility() == "FORWARD"
        assert client.get_compatibility(subject) == "FULL_TRANSITIVE"
    finally:
        http(f"{server.url}/config", "PUT", {"compatibility": "BACKWARD"})
    status, body = http(f"{server.url}/config/{subject}", "DELETE")
    assert (status, body) == (200, {"compatibilityLevel": "FULL_TRANSITIVE"})
    status, body = http(f"{server.url}/config/{subject}")
    assert status == 404
    status, body = http(f"{server.url}/mode")
    assert (status, body) == (200, {"mode": "READWRITE"})


def test_delete_subject_and_versions(client, server, unique_name):
    subject = unique_name("del")
    id1 = client.register_schema(subject, avro(rec(("a", "int"))))
    client.register_schema(subject, avro(rec(("a", "int"), ("b", "int", 0))))
    client.register_schema(subject, avro(rec(("a", "int"), ("b", "int", 0), ("c", "int", 0))))
    # permanent delete needs a soft delete first
    status, body = http(f"{server.url}/subjects/{subject}/versions/2?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40407)
    assert client.delete_version(subject, 2) == 2
    assert client.get_versions(subject) == [1, 3]
    status, body = http(f"{server.url}/subjects/{subject}/versions?deleted=true")
    assert body == [1, 2, 3]
    assert client.delete_version(subject, 2, permanent=True) == 2
    status, body = http(f"{server.url}/subjects/{subject}/versions?deleted=true")
    assert body == [1, 3]
    status, body = http(f"{server.url}/subjects/{subject}/versions/2", "DELETE")
    assert (status, body["error_code"]) == (404, 40402)
    status, body = http(f"{server.url}/subjects/{subject}?permanent=true", "DELETE")
    assert (status, body["error_code"]) == (404, 40405)
    assert client.delete_subject(subject) == [1, 3]
    assert subject not in client.get_subjects()
    status, body = http(f"{server.url}/subjects?deleted=true")
    assert subject in body
    status, body = http(f"{server.url}/subjects/{subject}", "DELETE")
    assert (status, body["error_code"]) == (404, 40401)
    assert client.delete_subject(subject, permanent=True) == [1, 3]
    status, body = http(f"{server.url}/subjects?deleted=true")
    assert subject not in body
    # ids outlive their subjects, and re-registering reuses them
    assert client.get_schema(id1).schema_str
    assert client.register_schema(subject, avro(rec(("a", "int")))) == id1


def test_json_schema_type_and_rules(client, server, unique_name):
    subject = unique_name("json")
    v1 = {"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"]}
    sid = client.register_schema(subject, Schema(json.dumps(v1), "JSON"))
    fetched = client.get_schema(sid)
    assert fetched.schema_type == "JSON" and json.loads(fetched.schema_str) == v1
    optional = {**v1, "properties": {**v1["properties"], "note": {"type": "string"}}}
    required = {**optional, "required": ["id", "note"]}
    retyped = {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
    widened = {"type": "object", "properties": {"id": {"type": "number"}}, "required": ["id"]}
    assert client.test_compatibility(subject, Schema(json.dumps(optional), "JSON")) is True
    assert client.test_compatibility(subject, Schema(json.dumps(required), "JSON")) is False
    assert client.test_compatibility(subject, Schema(json.dumps(retyped), "JSON")) is False
    assert client.test_compatibility(subject, Schema(json.dumps(widened), "JSON")) is True
    # an Avro schema under a JSON subject changes the schema type
    assert client.test_compatibility(subject, avro(rec(("id", "long")))) is False


def test_ids_survive_restart(tmp_path, unique_name):
    data_file = str(tmp_path / "registry.json")
    subject = unique_name("persist")
    with RegistryServer(data_file=data_file) as first:
        c1 = SchemaRegistryClient({"url": first.url})
        id1 = c1.register_schema(subject, avro(rec(("a", "int"))))
        id2 = c1.register_schema(subject, avro(rec(("a", "int"), ("b", "int", 1))))
        c1.set_compatibility(subject, "FULL")
    assert not [f for f in os.listdir(tmp_path) if f.startswith(".registry-")]  # no temp files left
    with RegistryServer(data_file=data_file) as second:
        c2 = SchemaRegistryClient({"url": second.url})
        assert c2.get_version(subject, 1).schema_id == id1
        assert c2.get_latest_version(subject).schema_id == id2
        assert c2.get_compatibility(subject) == "FULL"
        id3 = c2.register_schema(unique_name("other"), avro(rec(("z", "string"))))
        assert id3 == max(id1, id2) + 1


def test_store_error_is_50001(tmp_path, unique_name):
    data_dir = tmp_path / "gone"
    with RegistryServer(data_file=str(data_dir / "registry.json")) as srv:
        client = SchemaRegistryClient({"url": srv.url})
        client.register_schema(unique_name("ok"), avro(rec(("a", "int"))))
        shutil.rmtree(data_dir)
        data_dir.write_text("a file where the data dir was")
        status, body = http(f"{srv.url}/subjects/{unique_name('fail')}/versions", "POST",
                            {"schema": rec(("b", "int"))})
        assert (status, body["error_code"]) == (500, 50001)


def test_errors_pickle_and_carry_retry_hint():
    err = RegistryApiError(404, 40401, "Subject 'x' not found.")
    copy = pickle.loads(pickle.dumps(err))
    assert (copy.http_status, copy.error_code, copy.detail, copy.transient) == (404, 40401, err.detail, False)
    store = pickle.loads(pickle.dumps(RegistryStoreError(500, 50001, "disk full")))
    assert store.transient is True and store.error_code == 50001
    start = pickle.loads(pickle.dumps(ServiceStartError("kafka", "port taken")))
    assert start.transient is True and start.service == "kafka" and str(start) == "kafka: port taken"


def test_strict_mode_serves_only_the_per_version_compatibility_endpoint(tmp_path, unique_name):
    with RegistryServer(port=0, data_file=str(tmp_path / "r.json"), strict=True) as strict:
        client = SchemaRegistryClient({"url": strict.url})
        subject = unique_name("strict")
        client.register_schema(subject, avro(rec(("a", "int"))))
        client.set_compatibility(subject, "BACKWARD_TRANSITIVE")
        status, body = http(f"{strict.url}/compatibility/subjects/{subject}/versions", "POST",
                            {"schema": rec(("a", "string"))})
        assert (status, body["error_code"]) == (404, 404)
        status, body = http(f"{strict.url}/compatibility/subjects/{subject}/versions/1?verbose=true", "POST",
                            {"schema": rec(("a", "string"))})
        assert status == 200 and body["is_compatible"] is False
        assert body["messages"][0].startswith("BACKWARD: ")  # the version asked about is not repeated
        assert "strict=True" in repr(strict)
