"""Library behind `icerouter plan`: what the job would do to each table for a schema.

Read-only: tables are loaded, never written. Every decision goes through
``router.decisions`` and ``router.routing`` with the inputs the job would use
(the routes that send the topic to the table, their column projections and
policies, the Kafka metadata columns, ``tables.auto_create``, the namespace and
table-name rules, ``unmatched``), so a plan cannot disagree with the job. A
record the job would never write to the table (no route, a refused table name,
routes that disagree about a fan-in table, a schema Iceberg cannot hold) is a
*refusal*: a plan with one blocking violation that carries the job's reason.
``router.planning.check`` builds `icerouter check` on the same pieces.

Each (schema, table) pair is planned on its own: fan-in merges happen in the
job. Exit rule: 0 when nothing is blocked, 1 when a plan is blocked.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Sequence

from pyiceberg.schema import Schema

from evolution.changes import EvolutionPlan, MappedSchema, Violation
from evolution.exceptions import EvolutionError
from evolution.layout import Layout, TableLayout
from evolution.policy import EvolutionPolicy, Mode
from registry.client import get_registry
from registry.exceptions import RegistryError, SchemaNotFound
from router.changes.envelope import key_columns_from_kafka_keys, key_columns_from_key_schema, missing_key_reason
from router.changes.exceptions import ChangeStreamError
from router.config import RouterConfig
from router.decisions import (
    decide_format, plan_table, resolve_policy, table_layout, table_view, wanted_format_version,
)
from router.exceptions import ConfigError, RouteError
from router.planning.inputs import (
    AVRO, JSON_SCHEMA, SCHEMA_SUFFIXES, SchemaInput, detect_schema_type, file_subject, load_schema_file,
    map_schema, parse_subject, read_schema_file, subject_topic,
)
from router.planning.services import CatalogReader, registry_unavailable
from router.routing.routes import (
    TEMPLATE_PATTERN, Feed, RoutingTable, fan_in_conflict, normalise_identifier_part, require_no_fan_in_conflict,
)
from router.table_writes import APPEND, TableWrite

__all__ = ["AVRO", "JSON_SCHEMA", "SCHEMA_SUFFIXES", "Target", "Planner", "map_schema", "plan_for_schema",
           "render_plan_text", "render_plan_json", "plan_command", "subject_topic", "detect_schema_type",
           "parse_subject", "read_schema_file", "require_namespace", "file_subject", "NO_ROUTE"]

TABLE_NAME = re.compile(r"[^.\s]+(\.[^.\s]+)+")
NO_ROUTE = "(no route)"  # the table label of a topic no route matches


def require_namespace(table: str) -> str:
    if not TABLE_NAME.fullmatch(table or ""):
        raise ConfigError(f"--table {table!r}: give the table with its namespace, e.g. raw.{table or 'orders'}")
    return table


@dataclass(frozen=True)
class Target:
    """One table a schema reaches through one route, with what the job applies on the way.

    ``refusal`` (kind, reason): the job never writes these records to the table
    (they are dead-lettered, or dropped under ``unmatched: drop``)."""

    table: str
    policy: EvolutionPolicy
    columns: tuple[str, ...] | None = None
    route: str | None = None
    topic: str | None = None
    write: TableWrite = APPEND  # append, or upsert by key (router/table_writes.py)
    refusal: tuple[str, str] | None = None
    format_version: int | None = None  # the route's format_version (None: tables.format_version)
    layout: Layout | None = None  # the partition spec and sort order the job brings the table to


class Planner:
    """Routes, policies and table settings of one config, turned into plans."""

    def __init__(self, config: RouterConfig, registry: Any = None) -> None:
        require_no_fan_in_conflict(config)
        self.config = config
        self.routing = RoutingTable(config.routes, config.tables, config.dlq)
        self.policies = config.evolution
        self.registry = registry  # where an upsert route without `key` finds the Kafka key's fields
        self._keys: dict[str, tuple[str, ...] | None] = {}
        self._sampled: set[str] = set()  # topics whose keys come from sampled records (plan --sample)

    def sampled_keys(self, topic: str, column_names) -> None:
        """Key the topic's upsert targets by its sampled records' Kafka keys, decoded as the job decodes
        them (``column_names``: the columns of their router.changes.extract.KafkaKeys)."""
        self._keys[topic] = key_columns_from_kafka_keys(column_names)
        self._sampled.add(topic)

    def key_columns(self, target: Target) -> tuple[str, ...] | None:
        """The key an upsert target is keyed by: the route's, else its sampled records' Kafka keys
        (`sampled_keys`), else the fields of the topic's key schema (`<topic>-key`, latest, as the job
        reads each record's key); None when unknown."""
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
                      route.write if route else APPEND, format_version=route.format_version if route else None,
                      layout=table_layout(self.config.tables, *((route.partition_by, route.sort_by) if route else ())))

    def refused(self, table: str, topic: str | None, kind: str, reason: str, route: Any = None) -> Target:
        return replace(self.target(table, topic or "", route), refusal=(kind, reason))

    def unmatched(self, topic: str, table: str = NO_ROUTE) -> Target:
        """What the job does with a topic no route matches (router.routing.routes.unmatched_reason)."""
        return self.refused(table, topic, "unmatched", self.routing.unmatched_reason(topic, self.config.unmatched))

    def routed_topics(self) -> str:
        """The topics (or topic patterns) routes take, for messages."""
        topics = [t for t in self.config.kafka.topics if self.routing.routes_for_topic(t)]
        if topics:
            return ", ".join(topics)
        patterns = [f"{r.topic.pattern if r.topic else '.*'} (route {r.name})" for r in self.routing.routes]
        return ", ".join(patterns) or "none: the config has no routes"

    def targets_for_topic(self, topic: str) -> tuple[list[Target], list[tuple[str, str]]]:
        """Tables the topic's routes name (templates on the topic only) + routes that cannot be planned."""
        routes = self.routing.routes_for_topic(topic)
        if not routes:
            return [self.unmatched(topic)], []
        planned, unplannable = [], []
        for route in routes:
            if route.named_by_data:
                unplannable.append((f"route {route.name}", "table name depends on record data; "
                                    "plan it with --schema-file and --table"))
                continue
            try:
                table = self.routing.render(route, topic)
            except RouteError as exc:  # the job dead-letters the records with this reason
                planned.append(self.refused(f"route {route.name}", topic, "table_name", exc.message, route))
                continue
            planned.append(self.target(table, topic, route))
        return self._fan_in(planned, topic), unplannable

    def targets_for_table(self, table: str, topic: str) -> list[Target]:
        """The routes that send ``topic`` to ``table`` (templates from data included), or the refusal."""
        try:
            self.routing.validate_table_name(table, topic=topic)
        except RouteError as exc:
            return [self.refused(table, topic, "table_name", exc.message)]
        routes = self.routing.routes_for_topic(topic)
        if not routes:
            return [self.unmatched(topic, table)]
        feeding = [r for r in routes
                   if _template_matches(r.table_template, table, topic, self.routing.default_namespace)]
        if not feeding:
            names = ", ".join(f"{r.name} -> {r.table_template}" for r in routes)
            return [self.refused(table, topic, "not_routed",
                                 f"no route sends topic {topic!r} to {table} (its routes: {names})")]
        return self._fan_in([self.target(table, topic, route) for route in feeding], topic)

    def feeds(self, table: str, topic: str) -> list[Feed]:
        """Every (route, topic) of ``topic`` and ``kafka.topics`` whose records reach ``table``."""
        out = []
        for t in dict.fromkeys([topic, *self.config.kafka.topics]):
            for route in self.routing.routes_for_topic(t):
                if _template_matches(route.table_template, table, t, self.routing.default_namespace):
                    out.append(Feed.of(route, t, self.target(table, t, route).policy))
        return out

    def _fan_in(self, targets: list[Target], topic: str) -> list[Target]:
        """One target per table; refused when the table's feeds disagree (routes.fan_in_conflict, the job's rule)."""
        out: dict[str, Target] = {}
        for target in targets:
            if target.table in out:
                continue
            conflict = fan_in_conflict(target.table, self.feeds(target.table, topic)) \
                if target.refusal is None else None
            out[target.table] = target if conflict is None else replace(target, refusal=("fan_in_conflict", conflict))
        return list(out.values())

    def plan(self, current: Schema | None, schema: Schema, target: Target, *, schema_type: str = AVRO,
             schema_str: str | None = None, source: str | None = None,
             current_layout: TableLayout | None = None) -> EvolutionPlan:
        """The job's plan for one schema and target; ``current_layout``: the existing table's spec and sort
        order (CatalogReader.state), without which its layout is not planned."""
        if target.refusal is not None:
            return self.refusal_plan(current, target, *target.refusal)
        try:
            view = table_view(schema, columns=target.columns, metadata_columns=self.config.tables.metadata_columns,
                              schema_type=schema_type, schema_str=schema_str, source=source, cdc=target.write.cdc,
                              sequence_by=target.write.sequence_by)
        except ChangeStreamError as exc:  # the job dead-letters such records as not_envelope
            return self.refusal_plan(current, target, "not_envelope", str(exc))
        key = self.key_columns(target)
        if target.write.upsert and not key and target.topic in self._sampled:  # the job dead-letters them all
            return self.refusal_plan(current, target, "missing_key", missing_key_reason(target.table))
        plan = plan_table(current, [view], target.policy, self.config.tables.case_sensitive, target.table,
                          target.write, key, target.layout, current_layout)
        if target.write.upsert and not key:
            plan = replace(plan, notes=plan.notes + (
                f"upsert by the fields of the Kafka record key: no {target.topic or '<topic>'}-key schema in "
                "the registry to check the key columns against",))
        return plan

    def refusal_plan(self, current: Schema | None, target: Target, kind: str, reason: str) -> EvolutionPlan:
        """A plan whose records never reach the table: dead-lettered, or dropped (``unmatched: drop``)."""
        dropped = kind == "unmatched" and self.config.unmatched == "drop"
        outcome = Mode.DISCARD_ROW if dropped else Mode.DLQ
        return EvolutionPlan(current, current, violations=(Violation((), kind, reason, outcome),),
                             policy=target.policy, table=target.table)

    def plan_input(self, catalog: CatalogReader, schema: SchemaInput, target: Target) -> EvolutionPlan:
        """The plan of one schema input for one target (a refusal when the schema cannot be used)."""
        if schema.problem is not None:  # the root cause first: no table could take this schema
            return self.refusal_plan(None, target, "invalid_schema", schema.problem)
        if target.refusal is not None:
            return self.refusal_plan(None, target, *target.refusal)
        current, layout = catalog.state(target.table)
        plan = self.plan(current, schema.mapped.schema, target, schema_type=schema.kind, schema_str=schema.text,
                         source=schema.source, current_layout=layout)
        return self.with_format(plan, catalog.format_version(target.table), target)

    def with_format(self, plan: EvolutionPlan, current: int | None, target: Target) -> EvolutionPlan:
        """The plan with the table's format change (router.decisions.decide_format, the job's and
        maintain's rule): an upgrade of an existing table, or the version a new table is created at."""
        if plan.blocked:
            return plan
        decision = decide_format(current, wanted_format_version(self.config.tables.format_version,
                                                                target.format_version))
        if decision.action in ("upgrade", "refuse") or (decision.action == "create" and decision.wanted != 2):
            return replace(plan, notes=plan.notes + (f"table format: {decision.note}",))
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


