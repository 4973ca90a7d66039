"""Protobuf subjects in the registry emulator: references, serialized form, identity and
Confluent's Protobuf compatibility rules at every level."""
from __future__ import annotations

import base64

import pytest
from confluent_kafka.schema_registry import Schema, SchemaReference
from confluent_kafka.schema_registry.error import SchemaRegistryError
from google.protobuf import descriptor_pb2

from router.devstack.registry_compat import compatibility_problems, parse_schema
from tests import protobuf_data as pb
from tests.router.devstack.registry_helpers import http


def proto(body: str, package: str = "p") -> str:
    return f'syntax = "proto3";\npackage {package};\n{body}\n'


def problems(level: str, new: str, *old: str) -> list[str]:
    return compatibility_problems(level, parse_schema(new, "PROTOBUF"), [parse_schema(o, "PROTOBUF") for o in old])


def test_protobuf_subject_with_references_round_trips_and_serves_the_serialized_form(client, server, unique_name):
    money, orders = unique_name("money"), unique_name("orders")
    assert client.register_schema(money, Schema(pb.MONEY, "PROTOBUF")) > 0
    sid = client.register_schema(orders, Schema(pb.ALL_TYPES, "PROTOBUF",
                                                [SchemaReference("common/money.proto", money, 1)]))
    fetched = client.get_schema(sid)
    assert fetched.schema_type == "PROTOBUF" and fetched.schema_str == pb.ALL_TYPES
    assert [(r.name, r.subject, r.version) for r in fetched.references] == [("common/money.proto", money, 1)]
    # comments and whitespace do not make a new schema
    assert client.register_schema(orders, Schema("// v1 again\n" + pb.ALL_TYPES.replace(";\n", ";\n\n"), "PROTOBUF",
                                                 [SchemaReference("common/money.proto", money, 1)])) == sid
    status, body = http(f"{server.url}/schemas/ids/{sid}?format=serialized")
    assert status == 200
    fd = descriptor_pb2.FileDescriptorProto.FromString(base64.b64decode(body["schema"]))
    assert [m.name for m in fd.message_type] == ["Order"] and "common/money.proto" in fd.dependency
    assert "PROTOBUF" in http(f"{server.url}/schemas/types")[1]


def test_protobuf_schema_with_a_missing_reference_or_bad_syntax_is_refused(client, unique_name):
    with pytest.raises(SchemaRegistryError, match="money.proto"):
        client.register_schema(unique_name("o"), Schema(pb.ALL_TYPES, "PROTOBUF"))
    with pytest.raises(SchemaRegistryError, match="strin"):
        client.register_schema(unique_name("o"), Schema(proto("message X { strin a = 1; }"), "PROTOBUF"))


BASE = proto("message M { int32 a = 1; string b = 2; oneof o { string x = 3; int64 y = 4; } }\n"
             "message Other { bool z = 1; }")


@pytest.mark.parametrize("new, rule", [
    (BASE.replace("int32 a = 1", "int64 a = 1"), None),                         # varint group
    (BASE.replace("string b = 2", "bytes b = 2"), None),                        # delimited group
    (BASE.replace("int32 a = 1", "int32 renamed = 1"), None),                   # names are not on the wire
    (BASE.replace("string b = 2;", "string b = 2; double added = 9;"), None),
    (BASE.replace("string b = 2;", ""), None),                                  # field removed
    (BASE.replace("int32 a = 1", "string a = 1"), "FIELD_SCALAR_KIND_CHANGED"),  # number reused, other type
    (BASE.replace("int32 a = 1", "sint32 a = 1"), "FIELD_SCALAR_KIND_CHANGED"),
    (BASE.replace("int32 a = 1", "Other a = 1"), "FIELD_KIND_CHANGED"),
    (BASE.replace("int32 a = 1", "repeated int32 a = 1"), "FIELD_NUMERIC_LABEL_CHANGED"),
    (BASE.replace("string b = 2", "repeated string b = 2"), None),
    (BASE.replace("\nmessage Other { bool z = 1; }", ""), "MESSAGE_REMOVED"),
    (BASE.replace("package p;", "package q;"), "PACKAGE_CHANGED"),
    (BASE.replace(" int64 y = 4;", ""), "ONEOF_FIELD_REMOVED"),
    (BASE.replace("string b = 2; oneof o { ", "oneof o { string b = 2; "), "FIELD_MOVED_TO_EXISTING_ONEOF"),
])
def test_backward_verdicts_follow_confluents_protobuf_rules(new, rule):
    found = problems("BACKWARD", new, BASE)
    if rule is None:
        assert found == []
    else:
        assert found and all(rule in p for p in found), found


def test_forward_full_and_transitive_levels():
    # a message added: BACKWARD fine; FORWARD reads it as the old schema, which lacks it
    added = BASE + "message Third { int32 t = 1; }\n"
    assert problems("BACKWARD", added, BASE) == []
    assert any("MESSAGE_REMOVED: Third" in p for p in problems("FORWARD", added, BASE))
    assert any("MESSAGE_REMOVED" in p for p in problems("FULL", added, BASE))
    # v1 int32 -> v2 int64 -> v3 string: v3 vs v2 breaks BACKWARD; transitive also names v1
    v2 = BASE.replace("int32 a = 1", "int64 a = 1")
    v3 = BASE.replace("int32 a = 1", "string a = 1")
    assert len(problems("BACKWARD", v3, BASE, v2)) == 1
    assert len(problems("BACKWARD_TRANSITIVE", v3, BASE, v2)) == 2
    proto2_required = 'syntax = "proto2";\npackage p;\nmessage M { optional int32 a = 1; }\n'
    assert any("REQUIRED_FIELD_ADDED" in p for p in problems(
        "BACKWARD", proto2_required.replace("optional int32 a = 1;", "optional int32 a = 1; required int32 r = 2;"),
        proto2_required))


def test_registering_an_incompatible_protobuf_schema_is_refused_with_409(client, unique_name):
    subject = unique_name("c")
    client.register_schema(subject, Schema(BASE, "PROTOBUF"))
    assert client.test_compatibility(subject, Schema(BASE.replace("int32 a", "int64 a"), "PROTOBUF"))
    assert not client.test_compatibility(subject, Schema(BASE.replace("int32 a", "string a"), "PROTOBUF"))
    with pytest.raises(SchemaRegistryError) as err:
        client.register_schema(subject, Schema(BASE.replace("int32 a", "string a"), "PROTOBUF"))
    assert err.value.http_status_code == 409 and "FIELD_SCALAR_KIND_CHANGED" in str(err.value)
