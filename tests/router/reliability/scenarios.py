"""Reliability scenarios as plain functions: used by the tests and by scripts/faults.py.

Each scenario takes the services it runs against, produces a known set of
records (good and bad), runs the real `icerouter run` process and returns an
`Outcome`: the ledger of what was sent, the tally of what landed where, and the
job output, so callers can assert or print a summary.
"""

from __future__ import annotations

import io
import json
import re
import struct
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fastavro

from router import demo_data as data
from tests.router.reliability.helpers import (
    Ledger, Tally, create_topics, load_catalog_from, register, run_job, write_config,
)

BIG_VALUE_BYTES = 10 * 1024 * 1024
GOOD_PER_TOPIC = 30

CODE_V1 = {"type": "record", "name": "Coded", "namespace": "rel",
           "fields": [{"name": "id", "type": "long"}, {"name": "code", "type": "string"}]}
CODE_V2 = {"type": "record", "name": "Coded", "namespace": "rel",
           "fields": [{"name": "id", "type": "long"}, {"name": "code", "type": "int"}]}
EVENT_JSON_SCHEMA = {"$schema": "http://json-schema.org/draft-07/schema#", "title": "Event", "type": "object",
                     "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
                     "required": ["id", "name"], "additionalProperties": False}


@dataclass
class Services:
    """Where a scenario runs: broker, registry section of the router config, catalog properties."""

    bootstrap: str
    registry: dict
    catalog_props: dict
    registry_env: dict = field(default_factory=dict)  # env vars the job needs for ${...} in registry

    def producer_registry(self) -> dict:
        """The registry section with ${VAR} resolved from `registry_env`, for the test's own client."""
        def resolve(value):
            if not isinstance(value, str):
                return value
            return re.sub(r"\$\{(\w+)\}", lambda m: self.registry_env.get(m.group(1), m.group(0)), value)
        return {k: resolve(v) for k, v in self.registry.items()}


@dataclass
class Outcome:
    name: str
    prefix: str
    ledger: Ledger
    tally: Tally
    catalog_props: dict
    runs: list = field(default_factory=list)  # CompletedProcess / return codes, in order
    log: str = ""
    facts: dict = field(default_factory=dict)


def new_prefix(tag: str) -> str:
    return f"{tag}_{uuid.uuid4().hex[:8]}"


def encode(schema: dict, schema_id: int, record: dict) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(json.dumps(schema))), record)
    return data.frame(schema_id, buf.getvalue())