def render_plan_text(plans: Iterable[EvolutionPlan], notes: Sequence[str] = ()) -> str:
    text = "\n\n".join(p.describe() for p in plans) or "no tables to plan"
    return text + "".join(f"\nnote: {n}" for n in notes)


def render_plan_json(plans: Iterable[EvolutionPlan], notes: Sequence[str] = (), errors: Sequence[str] = ()) -> str:
    """``{"verdict": "ok" | "blocked", "blocked": bool, "plans": [...], "notes": [...], "errors": [...]}``."""
    plans = list(plans)
    blocked = any(p.blocked for p in plans)
    return json.dumps({"verdict": "blocked" if blocked else "ok", "blocked": blocked,
                       "plans": [p.to_dict() for p in plans], "notes": list(notes), "errors": list(errors)},
                      indent=2, sort_keys=True)


def _schema_file_topic(planner: Planner, path: Path, topic: str | None) -> str:
    """The topic a schema file is for: --topic, else its name when that is a routed topic."""
    if topic:
        return topic
    named = subject_topic(file_subject(path))
    if planner.routing.routes_for_topic(named):
        return named
    raise ConfigError(f"--schema-file {path}: no route takes topic {named!r} (from the file name); "
                      f"name the topic with --topic (routed: {planner.routed_topics()})")


