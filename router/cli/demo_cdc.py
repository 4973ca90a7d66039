"""A Debezium change stream for the demo, the tests and the benchmarks.

Shaped as Debezium's Avro converter writes a PostgreSQL table's changes: the
Kafka key is a `Key` record of the primary key, the value an `Envelope` with
`before`, `after`, `source` (with `lsn`), `op` (c, r, u, d) and `ts_ms`; a
delete is followed by a tombstone (null value) for log compaction. A key change
is a delete of the old key (and its tombstone) and a create of the new one.
`ChangeScript` keeps the table the events describe, so a test can compare what
the job wrote with the truth. `DebeziumJsonEncoder` writes the same events as
Debezium does through Kafka Connect's JsonConverter, with or without the schema.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from dataclasses import dataclass, field
from typing import Iterator

from router.cli.demo_data import Encoder

NAMESPACE = "dbserver1.public.customers"

CUSTOMER_KEY = {"type": "record", "name": "Key", "namespace": NAMESPACE,
                "fields": [{"name": "id", "type": "long"}]}

CUSTOMER_VALUE = {"type": "record", "name": "Value", "namespace": NAMESPACE, "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "email", "type": ["null", "string"], "default": None},
    {"name": "tier", "type": "string"},
    {"name": "region", "type": "string"},
    {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
]}

SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
    {"name": "connector", "type": "string"}, {"name": "db", "type": "string"}, {"name": "table", "type": "string"},
    {"name": "lsn", "type": ["null", "long"], "default": None}, {"name": "ts_ms", "type": "long"},
]}

CUSTOMER_ENVELOPE = {"type": "record", "name": "Envelope", "namespace": NAMESPACE, "fields": [
    {"name": "before", "type": ["null", CUSTOMER_VALUE], "default": None},
    {"name": "after", "type": ["null", f"{NAMESPACE}.Value"], "default": None},
    {"name": "source", "type": SOURCE},
    {"name": "op", "type": "string"},
    {"name": "ts_ms", "type": ["null", "long"], "default": None},
]}

TIERS = ("free", "pro", "enterprise")
REGIONS = ("eu", "us", "apac")
EPOCH = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


@dataclass
class Event:
    key: dict | None
    value: dict | None  # None: a tombstone
    op: str | None


@dataclass
class ChangeScript:
    """Generates changes of a customers table and keeps the table they describe."""

    seed: int = 7
    rows: dict[int, dict] = field(default_factory=dict)
    lsn: int = 0
    next_id: int = 1
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _row(self, key: int) -> dict:
        self.lsn += 1
        return {"id": key, "name": f"customer {key} v{self.lsn}", "email": None if self.lsn % 7 == 0 else
                f"c{key}@example.com", "tier": self.rng.choice(TIERS), "region": self.rng.choice(REGIONS),
                "updated_at": EPOCH + dt.timedelta(microseconds=self.lsn)}

    def _envelope(self, op: str, before: dict | None, after: dict | None) -> dict:
        ts = 1_700_000_000_000 + self.lsn
        return {"before": before, "after": after, "op": op, "ts_ms": ts,
                "source": {"connector": "postgresql", "db": "shop", "table": "customers", "lsn": self.lsn,
                           "ts_ms": ts}}

    def snapshot(self, n: int) -> Iterator[Event]:
        """Debezium's initial snapshot: `r` events."""
        for _ in range(n):
            key = self.next_id
            self.next_id += 1
            row = self._row(key)
            self.rows[key] = row
            yield Event({"id": key}, self._envelope("r", None, row), "r")

    def insert(self) -> Iterator[Event]:
        key = self.next_id
        self.next_id += 1
        row = self._row(key)
        self.rows[key] = row
        yield Event({"id": key}, self._envelope("c", None, row), "c")

    def update(self, key: int | None = None) -> Iterator[Event]:
        if not self.rows:
            return
        key = key if key is not None else self.rng.choice(sorted(self.rows))
        before, after = self.rows[key], self._row(key)
        self.rows[key] = after
        yield Event({"id": key}, self._envelope("u", before, after), "u")

    def delete(self, key: int | None = None) -> Iterator[Event]:
        if not self.rows:
            return
        key = key if key is not None else self.rng.choice(sorted(self.rows))
        before = self.rows.pop(key)
        self.lsn += 1
        yield Event({"id": key}, self._envelope("d", before, None), "d")
        yield Event({"id": key}, None, None)  # the tombstone that lets Kafka compact the key away

    def recreate(self, key: int) -> Iterator[Event]:
        """INSERT of a key that was deleted before (or a new one: the key given)."""
        row = self._row(key)
        self.rows[key] = row
        self.next_id = max(self.next_id, key + 1)
        yield Event({"id": key}, self._envelope("c", None, row), "c")

    def change_key(self, key: int | None = None) -> Iterator[Event]:
        """An UPDATE of the primary key: delete of the old key, create of the new one."""
        if not self.rows:
            return
        key = key if key is not None else self.rng.choice(sorted(self.rows))
        yield from self.delete(key)
        yield from self.insert()

    def mixed(self, n: int, updates: float = 0.7, inserts: float = 0.2) -> Iterator[Event]:
        """n changes: updates, inserts and deletes in the given shares (deletes take the rest)."""
        for _ in range(n):
            roll = self.rng.random()
            if roll < updates and self.rows:
                yield from self.update()
            elif roll < updates + inserts or not self.rows:
                yield from self.insert()
            else:
                yield from self.delete()


