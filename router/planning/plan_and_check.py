"""Library behind `icerouter plan` (dry run) and `icerouter check` (CI gate).

Both are read-only: they load tables and ask the registry, never write.
``plan`` shows what the job would do to each table for a schema; ``check``
adds the registry's own compatibility verdict for the subject (at the level
configured for it, transitive levels included) so a CI pipeline can refuse a
schema before it is registered. Exit rule: 0 when everything is fine, 1 when
any plan is blocked or any schema is incompatible.

Conventions: subjects follow the TopicNameStrategy (``<topic>-value``); in a
``--schemas`` directory, ``<name>.avsc`` is Avro and ``<name>.json`` is JSON
Schema unless it parses as an Avro record; a file name without ``-value``/
``-key`` names the topic and the subject is ``<name>-value``. Each (subject,
table) pair is planned on its own: fan-in merges happen in the job.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence
from urllib.parse import quote
from xml.etree import ElementTree as ET

from confluent_kafka.schema_registry import Schema as RegistrySchema
from confluent_kafka.schema_registry.error import SchemaRegistryError
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema

from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.changes import EvolutionPlan, MappedSchema
from evolution.exceptions import EvolutionError
from evolution.jsonschema import jsonschema_to_iceberg
from evolution.plan import plan_evolution
from evolution.policy import EvolutionPolicy
from registry.client import get_registry
from router.catalog import get_catalog
from router.exceptions import ConfigError
from router.routing import RoutingTable

__all__ = ["map_schema", "plan_for_schema", "render_plan_text", "render_plan_json", "CheckResult",
           "TableCheck", "check_schema", "render_check_text", "render_check_json", "render_check_junit",
           "exit_code", "plan_command", "check_command", "subject_topic", "detect_schema_type"]

AVRO, JSON_SCHEMA = "AVRO", "JSON"
SUBJECT_NOT_FOUND = {40401}
NO_SUBJECT_CONFIG = {40401, 40408}
SCHEMA_SUFFIXES = {".avsc": AVRO, ".avro": AVRO, ".json": None}


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


def _load_current(catalog: Any, identifier: str):
    try:
        return catalog.load_table(identifier).schema()
    except NoSuchTableError:
        return None


def plan_for_schema(catalog: Any, table_identifier: str, schema_str: str, schema_type: str = AVRO,
                    policy: EvolutionPolicy | None = None, case_sensitive: bool = True) -> EvolutionPlan:
    """Plan for one schema against one table (a new-table plan if it does not exist)."""
    mapped = map_schema(schema_str, schema_type)
    return plan_evolution(_load_current(catalog, table_identifier), [mapped], policy or EvolutionPolicy(),
                          case_sensitive=case_sensitive, table=table_identifier)


def render_plan_text(plans: Iterable[EvolutionPlan]) -> str:
    return "\n\n".join(p.describe() for p in plans) or "no tables to plan"


def render_plan_json(plans: Iterable[EvolutionPlan]) -> str:
    plans = list(plans)
    return json.dumps({"blocked": any(p.blocked for p in plans), "plans": [p.to_dict() for p in plans]},
                      indent=2, sort_keys=True)


# --- check ----------------------------------------------------------------------------
@dataclass(frozen=True)
class TableCheck:
    table: str
    plan: EvolutionPlan | None = None
    error: str | None = None      # unmappable schema...
    skipped: str | None = None    # why it could not be planned (table name depends on data)

    @property
    def ok(self) -> bool:
        if self.skipped is not None:
            return True
        return self.error is None and self.plan is not None and not self.plan.blocked

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "ok": self.ok, "error": self.error, "skipped": self.skipped,
                "plan": self.plan.to_dict() if self.plan else None}


@dataclass(frozen=True)
class CheckResult:
    subject: str
    schema_type: str
    compatibility: str             # compatible | incompatible | new | error
    level: str | None = None
    messages: tuple[str, ...] = ()
    tables: tuple[TableCheck, ...] = field(default_factory=tuple)

    @property
    def compatible(self) -> bool:
        return self.compatibility in ("compatible", "new")

    @property
    def ok(self) -> bool:
        return self.compatible and all(t.ok for t in self.tables)

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "schema_type": self.schema_type, "ok": self.ok,
                "compatibility": self.compatibility, "level": self.level, "messages": list(self.messages),
                "tables": [t.to_dict() for t in self.tables]}


def _error_code(exc: Exception) -> int | None:
    return getattr(exc, "error_code", None)


def _compatibility_level(client: Any, subject: str) -> str:
    try:
        return client.get_compatibility(subject)
    except SchemaRegistryError as exc:
        if _error_code(exc) not in NO_SUBJECT_CONFIG:
            raise
        return client.get_compatibility()


def _test_compatibility(client: Any, subject: str, schema: Any) -> tuple[bool, tuple[str, ...]]:
    """Against every version the subject's level asks for (Confluent's versionless endpoint)."""
    rest = getattr(client, "_rest_client", None)
    if rest is not None:
        response = rest.post(f"compatibility/subjects/{quote(subject, safe='')}/versions?verbose=true",
                             body=schema.to_dict())
        return bool(response.get("is_compatible")), tuple(response.get("messages") or ())
    return bool(client.test_compatibility(subject, schema, verbose=True)), ()


def check_schema(registry_client: Any, subject: str, schema_str: str, schema_type: str,
                 tables: Sequence[tuple[str, EvolutionPolicy | None]], *, catalog: Any = None,
                 case_sensitive: bool = True, unplannable: Sequence[tuple[str, str]] = ()) -> CheckResult:
    """Registry compatibility of ``schema_str`` for ``subject`` plus a plan per table.

    ``unplannable``: (label, reason) pairs reported as skipped, e.g. routes
    whose table name depends on record data (they cannot be planned offline).
    """
    kind = (schema_type or AVRO).upper()
    level: str | None = None
    messages: tuple[str, ...] = ()
    try:
        registry_client.get_versions(subject)
        level = _compatibility_level(registry_client, subject)
        ok, messages = _test_compatibility(registry_client, subject, RegistrySchema(schema_str, kind))
        verdict = "compatible" if ok else "incompatible"
    except SchemaRegistryError as exc:
        if _error_code(exc) in SUBJECT_NOT_FOUND:
            verdict = "new"
        else:
            verdict, messages = "error", (f"registry error {_error_code(exc)}: {exc}",)
    checks = []
    try:
        mapped = map_schema(schema_str, kind, source=subject)
    except EvolutionError as exc:
        mapped, reason = None, str(exc)
    for identifier, policy in tables:
        if mapped is None:
            checks.append(TableCheck(identifier, error=reason))
            continue
        current = _load_current(catalog, identifier) if catalog is not None else None
        plan = plan_evolution(current, [mapped], policy or EvolutionPolicy(),
                              case_sensitive=case_sensitive, table=identifier)
        checks.append(TableCheck(identifier, plan))
    checks += [TableCheck(label, skipped=reason) for label, reason in unplannable]
    return CheckResult(subject, kind, verdict, level, messages, tuple(checks))


def render_check_text(results: Iterable[CheckResult]) -> str:
    lines = []
    for r in results:
        level = f" at {r.level}" if r.level else ""
        lines.append(f"subject {r.subject} ({r.schema_type}): {'OK' if r.ok else 'FAILED'} - "
                     f"registry: {r.compatibility}{level}")
        lines += [f"  registry: {m}" for m in r.messages]
        for t in r.tables:
            if t.skipped:
                lines.append(f"  {t.table}: skipped: {t.skipped}")
            elif t.error:
                lines.append(f"  table {t.table}: error: {t.error}")
            else:
                lines += ["  " + line for line in t.plan.describe().splitlines()]
        if not r.tables:
            lines.append("  (no routed tables)")
    return "\n".join(lines) or "no schemas to check"


def render_check_json(results: Iterable[CheckResult]) -> str:
    results = list(results)
    return json.dumps({"ok": all(r.ok for r in results), "results": [r.to_dict() for r in results]},
                      indent=2, sort_keys=True)


def render_check_junit(results: Iterable[CheckResult]) -> str:
    """JUnit XML: one testcase per subject x table (a `registry` case if no table)."""
    results = list(results)
    suite = ET.Element("testsuite", name="icerouter.check")
    failures = tests = 0
    for r in results:
        for t in r.tables or (None,):
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=r.subject,
                                 name=t.table if t is not None else "registry")
            problems = []
            if not r.compatible:
                problems.append(f"registry: {r.compatibility}" + "".join(f"\n{m}" for m in r.messages))
            if t is not None and not t.ok:
                problems.append(f"table {t.table}: " + (t.error or t.plan.describe()))
            if problems:
                failures += 1
                failure = ET.SubElement(case, "failure", message=problems[0].splitlines()[0])
                failure.text = "\n".join(problems)
            elif t is not None and t.skipped:
                ET.SubElement(case, "skipped", message=t.skipped)
            elif t is not None and t.plan is not None:
                ET.SubElement(case, "system-out").text = t.plan.describe()
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(1 for r in results for t in r.tables if t.skipped)))
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def exit_code(results_or_plans: Iterable[CheckResult | EvolutionPlan]) -> int:
    """0 when every schema is compatible and no plan is blocked, else 1."""
    for item in results_or_plans:
        if isinstance(item, CheckResult) and not item.ok:
            return 1
        if isinstance(item, EvolutionPlan) and item.blocked:
            return 1
    return 0


# --- config-driven commands (called by router.cli) ---------------------------------------
def _tables_for_topic(config: Any, topic: str) -> tuple[list[tuple[str, EvolutionPolicy, Any]],
                                                         list[tuple[str, str]]]:
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    policies = config.policies()
    planned, unplannable = [], []
    for route, table in routing.static_tables_for_topic(topic):
        if table is None:
            unplannable.append((f"route {route.name}", "table name depends on record data; "
                                "plan it with --schema-file and --table"))
            continue
        planned.append((table, policies.resolve(topic, route.evolution), route))
    return planned, unplannable


def _project(mapped: MappedSchema, columns: Sequence[str] | None) -> MappedSchema:
    if not columns:
        return mapped
    keep = [f for f in mapped.schema.fields if f.name in set(columns)]
    return MappedSchema(Schema(*keep), mapped.aliases, mapped.source)


def _format(fmt: str, plans: list[EvolutionPlan]) -> str:
    if fmt == "json":
        return render_plan_json(plans)
    if fmt == "text":
        return render_plan_text(plans)
    raise ConfigError(f"unknown format {fmt!r} (text, json)")


def plan_command(config: Any, subjects: Sequence[str] = (), schema_file: str | None = None,
                 table: str | None = None, fmt: str = "text") -> tuple[str, bool]:
    """Dry run for registry subjects (latest version) or a local schema file; -> (output, blocked)."""
    catalog = get_catalog(config.catalog)
    case_sensitive = config.tables.case_sensitive
    plans: list[EvolutionPlan] = []
    notes: list[str] = []
    if schema_file:
        text = _read(schema_file)
        kind = detect_schema_type(text, Path(schema_file).suffix)
        policy = config.policies().default
        plans.append(plan_for_schema(catalog, table, text, kind, policy, case_sensitive))
    if subjects:
        registry = get_registry(config.registry_config())
        for subject in subjects:
            latest = registry.latest(subject)
            art = registry.artifacts(latest.schema_id)
            aliases = avro_field_aliases(art.schema_str) if art.schema_type == AVRO else {}
            mapped = MappedSchema(art.iceberg_schema, aliases, f"{subject}:{latest.version}")
            targets, unplannable = _tables_for_topic(config, subject_topic(subject))
            notes += [f"{subject}: {label}: {reason}" for label, reason in unplannable]
            for identifier, policy, route in targets:
                plans.append(plan_evolution(_load_current(catalog, identifier), [_project(mapped, route.columns)],
                                            policy, case_sensitive=case_sensitive, table=identifier))
    output = _format(fmt, plans)
    if notes and fmt == "text":
        output += "\n\n" + "\n".join(f"note: {n}" for n in notes)
    return output, exit_code(plans) == 1


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read schema file {path}: {exc.strerror}") from None


def check_command(config: Any, schemas_dir: str, fmt: str = "text") -> tuple[str, bool]:
    """CI gate over a directory of schema files; -> (output, failed)."""
    root = Path(schemas_dir)
    if not root.is_dir():
        raise ConfigError(f"--schemas: {schemas_dir} is not a directory")
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in SCHEMA_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"--schemas: no .avsc or .json files in {schemas_dir}")
    client = get_registry(config.registry_config()).client
    catalog = get_catalog(config.catalog)
    results = []
    for path in files:
        text = _read(path)
        kind = detect_schema_type(text, path.suffix)
        subject = path.stem if path.stem.endswith(("-value", "-key")) else f"{path.stem}-value"
        targets, unplannable = _tables_for_topic(config, subject_topic(subject))
        results.append(check_schema(client, subject, text, kind, [(t, p) for t, p, _ in targets],
                                    catalog=catalog, case_sensitive=config.tables.case_sensitive,
                                    unplannable=unplannable))
    renderers = {"text": render_check_text, "json": render_check_json, "junit": render_check_junit}
    if fmt not in renderers:
        raise ConfigError(f"unknown format {fmt!r} (text, json, junit)")
    return renderers[fmt](results), exit_code(results) == 1
