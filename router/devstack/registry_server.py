"""A small Confluent-REST-compatible Schema Registry for local runs and tests.

No Confluent-compatible registry installs from PyPI, Debian or npm, so the
dev stack serves this one (stdlib ``ThreadingHTTPServer``). Rules live in
``registry_store``; this module maps HTTP routes onto it, and adds optional
TLS and HTTP basic auth. Run it standalone with::

    python -m router.devstack.registry_server --port 8081 --data-file reg.json \
        [--tls-cert cert.pem --tls-key key.pem] [--basic-auth user:pass] [--strict]
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import logging
import re
import signal
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

from router.devstack._proc import Service
from router.devstack.exceptions import RegistryApiError
from router.devstack.registry_store import RegistryStore

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED_CONTENT_TYPES = frozenset({
    "application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json",
    "application/json", "application/octet-stream",
})

_S = r"(?P<subject>[^/]+)"
_V = r"(?P<version>[^/]+)"
_ID = r"(?P<id>[^/]+)"


def _flag(query: dict, name: str) -> bool:
    return query.get(name, ["false"])[-1].lower() == "true"


#: Confluent's "against every version the level asks for" endpoint. Several registries
#: serve only the per-version one: ``strict`` mode leaves it out (404) to behave like them.
VERSIONLESS_COMPATIBILITY = "POST "

#: (method, path regex, handler(store, match, query, body) -> JSON value).
ROUTES = [
    ("GET", r"/subjects", lambda st, m, q, b: st.subjects(_flag(q, "deleted"))),
    ("POST", rf"/subjects/{_S}/versions", lambda st, m, q, b: st.register(m["subject"], b)),
    ("GET", rf"/subjects/{_S}/versions", lambda st, m, q, b: st.versions(m["subject"], _flag(q, "deleted"))),
    ("GET", rf"/subjects/{_S}/versions/{_V}/schema",
     lambda st, m, q, b: json.loads(st.get_version(m["subject"], m["version"], _flag(q, "deleted"))["schema"])),
    ("GET", rf"/subjects/{_S}/versions/{_V}",
     lambda st, m, q, b: st.get_version(m["subject"], m["version"], _flag(q, "deleted"))),
    ("GET", rf"/subjects/{_S}/versions/{_V}/referencedby",
     lambda st, m, q, b: st.get_version(m["subject"], m["version"]) and []),  # references are not resolved
    ("DELETE", rf"/subjects/{_S}/versions/{_V}",
     lambda st, m, q, b: st.delete_version(m["subject"], m["version"], _flag(q, "permanent"))),
    ("POST", rf"/subjects/{_S}", lambda st, m, q, b: st.lookup(m["subject"], b, _flag(q, "deleted"))),
    ("DELETE", rf"/subjects/{_S}", lambda st, m, q, b: st.delete_subject(m["subject"], _flag(q, "permanent"))),
    ("GET", r"/schemas/types", lambda st, m, q, b: ["AVRO", "JSON", "PROTOBUF"]),
    ("GET", rf"/schemas/ids/{_ID}", lambda st, m, q, b: st.schema_by_id(m["id"], (q.get("format") or [None])[0])),
    ("GET", rf"/schemas/ids/{_ID}/schema", lambda st, m, q, b: json.loads(st.schema_by_id(m["id"])["schema"])),
    ("GET", rf"/schemas/ids/{_ID}/versions", lambda st, m, q, b: st.id_versions(m["id"], _flag(q, "deleted"))),
    ("GET", rf"/schemas/ids/{_ID}/subjects", lambda st, m, q, b: st.id_subjects(m["id"], _flag(q, "deleted"))),
    ("GET", rf"/schemas/guids/{_ID}", lambda st, m, q, b: st.schema_by_guid(m["id"])),
    ("POST", rf"/compatibility/subjects/{_S}/versions/{_V}",
     lambda st, m, q, b: st.test_compatibility(m["subject"], m["version"], b, _flag(q, "verbose"))),
    (VERSIONLESS_COMPATIBILITY, rf"/compatibility/subjects/{_S}/versions",
     lambda st, m, q, b: st.test_compatibility(m["subject"], None, b, _flag(q, "verbose"))),
    ("GET", r"/config", lambda st, m, q, b: st.get_config(None)),
    ("PUT", r"/config", lambda st, m, q, b: st.set_config(None, b)),
    ("DELETE", r"/config", lambda st, m, q, b: st.delete_config(None)),
    ("GET", rf"/config/{_S}", lambda st, m, q, b: st.get_config(m["subject"], _flag(q, "defaultToGlobal"))),
    ("PUT", rf"/config/{_S}", lambda st, m, q, b: st.set_config(m["subject"], b)),
    ("DELETE", rf"/config/{_S}", lambda st, m, q, b: st.delete_config(m["subject"])),
    ("GET", r"/mode", lambda st, m, q, b: {"mode": "READWRITE"}),
    ("GET", rf"/mode/{_S}", lambda st, m, q, b: {"mode": "READWRITE"}),
    ("GET", r"/", lambda st, m, q, b: {}),
]
_COMPILED = [(method.strip(), re.compile(pattern + r"/?\Z"), fn, method == VERSIONLESS_COMPATIBILITY)
             for method, pattern, fn in ROUTES]


class _Handler(BaseHTTPRequestHandler):
    server_version = "icerouter-registry/0.1"
    protocol_version = "HTTP/1.1"
    # headers and body go out in two writes: without TCP_NODELAY every
    # keep-alive request waits ~40 ms for a delayed ACK (measured 22 req/s)
    disable_nagle_algorithm = True

    def log_message(self, fmt: str, *args) -> None:  # request lines never carry secrets
        log.debug("%s " + fmt, self.address_string(), *args)

    def _send(self, status: int, payload: object, extra_headers: dict | None = None) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", CONTENT_TYPE)
        self.send_header("Content-Length", str(len(data)))
        for key, value in (extra_headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)

    def _authorized(self) -> bool:
        expected = self.server.auth_header  # type: ignore[attr-defined]
        if expected is None:
            return True
        return hmac.compare_digest(self.headers.get("Authorization", "").encode(), expected.encode())

    def _dispatch(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if not self._authorized():
            self._send(401, {"error_code": 401, "message": "Unauthorized"},
                       {"WWW-Authenticate": 'Basic realm="schema-registry"'})
            return
        parts = urlsplit(self.path)
        path, query = parts.path, parse_qs(parts.query)
        body: object = None
        if raw:
            ctype = (self.headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
            if ctype not in ACCEPTED_CONTENT_TYPES:
                self._send(415, {"error_code": 415, "message": f"Unsupported content type {ctype}"})
                return
            try:
                body = json.loads(raw)
            except ValueError:
                self._send(400, {"error_code": 400, "message": "Unrecognized request body: not JSON"})
                return
        allowed = False
        for route_method, pattern, fn, extended in _COMPILED:
            match = pattern.match(path)
            if not match or (extended and self.server.strict):  # type: ignore[attr-defined]
                continue
            allowed = True
            if route_method != method:
                continue
            try:
                groups = {k: unquote(v) for k, v in match.groupdict().items()}
                result = fn(self.server.store, groups, query, body or {})  # type: ignore[attr-defined]
            except RegistryApiError as exc:
                self._send(exc.http_status, exc.body())
            except Exception as exc:  # noqa: BLE001 - answer 500 like the real server
                log.exception("registry request failed")
                self._send(500, {"error_code": 50001, "message": f"Internal error: {exc}"})
            else:
                self._send(200, result)
            return
        if allowed:
            self._send(405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"})
        else:
            self._send(404, {"error_code": 404, "message": "HTTP 404 Not Found"})

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address) -> None:
        """Failed TLS handshakes and dropped clients are the client's problem: log quietly."""
        exc = sys.exc_info()[1]
        if isinstance(exc, (ssl.SSLError, ConnectionError, TimeoutError)):
            log.debug("connection from %s dropped: %s", client_address, exc)
        else:
            super().handle_error(request, client_address)


