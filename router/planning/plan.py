"""Library behind `icerouter plan`: what the job would do to each table for a schema.

Read-only: tables are loaded, never written. Every decision goes through
``router.decisions`` with the inputs the job would use (the routes that send
the topic to the table, their column projections and policies, the Kafka
metadata columns, ``tables.auto_create``), so a plan cannot disagree with the
job. ``router.planning.check`` builds `icerouter check` on the same pieces.

Conventions: subjects follow the TopicNameStrategy (``<topic>-value``); a
schema file ``<name>.avsc`` is Avro and ``<name>.json`` is JSON Schema unless
it parses as an Avro record; a file name without ``-value``/``-key`` names the
topic. Each (schema, table) pair is planned on its own: fan-in merges happen
in the job. Exit rule: 0 when nothing is blocked, 1 when a plan is blocked.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from pyiceberg.schema import Schema

from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.changes import EvolutionPlan, MappedSchema, Violation
from evolution.exceptions import EvolutionError
from evolution.jsonschema import jsonschema_to_iceberg
from evolution.policy import EvolutionPolicy, Mode
from registry.client import get_registry
from registry.exceptions import RegistryError, SchemaNotFound
from router.changes.envelope import key_columns_from_key_schema
from router.changes.exceptions import ChangeStreamError
from router.config import RouterConfig
from router.decisions import plan_table, resolve_policy, table_view
from router.exceptions import ConfigError
from router.planning.services import CatalogReader, registry_unavailable
from router.routing.routes import TEMPLATE_PATTERN, RoutingTable, normalise_identifier_part
from router.table_writes import APPEND, TableWrite

__all__ = ["AVRO", "JSON_SCHEMA", "SCHEMA_SUFFIXES", "Target", "Planner", "map_schema", "plan_for_schema",
           "render_plan_text", "render_plan_json", "plan_command", "subject_topic", "detect_schema_type",
           "parse_subject", "read_schema_file", "require_namespace"]

AVRO, JSON_SCHEMA = "AVRO", "JSON"
SCHEMA_SUFFIXES = {".avsc": AVRO, ".avro": AVRO, ".json": None}
TABLE_NAME = re.compile(r"[^.\s]+(\.[^.\s]+)+")


def map_schema(schema_str: str, schema_type: str = AVRO, source: str | None = None) -> MappedSchema:
    """Registry schema text -> Iceberg schema (+ Avro aliases for renames)."""
    kind = (schema_type or AVRO).upper()
    if kind == AVRO:
        return MappedSchema(avro_to_iceberg(schema_str), avro_field_aliases(schema_str), source)
    if kind == JSON_SCHEMA:
        return MappedSchema(jsonschema_to_iceberg(schema_str), {}, source)
    raise ConfigError(f"schema type {kind} is not supported (AVRO, JSON)", subject=source)


def detect_schema_type(text: str, suffix: str = "") -> str:
    """AVRO for .avsc or an Avro-looking document, else JSON (Schema)."""
    if SCHEMA_SUFFIXES.get(suffix.lower()) == AVRO:
        return AVRO
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return AVRO  # a bare Avro primitive name such as `string`
    if isinstance(doc, list) or (isinstance(doc, str)):
        return AVRO
    if isinstance(doc, dict) and (doc.get("type") in ("record", "enum", "fixed", "array", "map")
                                  and "properties" not in doc and "$schema" not in doc):
        return AVRO
    return JSON_SCHEMA


def subject_topic(subject: str) -> str:
    """TopicNameStrategy: ``orders-value`` -> ``orders``."""
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix):
            return subject[: -len(suffix)]
    return subject


def file_subject(path: Path) -> str:
    """``orders.avsc`` and ``orders-value.avsc`` -> ``orders-value``."""
    return path.stem if path.stem.endswith(("-value", "-key")) else f"{path.stem}-value"


def parse_subject(arg: str) -> tuple[str, int | str]:
    """``orders-value`` -> latest; ``orders-value:3`` -> version 3 (``:latest`` too)."""
    subject, sep, version = arg.rpartition(":")
    if sep and subject and (version.isdigit() or version == "latest"):
        number = int(version) if version.isdigit() else version
        if number == 0:
            raise ConfigError(f"--subject {arg}: versions start at 1")
        return subject, number
    return arg, "latest"


def read_schema_file(path: str | Path) -> str:
    """The file's text; unreadable or non-UTF-8 files are a ConfigError naming the file."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read schema file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"schema file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                          f"{exc.start}): is it a binary file?") from None
    if "\x00" in text:
        raise ConfigError(f"schema file {path} is not a text file (it contains NUL bytes)")
    return text