class ChangeEncoder:
    """Frames a script's events for Kafka with the registered key and envelope schema ids."""

    def __init__(self, key_schema_id: int, value_schema_id: int):
        self.key = Encoder(CUSTOMER_KEY, key_schema_id)
        self.value = Encoder(CUSTOMER_ENVELOPE, value_schema_id)

    def __call__(self, topic: str, event: Event) -> tuple[str, bytes | None, bytes | None, None]:
        return (topic, self.key(event.key) if event.key is not None else None,
                self.value(event.value) if event.value is not None else None, None)


# Debezium through Kafka Connect's JsonConverter (schemas.enable=true, time.precision.mode=connect):
# the same events, their schema embedded in each record as a Connect schema
_CONNECT_ROW = [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "name", "type": "string", "optional": False},
    {"field": "email", "type": "string", "optional": True},
    {"field": "tier", "type": "string", "optional": False},
    {"field": "region", "type": "string", "optional": False},
    {"field": "updated_at", "type": "int64", "optional": False, "name": "org.apache.kafka.connect.data.Timestamp",
     "version": 1},
]
CONNECT_KEY = {"type": "struct", "name": f"{NAMESPACE}.Key", "optional": False,
               "fields": [{"field": "id", "type": "int64", "optional": False}]}
CONNECT_ENVELOPE = {"type": "struct", "name": f"{NAMESPACE}.Envelope", "optional": False, "fields": [
    {"field": "before", "type": "struct", "name": f"{NAMESPACE}.Value", "optional": True, "fields": _CONNECT_ROW},
    {"field": "after", "type": "struct", "name": f"{NAMESPACE}.Value", "optional": True, "fields": _CONNECT_ROW},
    {"field": "source", "type": "struct", "name": "io.debezium.connector.postgresql.Source", "optional": False,
     "fields": [{"field": "connector", "type": "string", "optional": False},
                {"field": "db", "type": "string", "optional": False},
                {"field": "table", "type": "string", "optional": False},
                {"field": "lsn", "type": "int64", "optional": True},
                {"field": "ts_ms", "type": "int64", "optional": False}]},
    {"field": "op", "type": "string", "optional": False},
    {"field": "ts_ms", "type": "int64", "optional": True},
]}


def _connect_row(row: dict | None) -> dict | None:
    if row is None:
        return None
    return {**row, "updated_at": int((row["updated_at"] - EPOCH_UTC).total_seconds() * 1000)}


EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


class DebeziumJsonEncoder:
    """A script's events as Debezium writes them through the JsonConverter: with the Connect schema
    embedded in key and value (``schemas.enable=true``, the converter's default) or without it."""

    def __init__(self, schemas: bool = True):
        self.schemas = schemas

    def _wrap(self, schema: dict, payload: dict) -> bytes:
        return json.dumps({"schema": schema, "payload": payload} if self.schemas else payload).encode()

    def __call__(self, topic: str, event: Event) -> tuple[str, bytes | None, bytes | None, None]:
        key = self._wrap(CONNECT_KEY, event.key) if event.key is not None else None
        if event.value is None:
            return topic, key, None, None
        value = {**event.value, "before": _connect_row(event.value["before"]),
                 "after": _connect_row(event.value["after"])}
        return topic, key, self._wrap(CONNECT_ENVELOPE, value), None


#: ExtractNewRecordState's output (add.fields=op,source.lsn; delete.handling.mode=rewrite) in Avro
FLAT_VALUE = {"type": "record", "name": "Value", "namespace": NAMESPACE, "fields": [
    *CUSTOMER_VALUE["fields"],
    {"name": "__op", "type": ["null", "string"], "default": None},
    {"name": "__source_lsn", "type": ["null", "long"], "default": None},
    {"name": "__deleted", "type": ["null", "string"], "default": None},
]}


def flattened(event: Event) -> dict | None:
    """The event as ExtractNewRecordState writes it: the row (``before`` for a delete), ``__op``,
    ``__source_lsn`` and ``__deleted``; a tombstone stays a tombstone."""
    if event.value is None:
        return None
    envelope = event.value
    row = envelope["after"] if envelope["op"] != "d" else envelope["before"]
    return {**row, "__op": envelope["op"], "__source_lsn": envelope["source"]["lsn"],
            "__deleted": "true" if envelope["op"] == "d" else "false"}


class FlattenedJsonEncoder:
    """Flattened events as plain JSON (the JsonConverter with schemas.enable=false)."""

    def __call__(self, topic: str, event: Event) -> tuple[str, bytes | None, bytes | None, None]:
        value = flattened(event)
        if value is not None:
            value = {**value, "updated_at": _connect_row(value)["updated_at"]}
        return (topic, json.dumps(event.key).encode() if event.key is not None else None,
                json.dumps(value).encode() if value is not None else None, None)


class FlattenedAvroEncoder:
    """Flattened events in Avro with the registry's framing (key as `ChangeEncoder` writes it)."""

    def __init__(self, key_schema_id: int, value_schema_id: int):
        self.key = Encoder(CUSTOMER_KEY, key_schema_id)
        self.value = Encoder(FLAT_VALUE, value_schema_id)

    def __call__(self, topic: str, event: Event) -> tuple[str, bytes | None, bytes | None, None]:
        value = flattened(event)
        return (topic, self.key(event.key) if event.key is not None else None,
                self.value(value) if value is not None else None, None)
