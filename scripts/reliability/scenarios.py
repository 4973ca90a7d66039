"""Reliability scenarios as plain functions: used by the tests and by scripts/faults.py.

This module holds the shared pieces and the bad-input scenario; outages.py,
concurrency.py and checkpoints.py hold the others.

Each scenario takes the services it runs against, produces a known set of
records (good and bad), runs the real `icerouter run` process and returns an
`Outcome`: the ledger of what was sent, the tally of what landed where, and the
job output, so callers can assert or print a summary.
"""

from __future__ import annotations

import io
import json
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import fastavro

import router.cli.demo_data as data
from scripts.reliability.helpers import (
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
        from router.routing import normalise_identifier_part

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
    from confluent_kafka.schema_registry import Schema

    from scripts.reliability.helpers import registry_client

    client = registry_client(registry)
    client.set_compatibility(subject_name=subject, level="NONE")
    return client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
