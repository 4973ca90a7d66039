"""Routing rules compiled once, evaluated column-wise on Arrow batches.

A record goes to every route that matches it (fan-out); several topics may
render the same table name (fan-in). Matching is by topic regex, header value
regex and decoded field value. Table names are templates:

    raw.{topic}              topic names are normalised to [a-z0-9_]
    {header.tenant}.events   values from data are validated, never normalised:
    analytics.{field.kind}   a value such as ``../x`` or ``other_db.t`` is refused

so that data can never name a namespace the operator did not allow.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Mapping, Sequence

from evolution.layout_terms import Layout
from evolution.policy import PolicyOverrides
from registry.formats import REGISTRY_FORMAT, ValueFormat
from router.config import DlqConfig, RouteConfig, RouterConfig, TablesConfig
from router.decisions import resolve_policy
from router.exceptions import ConfigError, RouteError, TableNameError
from router.table_names import normalise_identifier_part  # noqa: F401 - re-exported
from router.table_writes import APPEND, TableWrite

TEMPLATE_PATTERN = re.compile(r"\{(topic|header\.[^{}]+|field\.[^{}]+)\}")
DATA_VALUE_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")
IDENTIFIER_PATTERN = re.compile(r"[a-z0-9_]+(\.[a-z0-9_]+)+")


@dataclass(frozen=True)
class Feed:
    """One way records reach a table: a route, a topic, and what the table takes from them."""

    route: str
    topic: str | None
    policy: Any  # the resolved evolution policy (route -> topic pattern -> default)
    columns: tuple[str, ...] | None
    write: TableWrite
    partition_by: tuple[str, ...] | None
    sort_by: tuple[str, ...] | None = None

    @classmethod
    def of(cls, route: Any, topic: str | None, policy: Any) -> Feed:
        """The feed of a route (compiled or as configured) for one topic under its resolved policy."""
        return cls(route.name, topic, policy, route.columns, route.write, route.partition_by, route.sort_by)


#: what the feeds of one table must agree on: a table has one policy, projection, mode, spec and sort order
FAN_IN_SETTINGS = ("policy", "columns", "write", "partition_by", "sort_by")


def fan_in_conflict(table: str, feeds: Sequence[Feed]) -> str | None:
    """Why ``feeds`` cannot write ``table`` together (None: they agree on every FAN_IN_SETTINGS).

    The one fan-in rule: routes and topics feeding one table must agree; otherwise
    the job dead-letters the table's records of that batch with this reason, plan and
    check block, and routes that name the table literally are refused at load."""
    feeds = list(dict.fromkeys(feeds))
    differ = [s for s in FAN_IN_SETTINGS if len({repr(getattr(f, s)) for f in feeds}) > 1]
    if not differ:
        return None
    names = ", ".join(dict.fromkeys(f"{f.route} ({f.topic})" if f.topic else f.route for f in feeds))
    return (f"routes {names} feed table {table} with different {', '.join(differ)}: give them the same "
            "settings or send them to different tables")


@dataclass(frozen=True)
class CompiledRoute:
    name: str
    table_template: str
    topic: re.Pattern | None
    headers: tuple[tuple[str, re.Pattern], ...]
    fields: tuple[tuple[str, tuple[Any, ...]], ...]
    columns: tuple[str, ...] | None
    evolution: PolicyOverrides | None
    partition_by: tuple[str, ...] | None
    placeholders: tuple[str, ...] = field(default=())
    write: TableWrite = APPEND  # append, or upsert by key / Debezium CDC (router/table_writes.py)
    format: ValueFormat = REGISTRY_FORMAT  # how the topic's values are read (registry/formats.py)
    format_version: int | None = None  # Iceberg format version of the tables it creates (None: tables')
    sort_by: tuple[str, ...] | None = None

    @property
    def layout(self) -> Layout:
        """The route's own layout settings (unset ones come from ``tables``: router.decisions.table_layout)."""
        return Layout(self.partition_by, self.sort_by)

    @property
    def header_names(self) -> tuple[str, ...]:
        names = [name for name, _ in self.headers]
        names += [p[len("header."):] for p in self.placeholders if p.startswith("header.")]
        return tuple(dict.fromkeys(names))

    @property
    def field_names(self) -> tuple[str, ...]:
        names = [name for name, _ in self.fields]
        names += [p[len("field."):] for p in self.placeholders if p.startswith("field.")]
        return tuple(dict.fromkeys(names))

    @property
    def named_by_data(self) -> bool:
        """The table name depends on header or field values (not only on the topic)."""
        return any(p != "topic" for p in self.placeholders)

    def matches_topic(self, topic: str) -> bool:
        return self.topic is None or self.topic.fullmatch(topic) is not None