def require_namespace(table: str) -> str:
    if not TABLE_NAME.fullmatch(table or ""):
        raise ConfigError(f"--table {table!r}: give the table with its namespace, e.g. raw.{table or 'orders'}")
    return table


@dataclass(frozen=True)
class Target:
    """One table a schema reaches through one route, with what the job applies on the way."""

    table: str
    policy: EvolutionPolicy
    columns: tuple[str, ...] | None = None
    route: str | None = None
    topic: str | None = None
    write: TableWrite = APPEND  # append, or upsert by key (router/table_writes.py)


class Planner:
    """Routes, policies and table settings of one config, turned into plans."""

    def __init__(self, config: RouterConfig, registry: Any = None) -> None:
        self.config = config
        self.routing = RoutingTable(config.routes, config.tables, config.dlq)
        self.policies = config.evolution
        self.registry = registry  # where an upsert route without `key` finds the Kafka key's fields
        self._keys: dict[str, tuple[str, ...] | None] = {}

    def key_columns(self, target: Target) -> tuple[str, ...] | None:
        """The key an upsert target is keyed by: the route's, else the fields of the topic's key schema
        (`<topic>-key`, latest, as the job reads each record's key); None when unknown."""
        if not target.write.upsert or target.write.key:
            return target.write.key
        topic = target.topic or ""
        if topic not in self._keys:
            self._keys[topic] = None
            if self.registry is not None and topic:
                try:
                    art = self.registry.artifacts(self.registry.latest(f"{topic}-key").schema_id)
                    self._keys[topic] = key_columns_from_key_schema(art.iceberg_schema)
                except (RegistryError, ChangeStreamError):
                    pass
        return self._keys[topic]

    def target(self, table: str, topic: str, route: Any = None) -> Target:
        policy = resolve_policy(self.policies, topic, route.evolution if route else None,
                                self.config.tables.auto_create)
        return Target(table, policy, route.columns if route else None, route.name if route else None, topic,
                      route.write if route else APPEND)

    def targets_for_topic(self, topic: str) -> tuple[list[Target], list[tuple[str, str]]]:
        """Tables the topic's routes name (templates on the topic only) + routes that cannot be planned."""
        planned, unplannable = [], []
        for route, table in self.routing.static_tables_for_topic(topic):
            if table is None:
                unplannable.append((f"route {route.name}", "table name depends on record data; "
                                    "plan it with --schema-file and --table"))
            else:
                planned.append(self.target(table, topic, route))
        return planned, unplannable

    def targets_for_table(self, table: str, topics: Iterable[str]) -> list[Target]:
        """The routes that send one of ``topics`` to ``table`` (templates from data included)."""
        found: dict[tuple, Target] = {}
        for topic in dict.fromkeys(t for t in topics if t):
            for route in self.routing.routes_for_topic(topic):
                if _template_matches(route.table_template, table, topic, self.routing.default_namespace):
                    t = self.target(table, topic, route)
                    found.setdefault((t.policy, t.columns, t.write), t)
        return list(found.values())

    def plan(self, current: Schema | None, schema: Schema, target: Target, *, schema_type: str = AVRO,
             schema_str: str | None = None, source: str | None = None) -> EvolutionPlan:
        try:
            view = table_view(schema, columns=target.columns, metadata_columns=self.config.tables.metadata_columns,
                              schema_type=schema_type, schema_str=schema_str, source=source, cdc=target.write.cdc)
        except ChangeStreamError as exc:  # the job dead-letters such records as not_envelope
            return EvolutionPlan(current, current, violations=(Violation((), "not_envelope", str(exc), Mode.DLQ),),
                                 policy=target.policy, table=target.table)
        key = self.key_columns(target)
        plan = plan_table(current, [view], target.policy, self.config.tables.case_sensitive, target.table,
                          target.write, key)
        if target.write.upsert and not key:
            plan = replace(plan, notes=plan.notes + (
                f"upsert by the fields of the Kafka record key: no {target.topic or '<topic>'}-key schema in "
                "the registry to check the key columns against",))
        return plan