def plan_command(config: RouterConfig, subjects: Sequence[str] = (), schema_file: str | None = None,
                 table: str | None = None, fmt: str = "text",
                 topic: str | None = None, samples: Sequence[str] = (),
                 records: int | None = None) -> tuple[str, bool, list[str]]:
    """Dry run for registry subjects (``S`` or ``S:V``), a local schema file, or the latest records of
    topics (``samples``, router/planning/sample.py).

    -> (output, blocked, one line per input that is not a usable schema, for stderr)."""
    if fmt not in ("text", "json"):
        raise ConfigError(f"unknown format {fmt!r} (text, json)")
    inputs: list[tuple[SchemaInput, list[Target]]] = []
    notes: list[str] = []
    if subjects and config.registry is None:
        raise ConfigError("plan --subject: the config has no registry (set registry.url)")
    registry = get_registry(config.registry) if config.registry is not None and (subjects or samples or any(
        r.write.upsert and not r.write.key for r in config.routes)) else None
    planner = Planner(config, registry)
    if schema_file:
        require_namespace(table or "")
        path = Path(schema_file)
        loaded = load_schema_file(path)  # a file that cannot be opened at all: usage error
        try:
            targets = planner.targets_for_table(table, _schema_file_topic(planner, path, topic))
        except ConfigError:
            if loaded.problem is None:
                raise
            targets = [planner.refused(table, topic, "invalid_schema", loaded.problem)]  # no topic needed to tell
        inputs.append((loaded, targets))
    for arg in subjects:
        subject, version = parse_subject(arg)
        try:
            reg = registry.version(subject, version)
        except SchemaNotFound:
            raise ConfigError(f"--subject {arg}: not found in the registry") from None
        except RegistryError as exc:
            raise registry_unavailable(exc, registry.config.url) from None
        source = f"{subject}:{reg.version}"
        try:
            art = registry.artifacts(reg.schema_id)
            loaded = SchemaInput(source, art.schema_str, art.schema_type,
                                 MappedSchema(art.iceberg_schema, {}, source))
        except EvolutionError as exc:  # e.g. a recursive schema: the job dead-letters its records
            loaded = SchemaInput(source, None, reg.schema.schema_type or AVRO, problem=f"subject {source}: {exc}")
        except RegistryError as exc:
            raise registry_unavailable(exc, registry.config.url) from None
        targets, unplannable = planner.targets_for_topic(subject_topic(subject))
        notes += [f"{subject}: {label}: {reason}" for label, reason in unplannable]
        inputs.append((loaded, targets))
    for sampled in samples:
        from router.planning.sample import DEFAULT_SAMPLE, sample_inputs

        try:
            found, sample_notes = sample_inputs(config, planner, registry, sampled, records or DEFAULT_SAMPLE)
        except RegistryError as exc:
            raise registry_unavailable(exc, registry.config.url) from None
        inputs += found
        notes += sample_notes
    catalog = CatalogReader.open(config.catalog) if any(
        s.problem is None and any(t.refusal is None for t in ts) for s, ts in inputs) else None
    plans = [planner.plan_input(catalog, loaded, target) for loaded, targets in inputs for target in targets]
    errors = list(dict.fromkeys(loaded.problem for loaded, _ in inputs if loaded.problem))
    output = render_plan_json(plans, notes, errors) if fmt == "json" else render_plan_text(plans, notes)
    return output, any(p.blocked for p in plans), errors