def compile_route(route: RouteConfig) -> CompiledRoute:
    fields = tuple((name, tuple(v) if isinstance(v, (list, tuple)) else (v,)) for name, v in route.fields.items())
    return CompiledRoute(
        name=route.name,
        table_template=route.table,
        topic=re.compile(route.topic) if route.topic else None,
        headers=tuple((k, re.compile(v)) for k, v in route.headers.items()),
        fields=fields,
        columns=route.columns,
        evolution=route.evolution,
        partition_by=route.partition_by,
        placeholders=tuple(m.group(1) for m in TEMPLATE_PATTERN.finditer(route.table)),
        write=route.write,
        format=route.format,
        format_version=route.format_version,
        sort_by=route.sort_by,
    )


class RoutingTable:
    """Compiled routes plus the naming rules; cheap to pickle (config only), cached per topic."""

    def __init__(self, routes: Sequence[RouteConfig], tables: TablesConfig, dlq: DlqConfig):
        self.routes = tuple(compile_route(r) for r in routes)
        self.default_namespace = tables.default_namespace
        self.allowed_namespaces = frozenset(tables.allowed_namespaces)
        self.dlq_table = dlq.table
        self._for_topic = lru_cache(maxsize=4096)(self._compute_for_topic)

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_for_topic")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._for_topic = lru_cache(maxsize=4096)(self._compute_for_topic)

    def _compute_for_topic(self, topic: str) -> tuple[CompiledRoute, ...]:
        return tuple(r for r in self.routes if r.matches_topic(topic))

    def routes_for_topic(self, topic: str) -> tuple[CompiledRoute, ...]:
        return self._for_topic(topic)

    @staticmethod
    def unmatched_reason(topic: str, unmatched: str | None = None) -> str:
        """The dead-letter reason of a record no route matches; with ``unmatched`` (the config's
        setting) also what the job does with it, as plan and check report it."""
        reason = f"no route matches topic {topic!r}"
        if unmatched is None:
            return reason
        fate = "dead-letters" if unmatched == "dlq" else "drops"
        return f"{reason}: the job {fate} its records (unmatched: {unmatched})"

    def key_format(self, topic: str) -> ValueFormat | None:
        """How the job decodes a topic's Kafka keys: as its first upsert route reads values (upsert routes
        key by them; a Debezium JSON topic's keys are Connect JSON like its values). None: no upsert route."""
        upserts = [r for r in self.routes_for_topic(topic) if r.write.upsert]
        return upserts[0].format if upserts else None

    def unfiltered_reason(self, topic: str) -> str:
        """The dead-letter reason of a record of a routed topic that no route's headers / fields filter takes."""
        names = ", ".join(r.name for r in self.routes_for_topic(topic))
        return f"no route's headers / fields filter takes this record of topic {topic!r} (routes: {names})"

    def render(self, route: CompiledRoute, topic: str, headers: Mapping[str, str | None] | None = None,
               values: Mapping[str, Any] | None = None) -> str:
        """The table identifier a record goes to; raises TableNameError with the reason."""
        headers, values = headers or {}, values or {}

        def substitute(m: re.Match) -> str:
            key = m.group(1)
            if key == "topic":
                return normalise_identifier_part(topic)
            source, name = key.split(".", 1)
            raw = headers.get(name) if source == "header" else values.get(name)
            if raw is None:
                raise TableNameError(f"{source} {name!r} needed by the table template is missing",
                                     route=route.name, topic=topic)
            text = str(raw)
            if not DATA_VALUE_PATTERN.fullmatch(text):
                raise TableNameError(f"{source} {name!r} value {text[:64]!r} is not allowed in a table name",
                                     route=route.name, topic=topic)
            return text.lower().replace("-", "_")

        name = TEMPLATE_PATTERN.sub(substitute, route.table_template)
        if "." not in name:
            name = f"{self.default_namespace}.{name}"
        return self.validate_table_name(name, route=route.name, topic=topic)

    def validate_table_name(self, name: str, route: str | None = None, topic: str | None = None) -> str:
        if not IDENTIFIER_PATTERN.fullmatch(name):
            raise TableNameError(f"table name {name!r} is not a valid identifier", route=route, topic=topic)
        namespace = name.rsplit(".", 1)[0]
        if self.allowed_namespaces and namespace not in self.allowed_namespaces:
            raise TableNameError(f"namespace {namespace!r} is not in tables.allowed_namespaces",
                                 route=route, topic=topic)
        return name

    def static_tables_for_topic(self, topic: str) -> list[tuple[CompiledRoute, str | None]]:
        """Routes of a topic and their table when it depends on the topic only (for plan/check)."""
        out = []
        for route in self.routes_for_topic(topic):
            if route.named_by_data:
                out.append((route, None))
            else:
                out.append((route, self.render(route, topic)))
        return out


