"""Helpers shared by the registry emulator tests."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from confluent_kafka.schema_registry import Schema

CT = "application/vnd.schemaregistry.v1+json"


def rec(*fields, name="Rec") -> str:
    """Avro record schema text; a field is (name, type) or (name, type, default)."""
    out = []
    for f in fields:
        field = {"name": f[0], "type": f[1]}
        if len(f) == 3:
            field["default"] = f[2]
        out.append(field)
    return json.dumps({"type": "record", "name": name, "namespace": "test", "fields": out})


def avro(text: str) -> Schema:
    return Schema(text, "AVRO")


def http(url: str, method: str = "GET", body: object = None, content_type: str = CT, headers=None):
    """(status, parsed JSON body) without raising on 4xx/5xx."""
    data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": content_type,
                                                                         **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")
