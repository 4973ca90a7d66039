"""Fixtures for registry tests: a real HTTP registry the tests can stop and restart.

The shared ``registry_url`` fixture (tests/conftest.py) is used when it exists;
the cache-while-down and 5xx tests need a server they can stop or make fail, so
this module also provides ``local_registry``: a small Confluent-REST-compatible
server (subjects/versions, schemas by id and GUID) on 127.0.0.1 that speaks the
same JSON as Confluent Schema Registry to confluent-kafka's client.
"""
from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pytest


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.schemas: list[dict] = []          # index = id - 1
        self.subjects: dict[str, list[int]] = {}
        self.fail_status: int | None = None     # answer every request with this status
        self.requests = 0

    def register(self, subject: str, body: dict) -> dict:
        with self.lock:
            key = (body["schema"], body.get("schemaType", "AVRO"),
                   json.dumps(body.get("references") or [], sort_keys=True))
            for i, s in enumerate(self.schemas):
                if (s["schema"], s["schemaType"], json.dumps(s["references"], sort_keys=True)) == key:
                    sid = i + 1
                    break
            else:
                self.schemas.append({"schema": body["schema"],
                                     "schemaType": body.get("schemaType", "AVRO"),
                                     "references": body.get("references") or [],
                                     "guid": str(uuid.uuid4())})
                sid = len(self.schemas)
            versions = self.subjects.setdefault(subject, [])
            if sid not in versions:
                versions.append(sid)
            return {"id": sid, "guid": self.schemas[sid - 1]["guid"]}


class _Handler(BaseHTTPRequestHandler):
    state: _State

    def log_message(self, *args) -> None:  # keep test output clean
        pass

    def _send(self, status: int, body: dict | list) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _not_found(self, what: str) -> None:
        self._send(404, {"error_code": 40403, "message": f"{what} not found"})

    def _schema_body(self, sid: int) -> dict:
        s = self.state.schemas[sid - 1]
        out = {"id": sid, "guid": s["guid"], "schema": s["schema"], "schemaType": s["schemaType"]}
        if s["references"]:
            out["references"] = s["references"]
        return out

    def _guard(self) -> bool:
        self.state.requests += 1
        if self.state.fail_status:
            self._send(self.state.fail_status, {"error_code": 50001, "message": "failing on purpose"})
            return False
        return True

    def do_GET(self) -> None:
        if not self._guard():
            return
        path = urlparse(self.path).path
        st = self.state
        if m := re.fullmatch(r"/schemas/ids/(\d+)", path):
            sid = int(m.group(1))
            return self._send(200, self._schema_body(sid)) if 0 < sid <= len(st.schemas) \
                else self._not_found(f"schema {sid}")
        if m := re.fullmatch(r"/schemas/guids/([0-9a-f-]+)", path):
            for i, s in enumerate(st.schemas):
                if s["guid"] == m.group(1):
                    return self._send(200, self._schema_body(i + 1))
            return self._not_found("guid")
        if m := re.fullmatch(r"/subjects/([^/]+)/versions/([^/]+)", path):
            subject, version = unquote(m.group(1)), m.group(2)
            versions = st.subjects.get(subject)
            if not versions:
                return self._not_found(f"subject {subject}")
            v = len(versions) if version in ("latest", "-1") else int(version)
            if not 0 < v <= len(versions):
                return self._not_found("version")
            body = self._schema_body(versions[v - 1])
            body.update(subject=subject, version=v)
            return self._send(200, body)
        if path == "/subjects":
            return self._send(200, sorted(st.subjects))
        self._not_found(path)

    def do_POST(self) -> None:
        if not self._guard():
            return
        path = urlparse(self.path).path
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if m := re.fullmatch(r"/subjects/([^/]+)/versions", path):
            return self._send(200, self.state.register(unquote(m.group(1)), body))
        self._not_found(path)


class LocalRegistry:
    """A stoppable registry server; ``url`` stays the same across restarts."""

    def __init__(self) -> None:
        self.state = _State()
        self.port = 0
        self._server: ThreadingHTTPServer | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        handler = type("Handler", (_Handler,), {"state": self.state})
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


@pytest.fixture
def local_registry():
    reg = LocalRegistry()
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def shared_local_registry():
    reg = LocalRegistry()
    yield reg
    reg.stop()


@pytest.fixture(scope="session")
def any_registry_url(request, shared_local_registry) -> str:
    """The project-wide registry fixture when present, else the local server."""
    try:
        return request.getfixturevalue("registry_url")
    except pytest.FixtureLookupError:
        return shared_local_registry.url
