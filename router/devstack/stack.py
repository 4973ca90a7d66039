"""The whole local stack: broker + registry emulator + SQLite catalog (+ PostgreSQL, + S3 / REST catalog).

``LocalStack.start()`` launches every service as its own process session and
writes ``state.json`` (pids, process start times, ports, urls) in the stack
dir, so another process (``scripts/stack.py stop``) can find and stop exactly
those processes. A pid is only signalled while its start time still matches,
so a recycled pid is never touched. Secrets (the S3 secret key) are kept in
files only the owner can read and masked in ``status()``.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field

from router.masking import mask_secrets
from router.devstack._proc import die_with_parent, free_port, pid_alive, port_open, stop_pid, wait_until
from router.devstack.broker import LocalBroker, client_config
from router.devstack.catalog import LocalPostgres, postgres_catalog_properties, sqlite_catalog_properties
from router.devstack.exceptions import ServiceStartError, StackStateError
from router.devstack.objectstore import LocalObjectStore
from router.jsonfile import write_json_atomic

STATE_FILE = "state.json"
DEFAULT_STACK_DIR = os.path.join(".icerouter", "stack")
#: Signal used to stop each service (PostgreSQL: SIGINT is its fast shutdown).
STOP_SIGNALS = {"kafka": 15, "registry": 15, "postgres": 2, "s3": 15}
#: Seconds before SIGKILL (the broker rewrites its whole snapshot on shutdown).
STOP_GRACE = {"kafka": 60.0, "registry": 10.0, "postgres": 30.0, "s3": 15.0}
#: The S3 secret key of the stack's object store (mode 0600, reused across restarts).
S3_SECRET_FILE = "s3.secret"


def default_stack_dir() -> str:
    return os.path.abspath(os.environ.get("ICEROUTER_STACK_DIR") or DEFAULT_STACK_DIR)


def process_start_time(pid: int) -> int | None:
    """Kernel start time of ``pid`` in clock ticks (None if gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass
class ServiceState:
    name: str
    pid: int
    started: int | None
    port: int
    url: str

    def alive(self) -> bool:
        return pid_alive(self.pid) and process_start_time(self.pid) == self.started


@dataclass
class StackState:
    stack_dir: str
    services: dict[str, ServiceState] = field(default_factory=dict)
    catalogs: dict[str, dict] = field(default_factory=dict)
    created: float = field(default_factory=time.time)

    def save(self) -> None:
        write_json_atomic(os.path.join(self.stack_dir, STATE_FILE), asdict(self),
                          private=True, indent=1, sort_keys=True)  # catalogs hold credentials

    @classmethod
    def load(cls, stack_dir: str) -> StackState:
        path = os.path.join(stack_dir, STATE_FILE)
        try:
            with open(path, encoding="utf-8") as fh:
                data = json.load(fh)
        except FileNotFoundError as exc:
            raise StackStateError("stack", f"no stack state at {path} (is the stack started?)") from exc
        except ValueError as exc:
            raise StackStateError("stack", f"unreadable stack state {path}: {exc}") from exc
        services = {k: ServiceState(**v) for k, v in data.get("services", {}).items()}
        return cls(data["stack_dir"], services, data.get("catalogs", {}), data.get("created", 0.0))


class LocalStack:
    """Broker, registry subprocess, SQLite catalog and optional PostgreSQL under one dir."""

    def __init__(self, stack_dir: str | None = None, with_postgres: bool = False,
                 registry_port: int = 0, broker_port: int = 0, tied_to_parent: bool = False,
                 with_s3: bool = False) -> None:
        """``tied_to_parent``: services die with this process (in-process use such as a demo);
        leave it False for a stack that outlives its starter (scripts/stack.py)."""
        self.stack_dir = os.path.abspath(stack_dir or default_stack_dir())
        self.tied_to_parent = tied_to_parent
        self.with_postgres = with_postgres
        self.with_s3 = with_s3
        self.registry_port = registry_port
        self.broker_port = broker_port
        self.state = StackState(self.stack_dir)

    # -- accessors used by the demo and tests ------------------------------
    @property
    def bootstrap(self) -> str:
        return self.state.services["kafka"].url

    @property
    def registry_url(self) -> str:
        return self.state.services["registry"].url

    def catalog_properties(self, kind: str = "sqlite") -> dict:
        return dict(self.state.catalogs[kind])

    def kafka_config(self, **extra) -> dict:
        return client_config(self.bootstrap, **extra)

    # -- lifecycle ---------------------------------------------------------
    def start(self) -> StackState:
        """Start every service not already running; write and return the state."""
        os.makedirs(self.stack_dir, exist_ok=True)
        try:
            previous = StackState.load(self.stack_dir)
        except StackStateError:
            previous = None
        if previous is not None and any(s.alive() for s in previous.services.values()):
            self.state = previous
        try:
            self._ensure("kafka", self._start_broker)
            self._ensure("registry", self._start_registry)
            if self.with_postgres:
                self._ensure("postgres", self._start_postgres)
            if self.with_s3:
                self._ensure("s3", self._start_s3)
            self.state.catalogs["sqlite"] = sqlite_catalog_properties(os.path.join(self.stack_dir, "sqlite"))
        except BaseException:
            self.stop()
            raise
        self.state.save()
        return self.state

    def _ensure(self, name: str, starter) -> None:
        current = self.state.services.get(name)
        if current is not None and current.alive():
            return
        self.state.services[name] = starter()
        self.state.save()  # record each pid at once, so a failed start can still stop it

    def _start_broker(self) -> ServiceState:
        broker = LocalBroker(os.path.join(self.stack_dir, "broker"), port=self.broker_port,
                             tied_to_parent=self.tied_to_parent)
        bootstrap = broker.start()
        return ServiceState("kafka", broker.pid, process_start_time(broker.pid), broker.port, bootstrap)

    def _start_registry(self) -> ServiceState:
        log_path = os.path.join(self.stack_dir, "registry.log")
        for attempt in range(3):
            port = self.registry_port or free_port()
            cmd = [sys.executable, "-m", "router.devstack.registry_server", "--port", str(port),
                   "--data-file", os.path.join(self.stack_dir, "registry.json")]
            with open(log_path, "ab") as log:
                proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True, cwd=self.stack_dir, env=_child_env(),
                                        preexec_fn=die_with_parent() if self.tied_to_parent else None)
            url = f"http://127.0.0.1:{port}"
            try:
                wait_until(lambda: _http_ok(url + "/subjects"), timeout=30, service="registry",
                           proc=proc, log_path=log_path)
                return ServiceState("registry", proc.pid, process_start_time(proc.pid), port, url)
            except ServiceStartError:
                stop_pid(proc.pid)
                if attempt == 2 or self.registry_port:
                    raise
        raise AssertionError("unreachable")

    def _start_postgres(self) -> ServiceState:
        pg = LocalPostgres(os.path.join(self.stack_dir, "postgres"), tied_to_parent=self.tied_to_parent)
        uri = pg.start()
        self.state.catalogs["postgres"] = postgres_catalog_properties(
            uri, os.path.join(self.stack_dir, "postgres-warehouse"))
        return ServiceState("postgres", pg.pid, process_start_time(pg.pid), pg.port, uri)

    def _start_s3(self) -> ServiceState:
        store = LocalObjectStore(os.path.join(self.stack_dir, "objectstore"), secret_key=self._s3_secret(),
                                 tied_to_parent=self.tied_to_parent)
        endpoint = store.start()
        self.state.catalogs["rest"] = store.rest_catalog_properties()
        return ServiceState("s3", store.pid, process_start_time(store.pid), store.ports["s3.port"], endpoint)

    def _s3_secret(self) -> str:
        path = os.path.join(self.stack_dir, S3_SECRET_FILE)
        if not os.path.exists(path):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="ascii") as fh:
                fh.write(secrets.token_hex(16))
        with open(path, encoding="ascii") as fh:
            return fh.read().strip()

    def stop(self) -> dict[str, bool]:
        """Stop every recorded service (only if it is still the process we started)."""
        if not self.state.services:
            try:
                self.state = StackState.load(self.stack_dir)
            except StackStateError:
                return {}
        result: dict[str, bool] = {}
        for name, svc in reversed(list(self.state.services.items())):
            if svc.alive():
                stop_pid(svc.pid, sig=STOP_SIGNALS.get(name, 15), timeout=STOP_GRACE.get(name, 15.0))
            result[name] = not svc.alive()
        self.state.services.clear()
        path = os.path.join(self.stack_dir, STATE_FILE)
        if os.path.exists(path):
            os.remove(path)
        return result

    def status(self) -> dict:
        """Per service: pid, url, process alive, port answering."""
        state = self.state if self.state.services else _load_or_empty(self.stack_dir)
        return {
            "stack_dir": state.stack_dir,
            "services": {name: {"pid": s.pid, "url": s.url, "port": s.port, "alive": s.alive(),
                                "listening": port_open("127.0.0.1", s.port)}
                         for name, s in state.services.items()},
            "catalogs": {name: mask_secrets(props) for name, props in state.catalogs.items()},
        }

    def __enter__(self) -> LocalStack:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def _load_or_empty(stack_dir: str) -> StackState:
    try:
        return StackState.load(stack_dir)
    except StackStateError:
        return StackState(stack_dir)


def _child_env() -> dict:
    """Environment for child Pythons: make this source tree importable."""
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200
