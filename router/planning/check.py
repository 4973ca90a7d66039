"""Library behind `icerouter check`: the CI gate over a directory of schema files.

Per file: the registry's verdict for the subject (per-version endpoint, at the
subject's level, see ``CachedRegistry.compatibility``) and a plan per routed
table, taken by ``router.planning.plan.Planner`` exactly as `plan` and the job
decide. Verdicts and exit codes:

* 0 every schema is compatible (or a new subject) and no table plan is blocked;
* 1 something is blocked: the registry refuses the schema (incompatible or
  invalid) or a table's policy would refuse, drop or dead-letter its records;
* 3 nothing is blocked but something could not be decided: the registry or the
  catalog was unreachable, timed out or refused us.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence
from xml.etree import ElementTree as ET

from evolution.changes import EvolutionPlan
from evolution.exceptions import EvolutionError
from registry.client import CachedRegistry, get_registry
from registry.exceptions import RegistryError
from router.config import RouterConfig
from router.exceptions import ConfigError, ServiceUnavailable
from router.planning.plan import (
    AVRO, SCHEMA_SUFFIXES, Planner, Target, detect_schema_type, file_subject, map_schema, read_schema_file,
    subject_topic,
)
from router.planning.services import CatalogReader, registry_unavailable

__all__ = ["TableCheck", "CheckResult", "check_schema", "check_file", "render_check_text", "render_check_json",
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
    compatibility: str             # compatible | incompatible | new | invalid | undecided
    level: str | None = None
    messages: tuple[str, ...] = ()
    tables: tuple[TableCheck, ...] = field(default_factory=tuple)
    file: str | None = None

    @property
    def compatible(self) -> bool:
        return self.compatibility in ("compatible", "new")

    @property
    def blocked(self) -> bool:
        return self.compatibility in BLOCKING_VERDICTS or any(
            not t.ok and t.undecided is None for t in self.tables)

    @property
    def decided(self) -> bool:
        return self.compatibility != "undecided" and all(t.undecided is None for t in self.tables)

    @property
    def ok(self) -> bool:
        return not self.blocked and self.decided

    @property
    def verdict(self) -> str:
        return "blocked" if self.blocked else ("undecided" if not self.decided else "ok")

    def to_dict(self) -> dict[str, Any]:
        return {"subject": self.subject, "file": self.file, "schema_type": self.schema_type, "ok": self.ok,
                "verdict": self.verdict, "compatibility": self.compatibility, "level": self.level,
                "messages": list(self.messages), "tables": [t.to_dict() for t in self.tables]}


def check_schema(registry: CachedRegistry | None, subject: str, schema_str: str, schema_type: str,
                 targets: Sequence[Target], planner: Planner, *, catalog: CatalogReader | None = None,
                 unplannable: Sequence[tuple[str, str]] = (), registry_down: str | None = None,
                 catalog_down: str | None = None, file: str | None = None) -> CheckResult:
    """Registry verdict for ``subject`` plus a plan per target table.

    ``registry_down`` / ``catalog_down``: why a service is already known to be
    unreachable (its checks are then undecided without asking again).
    """
    kind = (schema_type or AVRO).upper()
    level, messages = None, ()
    if registry_down is not None or registry is None:
        verdict, messages = "undecided", (registry_down or "no registry to ask",)
    else:
        try:
            answer = registry.compatibility(subject, schema_str, kind)
            verdict, level, messages = answer.verdict, answer.level, answer.messages
        except RegistryError as exc:
            verdict, messages = "undecided", (str(registry_unavailable(exc, registry.config.url)),)
    checks = []
    try:
        mapped = map_schema(schema_str, kind, source=subject)
    except EvolutionError as exc:
        mapped, reason = None, str(exc)
    for target in targets:
        if mapped is None:
            checks.append(TableCheck(target.table, error=reason))
            continue
        if catalog is None:
            checks.append(TableCheck(target.table, undecided=catalog_down or "no catalog to ask"))
            continue
        try:
            current = catalog.current(target.table)
        except ServiceUnavailable as exc:
            checks.append(TableCheck(target.table, undecided=str(exc)))
            continue
        plan = planner.plan(current, mapped.schema, target, schema_type=kind, schema_str=schema_str,
                            source=subject)
        checks.append(TableCheck(target.table, plan))
    checks += [TableCheck(label, skipped=reason) for label, reason in unplannable]
    return CheckResult(subject, kind, verdict, level, tuple(messages), tuple(checks), file)


def render_check_text(results: Iterable[CheckResult]) -> str:
    lines = []
    for r in results:
        level = f" at {r.level}" if r.level else ""
        source = f" [{r.file}]" if r.file else ""
        lines.append(f"subject {r.subject} ({r.schema_type}){source}: {r.verdict.upper()} - "
                     f"registry: {r.compatibility}{level}")
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


def check_file(path: Path) -> tuple[str, str] | CheckResult:
    """(text, schema type) of a schema file, or an `invalid` result naming the file."""
    subject = file_subject(path)
    try:
        text = read_schema_file(path)
    except ConfigError as exc:
        return CheckResult(subject, "unknown", "invalid", messages=(exc.message,), file=str(path))
    return text, detect_schema_type(text, path.suffix)


def check_command(config: RouterConfig, schemas_dir: str, fmt: str = "text") -> tuple[str, int, list[str]]:
    """CI gate over a directory of schema files; -> (report, exit code, one line per unreachable service)."""
    renderers = {"text": render_check_text, "json": render_check_json, "junit": render_check_junit}
    if fmt not in renderers:
        raise ConfigError(f"unknown format {fmt!r} (text, json, junit)")
    root = Path(schemas_dir)
    if not root.is_dir():
        raise ConfigError(f"--schemas: {schemas_dir} is not a directory")
    files = sorted(p for p in root.iterdir() if p.suffix.lower() in SCHEMA_SUFFIXES and p.is_file())
    if not files:
        raise ConfigError(f"--schemas: no .avsc or .json files in {schemas_dir}")
    registry = get_registry(config.registry)
    planner = Planner(config, registry)
    down: dict[str, str] = {}
    try:
        catalog: CatalogReader | None = CatalogReader.open(config.catalog)
    except ServiceUnavailable as exc:
        catalog, down["catalog"] = None, str(exc)
    results = []
    for path in files:
        loaded = check_file(path)
        if isinstance(loaded, CheckResult):
            results.append(loaded)
            continue
        text, kind = loaded
        subject = file_subject(path)
        targets, unplannable = planner.targets_for_topic(subject_topic(subject))
        result = check_schema(registry, subject, text, kind, targets, planner, catalog=catalog,
                              unplannable=unplannable, registry_down=down.get("registry"),
                              catalog_down=down.get("catalog"), file=str(path))
        if result.compatibility == "undecided" and "registry" not in down:
            down["registry"] = result.messages[0]  # do not wait for it once per file
        lost = next((t.undecided for t in result.tables if t.undecided), None)
        if lost is not None and "catalog" not in down:
            catalog, down["catalog"] = None, lost
        results.append(result)
    return renderers[fmt](results), exit_code(results), list(down.values())