def create_coded_table(catalog_props: dict, identifier: str) -> None:
    """A table that already holds `code` as a string: the incompatible change comes later."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    catalog = load_catalog_from(catalog_props)
    catalog.create_namespace_if_not_exists(identifier.rsplit(".", 1)[0])
    catalog.create_table(identifier, Schema(NestedField(1, "id", LongType(), required=False),
                                            NestedField(2, "code", StringType(), required=False)))


# ---------------------------------------------------------------- bad input + incompatible change
def bad_input(services: Services, workdir: Path, verbose: bool = True) -> Outcome:
    """Every kind of bad record next to good records of other topics, one --available-now run.

    Also covers an incompatible change (string -> int) under `freeze` and `dlq`
    policies on two topics while the others keep committing.
    """
    from router.devstack.broker import LARGE_MESSAGE_TOPIC_CONFIG

    p = new_prefix("bi")
    raw, tenant_ns, ops = f"{p}_raw", f"{p}_t1", f"{p}_ops"
    dlq_table = f"{ops}.dead_letters"
    t = {name: f"{p}.{name}" for name in ("orders_a", "orders_b", "events_json", "tenants", "freeze_t",
                                           "dlq_t")}
    t["weird"] = f"{p}.Weird-Topic.V1"
    t["big"] = f"{p}.big"
    create_topics(services.bootstrap, [v for k, v in t.items() if k != "big"], partitions=2)
    create_topics(services.bootstrap, [t["big"]], partitions=1, config=dict(LARGE_MESSAGE_TOPIC_CONFIG))
    for name in ("freeze_t", "dlq_t"):
        create_coded_table(services.catalog_props, f"{raw}.{p}_{name}")

    reg = services.producer_registry()
    order_id = {k: register(reg, f"{t[k]}-value", data.ORDER_V1) for k in ("orders_a", "orders_b", "weird", "big",
                                                                          "tenants")}
    json_id = register(reg, f"{t['events_json']}-value", EVENT_JSON_SCHEMA, "JSON")
    code_v1 = {k: register(reg, f"{t[k]}-value", CODE_V1) for k in ("freeze_t", "dlq_t")}
    code_v2 = {k: _register_unchecked(reg, f"{t[k]}-value", CODE_V2) for k in ("freeze_t", "dlq_t")}

    def table_of(topic: str) -> str:
        from router.routes import normalise_identifier_part

        return f"{raw}.{normalise_identifier_part(topic)}"

    ledger = Ledger(dlq_table)
    poison: dict[str, bytes] = {}

    def good(topic_key: str, n: int, start: int = 0) -> list:
        return [(t[topic_key], f"k{i}".encode(), encode(data.ORDER_V1, order_id[topic_key], data.order(i)), None)
                for i in range(start, start + n)]

    # good records of every plain topic
    for key in ("orders_a", "orders_b", "weird"):
        ledger.produce(services.bootstrap, good(key, GOOD_PER_TOPIC), lambda topic, h: [table_of(topic)])
    full = encode(data.ORDER_V1, order_id["orders_a"], data.order(7))
    bad = {
        "wire_format": b"this is not framed",
        "schema_not_found": data.frame(987_654, full[5:]),
        "truncated": full[:12],
        "corrupt": data.frame(order_id["orders_a"], b"\x02\xfe\xff\xff\xff\x0f" + b"x" * 10),
    }
    expected_class = {"wire_format": "wire_format", "schema_not_found": "schema_not_found",
                      "truncated": "decode_error", "corrupt": "decode_error"}
    for kind, value in bad.items():
        poison[kind] = value
        ledger.produce(services.bootstrap, [(t["orders_a"], kind.encode(), value, [("kind", kind.encode())])],
                       lambda topic, h, kind=kind: ("dlq", expected_class[kind]))
    # tombstone (tombstones: dlq)
    ledger.produce(services.bootstrap, [(t["orders_b"], b"gone", None, None)], lambda topic, h: ("dlq", "tombstone"))

    # JSON Schema topic: valid records, one of the wrong type, one missing a required field
    json_good = [(t["events_json"], None, data.frame(json_id, json.dumps({"id": i, "name": f"n{i}"}).encode()),
                  None) for i in range(10)]
    ledger.produce(services.bootstrap, json_good, lambda topic, h: [table_of(topic)])
    for kind, payload in (("json_type", {"id": "not-a-number", "name": "x"}), ("json_missing", {"id": 5})):
        value = data.frame(json_id, json.dumps(payload).encode())
        poison[kind] = value
        ledger.produce(services.bootstrap, [(t["events_json"], kind.encode(), value, None)],
                       lambda topic, h: ("dlq", "decode_error"))

    # 10 MB: one valid record lands in its table, one 10 MB unframed value is dead-lettered whole
    big_record = data.order(1)
    big_record["note"] = "n" * BIG_VALUE_BYTES
    ledger.produce(services.bootstrap, [(t["big"], b"big", encode(data.ORDER_V1, order_id["big"], big_record), None)],
                   lambda topic, h: [table_of(topic)])
    poison["big_garbage"] = b"\x07" * BIG_VALUE_BYTES
    ledger.produce(services.bootstrap, [(t["big"], b"big-garbage", poison["big_garbage"], None)],
                   lambda topic, h: ("dlq", "wire_format"))

    # header-routed topic: data must never name a namespace the operator did not allow
    tenant_good = [(t["tenants"], None, encode(data.ORDER_V1, order_id["tenants"], data.order(i)),
                    [("tenant", tenant_ns.encode())]) for i in range(10)]
    ledger.produce(services.bootstrap, tenant_good, lambda topic, h: [f"{tenant_ns}.events"])
    for kind, header in (("path", b"../x"), ("other_namespace", b"other_db.t"), ("not_allowed", b"other_db"),
                         ("missing", None)):
        headers = [("tenant", header)] if header is not None else [("unrelated", b"1")]
        value = encode(data.ORDER_V1, order_id["tenants"], data.order(100))
        poison[f"tenant_{kind}"] = value
        ledger.produce(services.bootstrap, [(t["tenants"], kind.encode(), value, headers)],
                       lambda topic, h: ("dlq", "TableNameError"))

    # incompatible change: code string -> int on two topics, policies freeze and dlq
    for key, cls in (("freeze_t", "evolution_frozen"), ("dlq_t", "evolution_violation")):
        v1 = [(t[key], None, encode(CODE_V1, code_v1[key], {"id": i, "code": f"c{i}"}), None) for i in range(10)]
        ledger.produce(services.bootstrap, v1, lambda topic, h: [table_of(topic)])
        v2 = [(t[key], None, encode(CODE_V2, code_v2[key], {"id": 100 + i, "code": i}), None) for i in range(5)]
        ledger.produce(services.bootstrap, v2, lambda topic, h, cls=cls: ("dlq", cls))

    config = write_config(
        workdir / f"{p}.yaml", bootstrap=services.bootstrap, registry=services.registry, catalog_props=services.catalog_props,
        job_name=f"job_{p}", topics_pattern=rf"{re.escape(p)}\..*", namespaces=[raw, tenant_ns, ops],
        dlq_table=dlq_table,
        routes=[{"name": "raw", "topic": rf"{re.escape(p)}\.(?!tenants$).*", "table": f"{raw}.{{topic}}"},
                {"name": "tenants", "topic": rf"{re.escape(p)}\.tenants", "table": "{header.tenant}.events"}],
        evolution={"topics": {rf"{re.escape(p)}\.freeze_t": {"type_change": "freeze"},
                              rf"{re.escape(p)}\.dlq_t": {"type_change": "dlq"}}},
        tombstones="dlq")
    log = workdir / f"{p}.log"
    res = run_job(config, "--available-now", env=services.registry_env, log=log, verbose=verbose)
    tally = Tally.observe("bad input + incompatible change", ledger, services.catalog_props)
    return Outcome("bad_input", p, ledger, tally, services.catalog_props, [res], res.stdout + res.stderr,
                   facts={"config": config, "topics": t, "poison": poison, "table_of": table_of,
                          "dlq_table": dlq_table, "tenant_table": f"{tenant_ns}.events",
                          "big_bytes": BIG_VALUE_BYTES})


def _register_unchecked(registry: dict, subject: str, schema: dict) -> int:
    """Register an incompatible version (subject compatibility NONE first), as a producer team would."""
    from tests.router.reliability.helpers import registry_client
    from confluent_kafka.schema_registry import Schema

    client = registry_client(registry)
    client.set_compatibility(subject_name=subject, level="NONE")
    return client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))


# ---------------------------------------------------------------- faults
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
        import sys

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
REGISTRY_OUTAGE_SECONDS = 30
CATALOG_OUTAGE_SECONDS = 15
BROKER_OUTAGE_SECONDS = 6


def faults(services: FaultServices, workdir: Path) -> Outcome:
    """SIGKILL during commits (several times in a row), then a live job through registry,
    catalog and broker outages. Every record must end up exactly once in its table."""
    import time

    from tests.router.reliability.helpers import JobProcess, wait_for

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
        from router.routes import normalise_identifier_part

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
        tombstones="ignore", job={"commit_threads": 1})  # serial commits: crash points are exact
    log = workdir / f"{p}.log"
    facts: dict[str, Any] = {"config": config, "topics": topics, "table_of": table_of}
    runs = []
    for n in CRASH_POINTS:
        res = run_job(config, "--available-now", env={"ICEROUTER_CRASH_AT": f"commit:{n}"}, log=log)
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
        new_coords = ledger.produce(bootstrap, batch(topics[1], 20, 2, v2_id), table_of)
        time.sleep(max(0.0, REGISTRY_OUTAGE_SECONDS - (time.monotonic() - down)))
        facts["new_id_landed_while_down"] = _landed_any(catalog_props, table_of(topics[1])[0], new_coords)
        services.registry.start()
        facts["registry_outage_seconds"] = round(time.monotonic() - down, 1)
        wait_for(landed, 180, job, "records of the new schema after the registry came back")

        # Catalog outage: PostgreSQL stopped while records arrive.
        services.postgres.stop(remove_data=False)
        down = time.monotonic()
        ledger.produce(bootstrap, batch(topics[3], 20) + batch(topics[4], 20), table_of)
        time.sleep(CATALOG_OUTAGE_SECONDS)
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
    from tests.duckdb_reader import connect
    from tests.router.reliability.helpers import metadata_path, read_coords

    table = load_catalog_from(catalog_props).load_table(name)
    con = connect()
    try:
        got = read_coords(con, table)
    finally:
        con.close()
    return any(c in got for c in coords)


# ---------------------------------------------------------------- concurrent writers
CONCURRENT_TOPICS = 3
CONCURRENT_PER_TOPIC = 100
APPENDED_ROWS = 15


def concurrent_writers(services: Services, workdir: Path) -> Outcome:
    """Two jobs with different names fan into one table while a third process appends with pyiceberg."""
    import sys

    from tests.router.reliability.appender import APPENDER_TOPIC
    from tests.router.reliability.helpers import JobProcess, job_env

    p = new_prefix("cw")
    shared, ops = f"{p}_shared.events", f"{p}_ops"
    reg = services.producer_registry()
    ledger = Ledger(f"{ops}.dead_letters")
    topics = {side: [f"{p}.{side}_{i}" for i in range(CONCURRENT_TOPICS)] for side in ("a", "b")}
    create_topics(services.bootstrap, topics["a"] + topics["b"], partitions=2)
    for side, names in topics.items():
        for i, tp in enumerate(names):
            sid = register(reg, f"{tp}-value", data.ORDER_V1)
            ledger.produce(services.bootstrap,
                           [(tp, None, encode(data.ORDER_V1, sid, data.order(1000 * i + j)), None)
                            for j in range(CONCURRENT_PER_TOPIC)], lambda topic, h: [shared])
    configs = {}
    for side in ("a", "b"):
        configs[side] = write_config(
            workdir / f"{p}_{side}.yaml", bootstrap=services.bootstrap, registry=services.registry,
            catalog_props=services.catalog_props, job_name=f"job_{p}_{side}",
            topics_pattern=rf"{re.escape(p)}\.{side}_.*", namespaces=[f"{p}_shared", ops],
            dlq_table=ledger.dlq_table, routes=[{"name": "fan-in", "table": shared}],
            kafka={"max_records_per_batch": 120})
    log = workdir / f"{p}.log"
    jobs = [JobProcess(configs[side], log.with_name(f"{p}_{side}.log"), "--available-now",
                       env=services.registry_env) for side in ("a", "b")]
    appender = subprocess.run([sys.executable, "-m", "tests.router.reliability.appender",
                               json.dumps(services.catalog_props), shared, str(APPENDED_ROWS), "0.5"],
                              env=job_env(), capture_output=True, text=True, timeout=400)
    rcs = [job.proc.wait(400) for job in jobs]
    outputs = "".join(job.output() for job in jobs)
    for job in jobs:
        job.stop()
    assert appender.returncode == 0, appender.stderr[-3000:]
    appended = json.loads(appender.stdout.strip().splitlines()[-1])
    for offset in appended:
        ledger.expect(shared, (APPENDER_TOPIC, 0, offset))
        ledger.sent += 1
    tally = Tally.observe("concurrent writers: 2 jobs + pyiceberg appender", ledger, services.catalog_props)
    return Outcome("concurrent_writers", p, ledger, tally, services.catalog_props, rcs, outputs,
                   facts={"shared": shared, "topics": topics, "jobs": [f"job_{p}_a", f"job_{p}_b"],
                          "appended": appended})
