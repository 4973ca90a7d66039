"""Fault scenario: SIGKILL during commits, then registry, catalog and broker outages under a live job."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import router.cli.demo_data as data
from scripts.reliability.helpers import (
    JobProcess, Ledger, Tally, create_topics, load_catalog_from, register, run_job, wait_for, write_config,
)
from scripts.reliability.scenarios import Outcome, encode, new_prefix


class RegistryProcess:
    """The registry emulator as a subprocess on a fixed port and data file: stop/start like a real outage."""

    def __init__(self, data_file: Path, port: int | None = None):
        from router.devstack._proc import free_port

        self.data_file, self.port = data_file, port or free_port()
        self.proc: subprocess.Popen | None = None
        self.log = data_file.with_suffix(".log")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        from router.devstack._proc import die_with_parent, port_open, wait_until

        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "router.devstack.registry_server", "--port", str(self.port),
                 "--data-file", str(self.data_file)], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
        wait_until(lambda: port_open("127.0.0.1", self.port), timeout=30, service="registry", proc=self.proc)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(15)
            self.proc = None


@dataclass
class FaultServices:
    """Services a fault scenario owns: it stops and restarts each of them."""

    broker: Any  # router.devstack.broker.LocalBroker (fixed data dir and port)
    registry: RegistryProcess
    postgres: Any  # router.devstack.catalog.LocalPostgres (dedicated)
    warehouse: Path

    @property
    def catalog_props(self) -> dict:
        return {"type": "sql", "uri": self.postgres.uri, "warehouse": self.warehouse.as_uri()}


FAULT_TOPICS = 6
CRASH_POINTS = (2, 3)  # table commits before each SIGKILL: 2 + 3 of 6 tables, the last one in the live run
# Each outage lasts at least this long AND until a batch has failed over it and been retried (the job's log shows
# it), so the job is seen waiting whatever the machine's speed. Every failed pass costs a new Spark Python worker
# (6-7 s a pass here), so a longer outage adds cost, not coverage: 10 s already outlasts the registry client's
# retries (2 attempts, sub-second backoff on a refused connection) and its 2 s cache of latest versions.
REGISTRY_OUTAGE_SECONDS = 10
CATALOG_OUTAGE_SECONDS = 8
BROKER_OUTAGE_SECONDS = 6
RETRIED = re.compile(rb"transient failure, retrying|catalog unreachable")


def faults(services: FaultServices, workdir: Path) -> Outcome:
    """SIGKILL during commits (several times in a row), then a live job through registry,
    catalog and broker outages. Every record must end up exactly once in its table."""
    p = new_prefix("fa")
    raw, ops = f"{p}_raw", f"{p}_ops"
    bootstrap = services.broker.bootstrap
    reg = {"url": services.registry.url, "latest_ttl_seconds": 2, "retry_attempts": 2,
           "request_timeout_seconds": 3}
    topics = [f"{p}.f_{i:02d}" for i in range(FAULT_TOPICS)]
    create_topics(bootstrap, topics, partitions=2)
    ids = {tp: register(reg, f"{tp}-value", data.ORDER_V1) for tp in topics}
    ledger = Ledger(f"{ops}.dead_letters")
    catalog_props = services.catalog_props

    def table_of(topic: str, headers=None) -> list[str]:
        from router.routing import normalise_identifier_part

        return [f"{raw}.{normalise_identifier_part(topic)}"]

    counter = iter(range(10**9))

    def batch(topic: str, n: int, version: int = 1, schema_id: int | None = None) -> list:
        schema = data.ORDER_V1 if version == 1 else data.ORDER_V2
        sid = schema_id or ids[topic]
        return [(topic, None, encode(schema, sid, data.order(next(counter), version)), None) for _ in range(n)]

    for tp in topics:
        ledger.produce(bootstrap, batch(tp, 40), table_of)
    ledger.produce(bootstrap, [(topics[0], b"deleted", None, None)], lambda topic, h: None)  # tombstones: ignore

    config = write_config(
        workdir / f"{p}.yaml", bootstrap=bootstrap, registry=reg, catalog_props=catalog_props, job_name=f"job_{p}",
        topics_pattern=rf"{re.escape(p)}\..*", namespaces=[raw, ops], dlq_table=ledger.dlq_table,
        routes=[{"name": "raw", "topic": rf"{re.escape(p)}\..*", "table": f"{raw}.{{topic}}"}],
        # one core: tasks commit one table at a time, so the crash points are exact
        tombstones="ignore", job={"commit_threads": 1, "spark": {"spark.master": "local[1]", "spark.driver.memory": "1g"}})
    log = workdir / f"{p}.log"
    facts: dict[str, Any] = {"config": config, "topics": topics, "table_of": table_of}
    runs = []
    for n in CRASH_POINTS:
        res = run_job(config, "--available-now", env={"ICEROUTER_CRASH_AT": f"commit:{n}", "ICEROUTER_CRASH_DIR": str(workdir)}, log=log)
        runs.append(res)
    committed_after_crashes = _tables_with_snapshot(catalog_props, [table_of(t)[0] for t in topics])
    facts["committed_after_crashes"] = committed_after_crashes

    def landed() -> bool:  # everything in place, or something landed where it should not (the tally shows it)
        probe = Tally.observe("probe", ledger, catalog_props, extra_tables=[ledger.dlq_table])
        return probe.lost == 0 or probe.misplaced > 0

    job = JobProcess(config, log)
    try:
        facts["recovered_seconds"] = wait_for(landed, 240, job, "recovery after the crashes")
        # warm-up: the live job decodes every topic once, so its workers hold the schema in cache;
        # one unframed record makes the dead-letter table exist before the catalog outage
        for tp in topics:
            ledger.produce(bootstrap, batch(tp, 5), table_of)
        ledger.produce(bootstrap, [(topics[3], b"poison", b"not framed", None)], lambda t, h: ("dlq", "wire_format"))
        wait_for(landed, 120, job, "warm-up records")

        # Registry outage: a known schema id keeps flowing, a new one waits for the registry.
        v2_id = register(reg, f"{topics[1]}-value", data.ORDER_V2)
        services.registry.stop()
        down = time.monotonic()
        ledger.produce(bootstrap, batch(topics[2], 20), table_of)
        facts["cached_flowed_seconds"] = wait_for(landed, REGISTRY_OUTAGE_SECONDS + 60, job,
                                                  "cached schemas while the registry is down")
        facts["cached_flowed_while_down"] = True
        mark = log.stat().st_size
        new_coords = ledger.produce(bootstrap, batch(topics[1], 20, 2, v2_id), table_of)
        wait_for(lambda: _retried_since(log, mark), REGISTRY_OUTAGE_SECONDS + 60, job,
                 "the batch of the new schema id to fail over the registry outage and be retried")
        facts["new_id_retried_while_down"] = True
        time.sleep(max(0.0, REGISTRY_OUTAGE_SECONDS - (time.monotonic() - down)))
        facts["new_id_landed_while_down"] = _landed_any(catalog_props, table_of(topics[1])[0], new_coords)
        services.registry.start()
        facts["registry_outage_seconds"] = round(time.monotonic() - down, 1)
        wait_for(landed, 180, job, "records of the new schema after the registry came back")

        # Catalog outage: PostgreSQL stopped while records arrive.
        services.postgres.stop(remove_data=False)
        down = time.monotonic()
        mark = log.stat().st_size
        ledger.produce(bootstrap, batch(topics[3], 20) + batch(topics[4], 20), table_of)
        wait_for(lambda: _retried_since(log, mark), CATALOG_OUTAGE_SECONDS + 60, job,
                 "a batch to fail over the catalog outage and be retried")
        facts["batch_retried_during_catalog_outage"] = True
        time.sleep(max(0.0, CATALOG_OUTAGE_SECONDS - (time.monotonic() - down)))
        facts["job_alive_during_catalog_outage"] = job.proc.poll() is None
        services.postgres.start()
        facts["catalog_outage_seconds"] = round(time.monotonic() - down, 1)
        wait_for(landed, 240, job, "records after the catalog came back")

        # Broker restart: acknowledged records survive, the job reconnects.
        ledger.produce(bootstrap, batch(topics[5], 20), table_of)
        services.broker.stop(remove_data=False)
        down = time.monotonic()
        time.sleep(BROKER_OUTAGE_SECONDS)
        services.broker.start()
        facts["broker_outage_seconds"] = round(time.monotonic() - down, 1)
        ledger.produce(bootstrap, batch(topics[5], 20) + batch(topics[0], 20), table_of)
        wait_for(landed, 240, job, "records after the broker restart")
    finally:
        rc = job.stop()
        runs.append(rc)
    tally = Tally.observe("faults: crashes, registry/catalog/broker outages", ledger, catalog_props,
                          extra_tables=[ledger.dlq_table])
    return Outcome("faults", p, ledger, tally, catalog_props, runs, log.read_text(errors="replace"), facts)


def _retried_since(log: Path, offset: int) -> bool:
    """The job logged, past `offset` of its log, a batch (or a commit) retried over a service outage."""
    with open(log, "rb") as f:
        f.seek(offset)
        return RETRIED.search(f.read()) is not None


def _tables_with_snapshot(catalog_props: dict, names: list[str]) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    catalog = load_catalog_from(catalog_props)
    count = 0
    for name in names:
        try:
            count += catalog.load_table(name).metadata.current_snapshot_id is not None
        except NoSuchTableError:
            pass
    return count


def _landed_any(catalog_props: dict, name: str, coords: list) -> bool:
    from router.cli.summary import duckdb_connect
    from scripts.reliability.helpers import read_coords

    table = load_catalog_from(catalog_props).load_table(name)
    con = duckdb_connect()
    try:
        got = read_coords(con, table)
    finally:
        con.close()
    return any(c in got for c in coords)


def run_on_own_services(workdir: Path) -> Outcome:
    """The fault scenario on a broker, registry and PostgreSQL of its own (each can be stopped)."""
    from router.devstack.broker import LocalBroker
    from router.devstack.catalog import LocalPostgres

    broker = LocalBroker(str(workdir / "broker"), tied_to_parent=True)
    registry = RegistryProcess(workdir / "registry.json")
    postgres = LocalPostgres(tied_to_parent=True)
    broker.start()
    registry.start()
    postgres.start()
    try:
        return faults(FaultServices(broker, registry, postgres, workdir / "warehouse"), workdir)
    finally:
        registry.stop()
        postgres.stop(remove_data=True)
        broker.stop(remove_data=True)
