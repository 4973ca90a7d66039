"""Shared plumbing for the reliability scenarios: configs, job processes, a ledger, readers.

A scenario produces records through the `Ledger`, which remembers the
(topic, partition, offset) the broker acknowledged and the tables each record
must end up in (or the dead-letter class it must carry). After the job ran,
`Tally.observe` reads every table back with DuckDB and compares.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import yaml

import router.cli.demo_data as data
from router.devstack._proc import group_alive
from scripts import REPO

Coord = tuple[str, int, int]
CATALOG_NAME = "reliability"  # SqlCatalog keys tables by catalog name: job and checks must agree


# ---------------------------------------------------------------- config + processes
def write_config(path: Path, *, bootstrap: str, registry: dict, catalog_props: dict, job_name: str,
                 topics_pattern: str, routes: list, namespaces: list[str], dlq_table: str,
                 **extra: Any) -> Path:
    """A router YAML file for one scenario (small Spark, short trigger); `extra` sections merge in."""
    workdir = path.parent
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "pattern": topics_pattern,
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": registry,
        "catalog": {"name": CATALOG_NAME, "properties": catalog_props},
        "job": {"name": job_name, "checkpoint": str(workdir / f"checkpoint_{job_name}"), "trigger_seconds": 1,
                "status_file": str(workdir / f"status_{job_name}.json"),
                "spark": {"spark.master": "local[2]", "spark.driver.memory": "1g"}},
        "tables": {"allowed_namespaces": namespaces},
        "routes": routes,
        "dlq": {"table": dlq_table},
    }
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(config.get(key), dict):
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def job_command(config: Path, *args: str, verbose: bool = False) -> list[str]:
    return [sys.executable, "-m", "router.cli", *(["-v"] if verbose else []), "run", "--config", str(config), *args]


def job_env(env: dict | None = None) -> dict:
    return {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYTHONPATH": str(REPO), **(env or {})}


def run_job(config: Path, *args: str, env: dict | None = None, timeout: float = 300,
            log: Path | None = None, verbose: bool = False) -> subprocess.CompletedProcess:
    """Run `icerouter run` to completion (use --available-now); output appended to `log`."""
    res = subprocess.run(job_command(config, *args, verbose=verbose), env=job_env(env), capture_output=True, text=True,
                         timeout=timeout, cwd=REPO)
    if log is not None:
        with open(log, "a") as fh:
            fh.write(f"$ {' '.join(args)} rc={res.returncode}\n{res.stdout}{res.stderr}\n")
    return res


class JobProcess:
    """A continuous `icerouter run` in the background, in a process group of its own (the driver, its
    Spark JVM, Spark's Python workers); output goes to a file (no pipe to fill)."""

    def __init__(self, config: Path, log: Path, *args: str, env: dict | None = None):
        self.log = log
        self._fh = open(log, "a")
        self.proc = subprocess.Popen(job_command(config, *args), env=job_env(env), stdout=self._fh,
                                     stderr=subprocess.STDOUT, text=True, cwd=REPO, start_new_session=True)

    def kill(self, timeout: float = 60) -> int:
        """SIGKILL the driver, then wait until the rest of the job is gone: its JVM outlives the driver
        by a moment (it exits once its stdin closes), and may still write to the checkpoint then."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)
        deadline = time.monotonic() + timeout
        while group_alive(self.proc.pid):
            if time.monotonic() > deadline:
                os.killpg(self.proc.pid, signal.SIGKILL)
                deadline += 10
            time.sleep(0.2)
        self.stop()
        return self.proc.returncode

    def output(self) -> str:
        self._fh.flush()
        return self.log.read_text(errors="replace")

    def stop(self, timeout: float = 60) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._fh.close()
        return self.proc.returncode


def wait_for(predicate: Callable[[], bool], timeout: float, job: JobProcess | None = None,
             what: str = "condition", interval: float = 1.0) -> float:
    """Poll until `predicate()` is true; fail early if the job died. Returns seconds waited."""
    started = time.monotonic()
    last_error = None
    while time.monotonic() - started < timeout:
        if job is not None and job.proc.poll() is not None:
            raise AssertionError(f"job exited with {job.proc.returncode} while waiting for {what}: "
                                 f"{job.output()[-4000:]}")
        try:
            if predicate():
                return time.monotonic() - started
        except Exception as exc:  # noqa: BLE001 - a service may be down on purpose
            last_error = exc
        time.sleep(interval)
    tail = job.output()[-4000:] if job is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} (last error: {last_error}); "
                         f"job output ends with: {tail}")


def self_signed_certificate(directory: Path) -> tuple[str, str]:
    """A throwaway certificate for 127.0.0.1 made with the openssl CLI: (cert path, key path)."""
    cert, key = str(directory / "registry-cert.pem"), str(directory / "registry-key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


# ---------------------------------------------------------------- registry access for producers
def registry_client(registry: dict):
    """confluent-kafka client for a router `registry:` section (TLS and basic auth included)."""
    from confluent_kafka.schema_registry import SchemaRegistryClient

    conf = {"url": registry["url"]}
    if registry.get("basic_auth_user"):
        conf["basic.auth.user.info"] = f"{registry['basic_auth_user']}:{registry['basic_auth_password']}"
    if registry.get("ssl_ca_location"):
        conf["ssl.ca.location"] = registry["ssl_ca_location"]
    return SchemaRegistryClient(conf)


def register(registry: dict, subject: str, schema: dict, schema_type: str = "AVRO") -> int:
    from confluent_kafka.schema_registry import Schema

    return registry_client(registry).register_schema(subject, Schema(json.dumps(schema), schema_type))


def create_topics(bootstrap: str, names: Iterable[str], partitions: int = 2, config: dict | None = None) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(n, partitions, 1, config=dict(config or {})) for n in names])
    for fut in futures.values():
        fut.result(30)


# ---------------------------------------------------------------- ledger
@dataclass
class Ledger:
    """What was acknowledged by the broker and where each record must land."""

    dlq_table: str
    expected: dict[str, Counter] = field(default_factory=dict)
    dlq_classes: dict[Coord, str] = field(default_factory=dict)  # coord -> expected error_class
    dlq_values: dict[Coord, bytes | None] = field(default_factory=dict)  # original bytes of dead letters
    dropped: set = field(default_factory=set)  # coords that must land nowhere (ignored tombstones)
    sent: int = 0

    def expect(self, table: str, coord: Coord) -> None:
        self.expected.setdefault(table, Counter())[coord] += 1

    def produce(self, bootstrap: str, messages: Iterable[tuple], where: Callable[[str, Any], Any]) -> list[Coord]:
        """Produce (topic, key, value, headers); `where(topic, headers)` -> list of tables,
        ("dlq", error_class) or None (must land nowhere)."""
        from confluent_kafka import Producer

        from router.devstack.broker import CLIENT_QUIRKS

        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **CLIENT_QUIRKS,
                             "message.timeout.ms": 60_000})
        coords: list[Coord] = []
        errors: list[str] = []
        for topic, key, value, headers in messages:
            def on_delivery(err, msg, topic=topic, headers=headers, value=value):
                if err is not None:
                    errors.append(str(err))
                    return
                coord = (msg.topic(), msg.partition(), msg.offset())
                coords.append(coord)
                self.sent += 1
                target = where(topic, headers)
                if target is None:
                    self.dropped.add(coord)
                elif isinstance(target, tuple) and target[0] == "dlq":
                    self.expect(self.dlq_table, coord)
                    self.dlq_classes[coord] = target[1]
                    self.dlq_values[coord] = value
                else:
                    for table in target:
                        self.expect(table, coord)
            data.produce_one(producer, topic, key, value, headers, on_delivery)
        left = producer.flush(60)
        assert left == 0 and not errors, f"{left} records not acknowledged: {errors[:3]}"
        return coords


# ---------------------------------------------------------------- reading back with DuckDB
from router.cli.summary import metadata_path  # noqa: E402  (re-exported for the scenario modules)


def read_coords(con, table) -> Counter:
    rows = con.execute(f"SELECT _kafka_topic, _kafka_partition, _kafka_offset FROM "
                       f"iceberg_scan('{metadata_path(table)}')").fetchall()
    return Counter(rows)


def read_dead_letters(con, table) -> list[dict]:
    cur = con.execute(f"SELECT topic, \"partition\", \"offset\", key, value, error_class, reason, table_name, "
                      f"route, schema_id, job FROM iceberg_scan('{metadata_path(table)}')")
    names = [d[0] for d in cur.description]
    return [dict(zip(names, row)) for row in cur.fetchall()]


def load_catalog_from(props: dict, name: str = CATALOG_NAME):
    from pyiceberg.catalog import load_catalog

    return load_catalog(name, **{k: str(v) for k, v in props.items()})


@dataclass
class Tally:
    """Expected vs observed, per table; the numbers of the summary table."""

    scenario: str
    sent: int = 0
    committed: int = 0
    dead_letters: int = 0
    lost: int = 0
    duplicated: int = 0
    misplaced: int = 0  # rows in a table they were not routed to (e.g. ignored tombstones)
    details: dict = field(default_factory=dict)  # table -> (missing, duplicated)
    observed: dict = field(default_factory=dict)  # table -> Counter
    letters: list = field(default_factory=list)

    @classmethod
    def observe(cls, scenario: str, ledger: Ledger, catalog_props: dict,
                extra_tables: Iterable[str] = ()) -> "Tally":
        from pyiceberg.exceptions import NoSuchTableError

        from router.cli.summary import duckdb_connect

        catalog = load_catalog_from(catalog_props)
        con = duckdb_connect()
        tally = cls(scenario, sent=ledger.sent)
        for name in sorted(set(ledger.expected) | set(extra_tables)):
            want = ledger.expected.get(name, Counter())
            try:
                table = catalog.load_table(name)
                got = read_coords(con, table) if name != ledger.dlq_table else Counter()
                if name == ledger.dlq_table:
                    tally.letters = read_dead_letters(con, table)
                    got = Counter((r["topic"], r["partition"], r["offset"]) for r in tally.letters)
            except NoSuchTableError:
                got = Counter()
            missing, extra = want - got, got - want
            tally.observed[name] = got
            tally.details[name] = (sum(missing.values()), sum(extra.values()))
            tally.lost += sum(missing.values())
            dup = sum(n for c, n in extra.items() if c in want)
            tally.duplicated += dup
            tally.misplaced += sum(extra.values()) - dup
            if name == ledger.dlq_table:
                tally.dead_letters += sum(got.values())
            else:
                tally.committed += sum(got.values())
        con.close()
        return tally

    def row(self) -> tuple:
        return (self.scenario, self.sent, self.committed, self.dead_letters, self.lost, self.duplicated)


SUMMARY_HEADER = ("scenario", "records sent", "records committed", "records in DLQ", "lost", "duplicated")


def summary_table(rows: Iterable[tuple]) -> str:
    rows = [SUMMARY_HEADER, *[tuple(str(c) for c in r) for r in rows]]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(SUMMARY_HEADER))]
    lines = []
    for i, r in enumerate(rows):
        lines.append("  ".join(str(c).ljust(w) if j == 0 else str(c).rjust(w) for j, (c, w) in
                               enumerate(zip(r, widths))))
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
