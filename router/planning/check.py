"""Library behind `icerouter check`: the CI gate over a directory of schema files.

Per file: the registry's verdict for the subject (per-version endpoint, at the
subject's level, see ``CachedRegistry.compatibility``) and a plan per routed
table, taken by ``router.planning.plan.Planner`` exactly as `plan` and the job
decide. Verdicts and exit codes:

* 0 every schema is compatible (or a new subject) and no table plan is blocked;
* 1 something is blocked: the schema file is not a schema (binary, not JSON), the
  registry refuses the schema (incompatible or invalid), or the job would not
  write its records to a table (a policy refuses, drops or dead-letters them, no
  route takes the topic, a table name or fan-in the job refuses);
* 3 nothing is blocked but something could not be decided: the registry or the
  catalog was unreachable, timed out or refused us.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence
from xml.etree import ElementTree as ET

from evolution.changes import EvolutionPlan
from registry.client import CachedRegistry, get_registry
from registry.exceptions import RegistryError
from router.config import RouterConfig
from router.exceptions import ConfigError, ServiceUnavailable
from router.planning.inputs import SchemaInput, load_schema_file, schema_input
from router.planning.plan import AVRO, SCHEMA_SUFFIXES, Planner, Target, file_subject, subject_topic
from router.planning.services import CatalogReader, registry_unavailable

__all__ = ["TableCheck", "CheckResult", "check_schema", "render_check_text", "render_check_json",
           "render_check_junit", "exit_code", "check_command", "EXIT_OK", "EXIT_BLOCKED", "EXIT_UNDECIDED"]

EXIT_OK, EXIT_BLOCKED, EXIT_UNDECIDED = 0, 1, 3
BLOCKING_VERDICTS = ("incompatible", "invalid")


@dataclass(frozen=True)
class TableCheck:
    table: str
    plan: EvolutionPlan | None = None
    error: str | None = None      # the schema cannot be mapped to Iceberg
    skipped: str | None = None    # cannot be planned offline (table name depends on data)
    undecided: str | None = None  # the catalog could not be asked

    @property
    def ok(self) -> bool:
        if self.skipped is not None:
            return True
        return self.error is None and self.undecided is None and self.plan is not None and not self.plan.blocked

    @property
    def verdict(self) -> str:
        if self.skipped is not None:
            return "skipped"
        if self.undecided is not None:
            return "undecided"
        return "error" if self.error is not None else self.plan.status

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "ok": self.ok, "verdict": self.verdict, "error": self.error,
                "skipped": self.skipped, "undecided": self.undecided,
                "plan": self.plan.to_dict() if self.plan else None}


@dataclass(frozen=True)
class CheckResult:
    subject: str
    schema_type: str
    compatibility: str             # compatible | incompatible | new | invalid | undecided | not_asked
    level: str | None = None
    messages: tuple[str, ...] = ()
    tables: tuple[TableCheck, ...] = field(default_factory=tuple)
    file: str | None = None
    problem: str | None = None     # the schema cannot be used at all (not text, not JSON, recursive...)

    @property
    def compatible(self) -> bool:
        return self.compatibility in ("compatible", "new")

    @property
    def blocked(self) -> bool:
        return self.problem is not None or self.compatibility in BLOCKING_VERDICTS or any(
            not t.ok and t.undecided is None for t in self.tables)

    @property
    def decided(self) -> bool:
        return self.compatibility != "undecided" and all(t.undecided is None for t in self.tables)

    @property
    def blocked_by(self) -> list[str]:
        """Which sides block: the schema itself, the registry, tables (by name and status)."""
        sides = ["the schema"] if self.problem is not None and not self.tables else []
        if self.compatibility in BLOCKING_VERDICTS:
            sides.append(f"the registry ({self.compatibility})")
        sides += [f"table {t.table} ({t.verdict})" for t in self.tables if not t.ok and t.undecided is None]
        return sides

    @property
    def ok(self) -> bool:
        return not self.blocked and self.decided

    @property
    def verdict(self) -> str:
        return "blocked" if self.blocked else ("undecided" if not self.decided else "ok")

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "file": self.file, "schema_type": self.schema_type, "ok": self.ok,
                "verdict": self.verdict, "compatibility": self.compatibility, "level": self.level,
                "messages": list(self.messages), "problem": self.problem, "blocked_by": self.blocked_by,
                "tables": [t.to_dict() for t in self.tables]}


def check_schema(registry: CachedRegistry | None, subject: str, schema_str: str | None, schema_type: str,
                 targets: Sequence[Target], planner: Planner, *, catalog: CatalogReader | None = None,
                 unplannable: Sequence[tuple[str, str]] = (), registry_down: str | None = None,
                 catalog_down: str | None = None, file: str | None = None,
                 loaded: SchemaInput | None = None, declared: bool = False) -> CheckResult:
    """Registry verdict for ``subject`` plus a plan per target table.

    ``loaded``: the schema already read (a file); else ``schema_str`` is mapped here.
    ``registry_down`` / ``catalog_down``: why a service is already known to be
    unreachable (its checks are then undecided without asking again).
    """
    kind = (schema_type or AVRO).upper()
    if loaded is None:
        loaded = schema_input(schema_str or "", kind, subject, f"subject {subject}")
    level, messages = None, ()
    if not loaded.readable:
        verdict = "not_asked"  # not a schema document: nothing for the registry to judge
    elif declared:
        verdict = "declared"  # a route's own schema file (format json): no subject, the tables decide
    elif registry_down is not None or registry is None:
        verdict, messages = "undecided", (registry_down or "no registry to ask",)
    else:
        try:
            answer = registry.compatibility(subject, loaded.text, kind)
            verdict, level, messages = answer.verdict, answer.level, answer.messages
        except RegistryError as exc:
            verdict, messages = "undecided", (str(registry_unavailable(exc, registry.config.url)),)
    checks = []
    for target in targets:
        if target.refusal is not None or loaded.problem is not None:
            checks.append(TableCheck(target.table, planner.plan_input(None, loaded, target)))
            continue
        if catalog is None:
            checks.append(TableCheck(target.table, undecided=catalog_down or "no catalog to ask"))
            continue
        try:
            current, layout = catalog.state(target.table)
        except ServiceUnavailable as exc:
            checks.append(TableCheck(target.table, undecided=str(exc)))
            continue
        plan = planner.plan(current, loaded.mapped.schema, target, schema_type=kind, schema_str=loaded.text,
                            source=subject, current_layout=layout)
        checks.append(TableCheck(target.table, plan))
    checks += [TableCheck(label, skipped=reason) for label, reason in unplannable]
    return CheckResult(subject, loaded.kind if not loaded.readable else kind, verdict, level, tuple(messages),
                       tuple(checks), file, loaded.problem)


def render_check_text(results: Iterable[CheckResult]) -> str:
    lines = []
    for r in results:
        level = f" at {r.level}" if r.level else ""
        source = f" [{r.file}]" if r.file else ""
        by = f" by {', '.join(r.blocked_by)}" if r.blocked else ""
        lines.append(f"subject {r.subject} ({r.schema_type}){source}: {r.verdict.upper()}{by} - "
                     f"registry: {r.compatibility.replace('_', ' ')}{level}")
        if r.problem:
            lines.append(f"  schema: {r.problem}")
        lines += [f"  registry: {m}" for m in r.messages]
        for t in r.tables:
            if t.skipped:
                lines.append(f"  {t.table}: skipped: {t.skipped}")
            elif t.undecided:
                lines.append(f"  table {t.table}: undecided: {t.undecided}")
            elif t.error:
                lines.append(f"  table {t.table}: error: {t.error}")
            else:
                lines += ["  " + line for line in t.plan.describe().splitlines()]
        if not r.tables:
            lines.append("  (no routed tables)")
    return "\n".join(lines) or "no schemas to check"


def render_check_json(results: Iterable[CheckResult]) -> str:
    results = list(results)
    return json.dumps({"ok": all(r.ok for r in results), "exit_code": exit_code(results),
                       "results": [r.to_dict() for r in results]}, indent=2, sort_keys=True)


def _registry_text(r: CheckResult) -> str:
    level = f" at {r.level}" if r.level else ""
    return f"registry: {r.compatibility}{level}" + "".join(f"\n{m}" for m in r.messages)


def render_check_junit(results: Iterable[CheckResult]) -> str:
    """JUnit XML: one testcase per subject x table (a `registry` case if no table).

    A blocked case is a <failure>, an undecided one an <error> (CI tools show
    them apart), a table that cannot be planned offline <skipped>."""
    results = list(results)
    suite = ET.Element("testsuite", name="icerouter.check")
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for r in results:
        for t in r.tables or (None,):
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=r.subject,
                                 name=t.table if t is not None else "registry")
            if r.file:
                case.set("file", r.file)
            problems = [_registry_text(r)] if r.compatibility in BLOCKING_VERDICTS else []
            if t is not None and not t.ok and t.undecided is None:
                problems.append(f"table {t.table}: error: {t.error}" if t.error else t.plan.describe())
                if r.compatibility == "undecided":  # blocked by the table whatever the registry would say
                    problems.append("registry: undecided: " + (r.messages[0] if r.messages else "not asked"))
            undecided = [_registry_text(r)] if r.compatibility == "undecided" else []
            if t is not None and t.undecided:
                undecided.append(f"table {t.table}: undecided: {t.undecided}")
            if problems:
                counts["failures"] += 1
                ET.SubElement(case, "failure", message=problems[0].splitlines()[0]).text = "\n".join(problems)
            elif undecided:
                counts["errors"] += 1
                ET.SubElement(case, "error", message="could not decide: " + undecided[0].splitlines()[0],
                              type="undecided").text = "\n".join(undecided)
            elif t is not None and t.skipped:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=t.skipped)
            else:
                body = _registry_text(r) + ("\n" + t.plan.describe() if t is not None and t.plan else "")
                ET.SubElement(case, "system-out").text = body
    for key, value in counts.items():
        suite.set(key, str(value))
    root = ET.Element("testsuites")
    root.append(suite)
    return ET.tostring(root, encoding="unicode", xml_declaration=True)


def exit_code(results: Iterable[CheckResult]) -> int:
    """1 if anything is blocked, else 3 if anything could not be decided, else 0."""
    results = list(results)
    if any(r.blocked for r in results):
        return EXIT_BLOCKED
    return EXIT_OK if all(r.decided for r in results) else EXIT_UNDECIDED


def declared_schema_topics(config: RouterConfig) -> dict[str, dict[str, set[str]]]:
    """Schema file name -> topic -> the routes that read the topic with that declared JSON Schema
    (format json + schema_file); the topics are kafka.topics the routes take."""
    out: dict[str, dict[str, set[str]]] = {}
    for route in config.routes:
        if route.format.kind != "json" or not route.format.schema_source:
            continue
        topics = [t for t in config.kafka.topics if route.topic is None or re.fullmatch(route.topic, t)]
        if not topics and route.topic and re.escape(route.topic) == route.topic:
            topics = [route.topic]
        for topic in topics:
            out.setdefault(Path(route.format.schema_source).name, {}).setdefault(topic, set()).add(route.name)
    return out


def check_command(config: RouterConfig, schemas_dir: str, fmt: str = "text") -> tuple[str, int, list[str]]:
    """CI gate over a directory of schema files; -> (report, exit code, one stderr line per unusable
    schema file and per unreachable service)."""
    renderers = {"text": render_check_text, "json": render_check_json, "junit": render_check_junit}
    if fmt not in renderers:
        raise ConfigError(f"unknown format {fmt!r} (text, json, junit)")
    root = Path(schemas_dir)
    if not root.is_dir():
        raise ConfigError(f"--schemas: {schemas_dir} is not a directory")
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in SCHEMA_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"--schemas: no .avsc or .json files in {schemas_dir}")
    registry = get_registry(config.registry) if config.registry is not None else None
    planner = Planner(config, registry)
    declared = declared_schema_topics(config)
    down: dict[str, str] = {}
    try:
        catalog: CatalogReader | None = CatalogReader.open(config.catalog)
    except ServiceUnavailable as exc:
        catalog, down["catalog"] = None, str(exc)
    results, problems = [], []
    for path in files:
        loaded = load_schema_file(path)
        if loaded.problem:
            problems.append(loaded.problem)
        subject = file_subject(path)
        topics = declared.get(path.name)
        if topics is not None:  # the new version of a route's declared JSON Schema: its routes' tables
            found = [planner.targets_for_topic(t) for t in topics]
            targets = [t for ts, _ in found for t in ts if t.route in topics[t.topic]]
            unplannable = [u for _, us in found for u in us]
        else:
            targets, unplannable = planner.targets_for_topic(subject_topic(subject))
        result = check_schema(registry, subject, loaded.text, loaded.kind, targets, planner, catalog=catalog,
                              unplannable=unplannable, registry_down=down.get("registry"),
                              catalog_down=down.get("catalog"), file=str(path), loaded=loaded,
                              declared=topics is not None)
        if result.compatibility == "undecided" and "registry" not in down:
            down["registry"] = result.messages[0]  # do not wait for it once per file
        lost = next((t.undecided for t in result.tables if t.undecided), None)
        if lost is not None and "catalog" not in down:
            catalog, down["catalog"] = None, lost
        results.append(result)
    return renderers[fmt](results), exit_code(results), problems + list(down.values())