def _template_matches(template: str, table: str, topic: str, default_namespace: str) -> bool:
    pattern, last = "", 0
    for m in TEMPLATE_PATTERN.finditer(template):
        pattern += re.escape(template[last:m.start()])
        pattern += re.escape(normalise_identifier_part(topic)) if m.group(1) == "topic" else r"[a-z0-9_]+"
        last = m.end()
    pattern += re.escape(template[last:])
    if "." not in template:
        pattern = re.escape(default_namespace) + r"\." + pattern
    return re.fullmatch(pattern, table) is not None


def plan_for_schema(catalog: Any, table_identifier: str, schema_str: str, schema_type: str = AVRO,
                    policy: EvolutionPolicy | None = None, case_sensitive: bool = True) -> EvolutionPlan:
    """Plan for one schema against one table, no route applied (a new-table plan if it does not exist)."""
    current = CatalogReader(catalog).current(table_identifier)
    return plan_table(current, [map_schema(schema_str, schema_type)], policy or EvolutionPolicy(),
                      case_sensitive, table_identifier)


def render_plan_text(plans: Iterable[EvolutionPlan]) -> str:
    return "\n\n".join(p.describe() for p in plans) or "no tables to plan"


def render_plan_json(plans: Iterable[EvolutionPlan]) -> str:
    plans = list(plans)
    return json.dumps({"blocked": any(p.blocked for p in plans), "plans": [p.to_dict() for p in plans]},
                      indent=2, sort_keys=True)


def _format(fmt: str, plans: list[EvolutionPlan]) -> str:
    if fmt == "json":
        return render_plan_json(plans)
    if fmt == "text":
        return render_plan_text(plans)
    raise ConfigError(f"unknown format {fmt!r} (text, json)")


def plan_command(config: RouterConfig, subjects: Sequence[str] = (), schema_file: str | None = None,
                 table: str | None = None, fmt: str = "text", topic: str | None = None) -> tuple[str, bool]:
    """Dry run for registry subjects (``S`` or ``S:V``) or a local schema file; -> (output, blocked)."""
    if schema_file:
        require_namespace(table or "")
        text = read_schema_file(schema_file)
    registry = get_registry(config.registry) if subjects or any(r.write.upsert and not r.write.key for r in config.routes) \
        else None
    planner = Planner(config, registry)
    catalog = CatalogReader.open(config.catalog)
    plans: list[EvolutionPlan] = []
    notes: list[str] = []
    if subjects:
        for arg in subjects:
            subject, version = parse_subject(arg)
            try:
                reg = registry.version(subject, version)
                art = registry.artifacts(reg.schema_id)
            except SchemaNotFound:
                raise ConfigError(f"--subject {arg}: not found in the registry") from None
            except RegistryError as exc:
                raise registry_unavailable(exc, registry.config.url) from None
            targets, unplannable = planner.targets_for_topic(subject_topic(subject))
            notes += [f"{subject}: {label}: {reason}" for label, reason in unplannable]
            for target in targets:
                plans.append(planner.plan(catalog.current(target.table), art.iceberg_schema, target,
                                          schema_type=art.schema_type, schema_str=art.schema_str,
                                          source=f"{subject}:{reg.version}"))
    if schema_file:
        path = Path(schema_file)
        kind = detect_schema_type(text, path.suffix)
        try:
            mapped = map_schema(text, kind, source=str(path))
        except EvolutionError as exc:
            raise ConfigError(f"schema file {path}: {exc}") from None
        topics = [topic] if topic else [subject_topic(file_subject(path)), *config.kafka.topics]
        targets = planner.targets_for_table(table, topics)
        if not targets:
            notes.append(f"no route sends {' or '.join(dict.fromkeys(topics))} to {table}: planned with the "
                         "default policy and no projection (name the topic with --topic)")
            targets = [planner.target(table, topic or "")]
        current = catalog.current(table)
        plans += [planner.plan(current, mapped.schema, t, schema_type=kind, schema_str=text, source=str(path))
                  for t in targets]
    output = _format(fmt, plans)
    if notes and fmt == "text":
        output += "\n\n" + "\n".join(f"note: {n}" for n in notes)
    return output, any(p.blocked for p in plans)