def fan_in_conflicts(config: RouterConfig) -> list[str]:
    """The fan-in conflicts a config shows before any record arrives: routes that name one table
    literally with different rules, and the tables routes make of the topics in ``kafka.topics``."""
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    literal: dict[str, list[Feed]] = {}
    by_topic: dict[str, list[Feed]] = {}
    for route in routing.routes:
        if not route.placeholders:
            table = route.table_template if "." in route.table_template \
                else f"{routing.default_namespace}.{route.table_template}"
            literal.setdefault(table, []).append(Feed.of(route, None, route.evolution))
    for topic in config.kafka.topics:
        for route in routing.routes_for_topic(topic):
            if route.named_by_data:
                continue
            try:
                table = routing.render(route, topic)
            except RouteError:
                continue
            policy = resolve_policy(config.evolution, topic, route.evolution, config.tables.auto_create)
            by_topic.setdefault(table, []).append(Feed.of(route, topic, policy))
    found = {table: fan_in_conflict(table, feeds) for table, feeds in literal.items()}
    for table, feeds in by_topic.items():
        found[table] = found.get(table) or fan_in_conflict(table, feeds)
    return [c for c in found.values() if c]


def require_no_fan_in_conflict(config: RouterConfig) -> None:
    """Refuse, at the start of the job, `plan` and `check`, a config whose routes disagree about a table."""
    conflicts = fan_in_conflicts(config)
    if conflicts:
        more = f" (and {len(conflicts) - 1} more)" if len(conflicts) > 1 else ""
        raise ConfigError(conflicts[0] + more)


def commit_cadence(config: RouterConfig) -> list[list]:
    """Each route as the source's planner sees it (router/source/cadence.py): [topic regex, table,
    seconds, records]; the table is the route's template with {topic} at most, `route:<name>` when
    data names it, and the cadence the route's `commit_after`, else `tables.commit_after`."""
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    out = []
    for compiled, route in zip(routing.routes, config.routes):
        cadence = route.commit_after or config.tables.commit_after
        template = compiled.table_template
        table = f"route:{route.name}" if compiled.named_by_data \
            else template if "." in template else f"{routing.default_namespace}.{template}"
        out.append([route.topic, table, cadence.seconds, cadence.records])
    return out