class RegistryServer(Service):
    """The registry on ``host:port`` (0 picks a free port) in a background thread."""

    def __init__(self, port: int = 0, data_file: str | None = None, tls_cert: str | None = None,
                 tls_key: str | None = None, basic_auth: str | None = None, host: str = "127.0.0.1",
                 strict: bool = False) -> None:
        self.host, self.port, self.data_file, self.strict = host, port, data_file, strict
        self.tls_cert, self.tls_key = tls_cert, tls_key
        self._basic_auth = basic_auth
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.tls_cert else "http"
        return f"{scheme}://{self.host}:{self.port}"

    def start(self) -> str:
        if self._httpd is not None:
            return self.url
        httpd = _Server((self.host, self.port), _Handler)
        httpd.store = RegistryStore(self.data_file)  # type: ignore[attr-defined]
        httpd.auth_header = None  # type: ignore[attr-defined]
        httpd.strict = self.strict  # type: ignore[attr-defined]
        if self._basic_auth:
            token = base64.b64encode(self._basic_auth.encode()).decode()
            httpd.auth_header = f"Basic {token}"  # type: ignore[attr-defined]
        if self.tls_cert:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls_cert, self.tls_key)
            httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True, do_handshake_on_connect=False)
        self.port = httpd.server_address[1]
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, name="registry-server", daemon=True)
        self._thread.start()
        return self.url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __repr__(self) -> str:
        auth = None
        if self._basic_auth:
            auth = self._basic_auth.split(":", 1)[0] + ":***"
        return (f"RegistryServer(url={self.url!r}, data_file={self.data_file!r}, basic_auth={auth!r}, "
                f"strict={self.strict})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m router.devstack.registry_server",
                                     description="Confluent-compatible Schema Registry emulator")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8081)
    parser.add_argument("--data-file", default=None, help="JSON file keeping subjects and ids across restarts")
    parser.add_argument("--tls-cert")
    parser.add_argument("--tls-key")
    parser.add_argument("--basic-auth", metavar="USER:PASS")
    parser.add_argument("--strict", action="store_true",
                        help="serve only the per-version compatibility endpoint, like several registries do")
    args = parser.parse_args(argv)
    if bool(args.tls_cert) != bool(args.tls_key):
        parser.error("--tls-cert and --tls-key go together")
    if args.basic_auth and ":" not in args.basic_auth:
        parser.error("--basic-auth takes USER:PASS")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    server = RegistryServer(args.port, args.data_file, args.tls_cert, args.tls_key, args.basic_auth, args.host,
                            args.strict)
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    signal.signal(signal.SIGINT, lambda *_: stopped.set())
    server.start()
    log.info("schema registry listening on %s", server.url)
    print(f"listening {server.url}", flush=True)
    stopped.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
