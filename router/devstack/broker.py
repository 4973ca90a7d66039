"""Kafka-compatible broker for local runs and tests: the PyPI ``noida-db`` binary.

noida-db 0.2.3 speaks several protocols; only its Kafka service is enabled
(``--only kafka``). The binary is launched directly (not through the Python
console-script wrapper) in its own session, so stopping it leaves no process.

Measured quirks of noida-db 0.2.3 (checked by tests/router/devstack/test_stack.py):

* The broker ignores the consumer's ``fetch.max.bytes``: a fetch over twelve
  10 MB records came back as one ~126 MB response, which librdkafka rejects
  ("Invalid response size ... increase receive.message.max.bytes") and then
  retries forever without surfacing an error. Consumers must raise
  ``receive.message.max.bytes`` (``CLIENT_QUIRKS``).
* The broker-wide record limit is ~1 MiB (1,048,376 bytes of value passes,
  2 MiB fails with MSG_SIZE_TOO_LARGE). The per-topic config
  ``max.message.bytes`` is honoured: ``LARGE_MESSAGE_TOPIC_CONFIG`` allows 16 MiB
  (producers need ``message.max.bytes`` raised too, also in ``CLIENT_QUIRKS``).
* Producing to an unknown topic auto-creates it with one partition; create
  topics explicitly when the partition count matters.
* Topic deletion through the AdminClient works, also under a live consumer
  (it keeps polling without error); list-offsets (watermarks,
  offsets-for-times) are right.
* Storage is in memory, snapshotted to one JSON file (``data/kafka.json``):
  memory grows with the data kept, and a clean shutdown rewrites the whole
  snapshot (~7.6 s after 120 MB of records, the file ~3.5x the payload). A
  SIGKILL loses at most the last few seconds. ``stop()`` therefore waits
  ``STOP_GRACE_SECONDS`` for a kept data dir and kills at once otherwise.
* Every consumer group offset commit (the job's ``job.commit_consumer_group``, after each batch)
  makes it rewrite that whole snapshot: 3.2-4.3 CPU-seconds of the broker per commit while it held
  100,000 Debezium JSON events (~2 KB each), so on a 2-core machine a batch's commit costs the next
  batches a core for seconds (a Kafka cluster writes one small record to ``__consumer_offsets``).
  The live benchmarks take ``--group-commit off`` to leave that out (their JSON files say which).
* It ignores ``max.partition.fetch.bytes`` as well: a fetch brings each partition's whole tail,
  so reading a backlog in k slices (``kafka.catch_up: even``) makes it send ~(k+1)/2 times the data.
* Start-up takes well under a second. The loader warning "weak version
  GLIBC_2.39 not found" printed on Debian 12 is harmless.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from importlib.resources import files
from types import MappingProxyType

from router.devstack._proc import (
    Service, die_with_parent, end_process, free_port, log_tail, port_open, remove_tree, wait_until,
)
from router.devstack.exceptions import ServiceMissingError, ServiceStartError

HOST = "127.0.0.1"
#: How long a clean shutdown may take (it rewrites the JSON snapshot).
STOP_GRACE_SECONDS = 60.0

#: librdkafka settings a client of this broker needs on top of bootstrap.servers.
CLIENT_QUIRKS: MappingProxyType = MappingProxyType(
    {
        "receive.message.max.bytes": 1_000_000_000,
        "message.max.bytes": 16 * 1024 * 1024,
    }
)

#: Topic config for topics that carry records above the ~1 MiB broker default.
LARGE_MESSAGE_TOPIC_CONFIG: MappingProxyType = MappingProxyType({"max.message.bytes": str(16 * 1024 * 1024)})


def client_config(bootstrap: str, **extra) -> dict:
    """A confluent_kafka config dict for ``bootstrap`` including the broker quirks."""
    return {"bootstrap.servers": bootstrap, **CLIENT_QUIRKS, **extra}


def noida_binary() -> str:
    """Path of the native noida-db executable shipped inside the wheel."""
    try:
        path = files("noida_db").joinpath("noida-db")
    except ModuleNotFoundError as exc:
        raise ServiceMissingError("kafka", "PyPI package noida-db is not installed") from exc
    if not path.is_file():
        raise ServiceMissingError("kafka", f"noida-db binary not found at {path}")
    if not os.access(str(path), os.X_OK):
        os.chmod(str(path), 0o755)
    return str(path)


class LocalBroker(Service):
    """One noida-db Kafka broker on 127.0.0.1 with a free port and its own data dir."""

    def __init__(self, data_dir: str | None = None, port: int = 0, start_timeout: float = 30.0,
                 tied_to_parent: bool = False) -> None:
        """``tied_to_parent``: the broker gets SIGTERM if this process dies (tests, demo)."""
        self._own_dir = data_dir is None
        self.tied_to_parent = tied_to_parent
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="icerouter-broker-")
        self.port = port
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(self.data_dir, "broker.log")

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> str:
        """Launch the broker and wait until an AdminClient can list topics."""
        if self.proc is not None:
            return self.bootstrap
        os.makedirs(self.data_dir, exist_ok=True)
        for attempt in range(3):
            port = self.port or free_port(HOST)
            cmd = [noida_binary(), "start", "--data-dir", os.path.join(self.data_dir, "data"),
                   "--host", HOST, "--only", "kafka", "--kafka-port", str(port)]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             preexec_fn=die_with_parent() if self.tied_to_parent else None)
            self.port = port
            try:
                wait_until(self._ready, timeout=self.start_timeout, service="kafka",
                           proc=self.proc, log_path=self.log_path, interval=0.2)
                return self.bootstrap
            except ServiceStartError:
                self._kill()
                if attempt == 2 or "address" not in log_tail(self.log_path).lower():
                    raise
                self.port = 0
        raise AssertionError("unreachable")

    def _ready(self) -> bool:
        """Port first (a client dialling a closed port prints librdkafka errors), then metadata."""
        from confluent_kafka.admin import AdminClient

        if not port_open(HOST, self.port):
            return False
        admin = AdminClient({"bootstrap.servers": self.bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
        admin.list_topics(timeout=2)
        return True

    def admin(self):
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.bootstrap, "log_level": 4})

    def create_topics(self, names: Iterable[str], partitions: int = 3, timeout: float = 30.0,
                      config: Mapping[str, str] | None = None) -> None:
        """Create topics (existing ones are left alone) and wait for their metadata."""
        from confluent_kafka import KafkaError
        from confluent_kafka.admin import NewTopic

        admin = self.admin()
        names = list(names)
        futures = admin.create_topics([NewTopic(n, num_partitions=partitions, replication_factor=1,
                                                config=dict(config or {}))
                                       for n in names], operation_timeout=timeout)
        for fut in futures.values():
            try:
                fut.result(timeout)
            except Exception as exc:  # KafkaException wraps a KafkaError
                err = exc.args[0] if exc.args else None
                if getattr(err, "code", lambda: None)() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
        wait_until(lambda: set(names) <= set(admin.list_topics(timeout=5).topics),
                   timeout=timeout, service="kafka")

    def delete_topics(self, names: Iterable[str], timeout: float = 30.0) -> None:
        admin = self.admin()
        for fut in admin.delete_topics(list(names), operation_timeout=timeout).values():
            fut.result(timeout)

    def _kill(self, grace: float = 1.0) -> None:
        if self.proc is not None:
            end_process(self.proc, timeout=grace)
            self.proc = None

    def stop(self, remove_data: bool | None = None) -> None:
        """Terminate (then kill) the broker; drop a temporary data dir.

        A kept data dir gets a clean shutdown (the snapshot is written); a
        discarded one is killed after a short grace period.
        """
        remove = remove_data if remove_data is not None else self._own_dir
        self._kill(grace=1.0 if remove else STOP_GRACE_SECONDS)
        remove_tree(self.data_dir, remove, self._own_dir)

    def __repr__(self) -> str:
        return f"LocalBroker(bootstrap={self.bootstrap!r}, pid={self.pid}, data_dir={self.data_dir!r})"
