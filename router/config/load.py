"""YAML in, a validated `RouterConfig` out: one parser per section.

Everything is checked at load so a typo fails the deploy, not the third batch:
unknown keys are rejected with their path, values are typed and parsed once
(policies, registry settings, partition specs), and secrets never appear in a
message.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping

import yaml

from evolution.exceptions import PolicyConfigError
from evolution.layout_terms import parse_sort_term
from evolution.policy import PolicyOverrides, PolicySet
from registry.config import RegistryConfig
from registry.exceptions import RegistryConfigError
from router.config.model import (
    EVERY_BATCH, TRANSIENT_FILE_CODECS, CatalogConfig, CommitAfter, DlqConfig, JobConfig, KafkaConfig,
    MaintenanceConfig, MetricsConfig, RouteConfig, RouterConfig, TablesConfig,
)
from router.config.formats import parse_format, variant_route
from router.config.lineage import parse_lineage
from router.config.reader import Section, interpolate
from registry.formats import RAW
from router.exceptions import ConfigError
from router.table_writes import APPEND, TableWrite
from router.source.offsets import CATCH_UP_MODES

PARTITION_TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
PARTITION_PATTERN = re.compile(r"\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)\s*")

UNMATCHED_MODES = ("dlq", "drop")
TOMBSTONE_MODES = ("ignore", "dlq")
STARTING_OFFSETS = ("earliest", "latest")
TABLE_MODES = ("append", "upsert")
FORMAT_VERSIONS = (2, 3)
TRANSIENT_FILE_CODEC_NAMES = tuple(TRANSIENT_FILE_CODECS)
CDC_FORMATS = ("debezium",)

ROOT_KEYS = ("kafka", "registry", "catalog", "job", "tables", "routes", "evolution", "dlq", "maintenance",
             "unmatched", "tombstones", "lineage")


def load_config(path: str | os.PathLike) -> RouterConfig:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}:{line} invalid YAML: {getattr(exc, 'problem', exc)}") from None
    return parse_config(raw, source=path)


def parse_config(raw: Any, source: Path | None = None) -> RouterConfig:
    root = Section(interpolate(raw or {}), "config", ROOT_KEYS)
    base = source.parent if source else Path.cwd()
    routes = _routes(root.get("routes", [], list), root.get("tables"), base)
    return RouterConfig(
        kafka=_kafka(root.get("kafka")),
        registry=_registry(root.get("registry"), routes),
        catalog=_catalog(root.get("catalog"), base),
        job=_job(root.get("job"), base),
        tables=_tables(root.get("tables")),
        routes=routes,
        evolution=_evolution(root.get("evolution")),
        dlq=_dlq(root.get("dlq")),
        maintenance=_maintenance(root.get("maintenance")),
        unmatched=root.choice("unmatched", "dlq", UNMATCHED_MODES),
        tombstones=root.choice("tombstones", "ignore", TOMBSTONE_MODES),
        source=source,
        lineage=parse_lineage(root.get("lineage")),
    )


def _kafka(data: Any) -> KafkaConfig:
    s = Section(data, "kafka", ("bootstrap_servers", "client", "topics", "pattern", "starting_offsets",
                                "max_records_per_batch", "catch_up"))
    bootstrap = s.get("bootstrap_servers", None, str)
    if not bootstrap:
        raise ConfigError("kafka.bootstrap_servers: required")
    topics = tuple(s.get("topics", [], list))
    pattern = s.get("pattern", None, str)
    if not topics and not pattern:
        raise ConfigError("kafka: set `topics` (a list) or `pattern` (a regex)")
    if pattern:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"kafka.pattern: invalid regex {pattern!r}: {exc}") from None
    offsets = s.get("starting_offsets", "earliest", (str, Mapping))
    if isinstance(offsets, str) and offsets not in STARTING_OFFSETS:
        raise ConfigError(f"kafka.starting_offsets: {offsets!r} is not earliest, latest or a mapping")
    return KafkaConfig(bootstrap, s.mapping("client"), tuple(map(str, topics)), pattern, offsets,
                       s.positive("max_records_per_batch", 500_000), s.choice("catch_up", "turns", CATCH_UP_MODES))


def _registry(data: Any, routes: tuple[RouteConfig, ...]) -> RegistryConfig | None:
    """The registry; None when the config has none and no route needs one (every route reads raw,
    inferred or schema-file JSON, or Kafka Connect JSON)."""
    if data is None and routes and not any(r.format.framed or r.format.subject for r in routes):
        return None
    if not isinstance(data, Mapping) or not data.get("url"):
        needing = [r.name for r in routes if r.format.framed or r.format.subject]
        raise ConfigError("registry.url: required" + (f" (routes {', '.join(needing[:3])} read through the registry)"
                                                      if needing and data is None else ""))
    try:
        return RegistryConfig.from_dict(dict(data))
    except RegistryConfigError as exc:
        where = f"registry.{exc.key}" if exc.key else "registry"
        raise ConfigError(f"{where}: {exc.reason}") from None
    except TypeError as exc:
        raise ConfigError(f"registry: {exc}") from None


def _policy_path(where: str, spec: Any, exc: PolicyConfigError) -> str:
    return f"{where}.{exc.key}" if isinstance(spec, Mapping) and exc.key in spec else where


def _route_policy(spec: Any, where: str) -> PolicyOverrides | None:
    try:
        return PolicyOverrides.parse(spec)
    except PolicyConfigError as exc:
        raise ConfigError(f"{_policy_path(where, spec, exc)}: {exc.reason}") from None


def _evolution(data: Any) -> PolicySet:
    s = Section(data, "evolution", ("default", "topics"))
    default, topics = s.get("default", "evolve" if data is None else None), s.mapping("topics")
    try:
        return PolicySet.from_config(default, topics)
    except PolicyConfigError as exc:
        if exc.topic is not None:
            where, spec = f"evolution.topics[{exc.topic!r}]", topics.get(exc.topic)
        else:
            where, spec = "evolution.default", default
        raise ConfigError(f"{_policy_path(where, spec, exc)}: {exc.reason}") from None


def _catalog(data: Any, base: Path) -> CatalogConfig:
    s = Section(data, "catalog", ("name", "properties"))
    # an empty value (`${VAR:-}` with VAR unset) means "not set": pyiceberg then uses its
    # defaults, e.g. S3 keys from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
    props = {k: v for k, v in s.mapping("properties").items() if v is not None and v != ""} or {
        "type": "sql",
        "uri": f"sqlite:///{(base / '.icerouter' / 'catalog.db').resolve()}",
        "warehouse": (base / ".icerouter" / "warehouse").resolve().as_uri(),
    }
    if props.get("type") == "rest" and not props.get("uri"):
        raise ConfigError("catalog.properties.uri: required for a REST catalog (its http(s) endpoint)")
    for key in ("s3.path-style-access",):
        if key in props and str(props[key]).lower() not in ("true", "false"):
            raise ConfigError(f"catalog.properties.{key}: {props[key]!r} is not true or false")
    endpoint = str(props.get("s3.endpoint", ""))
    if endpoint and not re.match(r"https?://", endpoint):
        raise ConfigError(f"catalog.properties.s3.endpoint: {endpoint!r} must start with http:// or https://")
    return CatalogConfig(s.get("name", "icerouter", str), props)


def _job(data: Any, base: Path) -> JobConfig:
    s = Section(data, "job", ("name", "checkpoint", "trigger_seconds", "status_file", "commit_threads",
                              "commit_retries", "spark", "fused_read", "commit_in_tasks", "metrics",
                              "lease_seconds", "jvm_class_archive", "commit_consumer_group", "consumer_group"))
    name = s.get("name", "icerouter", str)
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise ConfigError(f"job.name: {name!r} may only contain letters, digits, '_', '.', '-'")
    checkpoint = s.get("checkpoint", ".icerouter/checkpoint", str)
    if "://" not in checkpoint:
        checkpoint = str((base / checkpoint).resolve())
    status = s.get("status_file", None, str)
    return JobConfig(name, checkpoint, float(s.positive("trigger_seconds", 10.0, float)),
                     str((base / status).resolve()) if status else None,
                     s.positive("commit_threads", 8), s.positive("commit_retries", 6), s.mapping("spark"),
                     bool(s.get("fused_read", True, bool)), bool(s.get("commit_in_tasks", True, bool)),
                     _metrics(s.get("metrics", None, dict)), _lease_seconds(s.get("lease_seconds", 60.0, (int, float))),
                     bool(s.get("jvm_class_archive", False, bool)),
                     bool(s.get("commit_consumer_group", True, bool)), _group_id(s.get("consumer_group", None, str)))


def _group_id(value: str | None) -> str | None:
    """A Kafka group id: any non-empty string up to 249 characters without control characters."""
    if value is not None and (not value.strip() or len(value) > 249 or any(ord(c) < 32 for c in value)):
        raise ConfigError(f"job.consumer_group: {value!r} is not a usable group id (1-249 printable characters)")
    return value


def _lease_seconds(value: float) -> float:
    if value < 0 or (0 < value < 3):
        raise ConfigError(f"job.lease_seconds: {value} (0 turns the lease off; otherwise at least 3 s)")
    return float(value)


def _metrics(data: Any) -> MetricsConfig:
    s = Section(data, "job.metrics", ("port", "host"))
    port = s.get("port", None, int)
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"job.metrics.port: {port} is not a TCP port (0-65535; 0 picks a free one)")
    return MetricsConfig(port, s.get("host", "0.0.0.0", str))


TABLES_KEYS = ("auto_create", "default_namespace", "allowed_namespaces", "partition_by", "properties",
               "case_sensitive", "metadata_columns", "mode", "commit_after", "format_version", "sort_by")


def _tables(data: Any) -> TablesConfig:
    s = Section(data, "tables", TABLES_KEYS)
    given = s.mapping("properties").get("format-version")
    if given is not None and str(given) != str(s.get("format_version", 2)):
        raise ConfigError(f"tables.properties.format-version: {given!r}; set tables.format_version instead "
                          "(routes may override it)")
    return TablesConfig(bool(s.get("auto_create", True, bool)), s.get("default_namespace", "raw", str),
                        tuple(s.get("allowed_namespaces", [], list)),
                        _partition_by(s.get("partition_by", None, list), "tables.partition_by"),
                        {k: str(v) for k, v in s.mapping("properties").items()},
                        bool(s.get("case_sensitive", True, bool)), bool(s.get("metadata_columns", True, bool)),
                        s.choice("mode", "append", TABLE_MODES),
                        _commit_after(s.get("commit_after"), "tables.commit_after") or EVERY_BATCH,
                        _format_version(s.get("format_version", 2, int), "tables.format_version"),
                        _sort_by(s.get("sort_by", None, list), "tables.sort_by"))


def _commit_after(spec: Any, where: str) -> CommitAfter | None:
    """`commit_after: 60` (seconds), or a mapping of `seconds` and / or `records`; None: not given."""
    if spec is None:
        return None
    if isinstance(spec, bool):
        raise ConfigError(f"{where}: expected seconds or a mapping of seconds / records, got {spec!r}")
    if isinstance(spec, (int, float)):
        spec = {"seconds": spec}
    s = Section(spec, where, ("seconds", "records"))
    return CommitAfter(s.positive("seconds", None, float), s.positive("records", None, int))


def _format_version(value: int | None, where: str) -> int | None:
    """An Iceberg format version icerouter writes (None: not given)."""
    if value is not None and (isinstance(value, bool) or value not in FORMAT_VERSIONS):
        raise ConfigError(f"{where}: {value!r} is not one of {', '.join(map(str, FORMAT_VERSIONS))} "
                          "(3: deletion vectors and row lineage, docs/v3.md)")
    return value


def _sort_by(items: list | None, where: str) -> tuple[str, ...] | None:
    """Sort terms are checked at load (evolution/layout.py); None: not set, tables keep their order."""
    if items is None:
        return None
    for i, text in enumerate(items):
        try:
            parse_sort_term(text)
        except ValueError as exc:
            raise ConfigError(f"{where}[{i}]: {exc}") from None
    return tuple(map(str, items))


def _partition_by(items: list | None, where: str) -> tuple[str, ...] | None:
    """Partition specs are checked at load; whether the column exists is per table. None: not set."""
    if items is None:
        return None
    for i, text in enumerate(items):
        m = PARTITION_PATTERN.fullmatch(str(text))
        if not m or m.group(1) not in PARTITION_TRANSFORMS:
            raise ConfigError(f"{where}[{i}]: {text!r} is not one of {', '.join(PARTITION_TRANSFORMS)}(<column>)")
        if m.group(1) in ("bucket", "truncate") and m.group(2) is None:
            raise ConfigError(f"{where}[{i}]: {text!r} needs a width, e.g. {m.group(1)}(16, {m.group(3)})")
    return tuple(map(str, items))


def _routes(items: list, tables: Any, base: Path) -> tuple[RouteConfig, ...]:
    default_mode = Section(tables, "tables", TABLES_KEYS).choice("mode", "append", TABLE_MODES)
    tables_version = Section(tables, "tables", TABLES_KEYS).get("format_version", 2, int)
    routes = []
    for i, item in enumerate(items):
        where = f"routes[{i}]"
        s = Section(item, where, ("name", "topic", "headers", "fields", "table", "columns", "evolution",
                                  "partition_by", "mode", "key", "cdc", "sequence_by", "format", "commit_after",
                                  "format_version", "sort_by"))
        table = s.get("table", None, str)
        if not table:
            raise ConfigError(f"{where}.table: required (a table name or template such as raw.{{topic}})")
        topic = s.get("topic", None, str)
        for label, rx in [("topic", topic), *[(f"headers.{k}", v) for k, v in s.mapping("headers").items()]]:
            if rx is None:
                continue
            try:
                re.compile(str(rx))
            except re.error as exc:
                raise ConfigError(f"{where}.{label}: invalid regex {rx!r}: {exc}") from None
        columns = s.get("columns", None, list)
        partition_by = s.get("partition_by", None, list)
        fmt = parse_format(s.get("format"), f"{where}.format", base)
        write = _write(s, default_mode, columns)
        if fmt.kind == RAW and write.upsert:
            raise ConfigError(f"{where}.format: a raw route appends the bytes as they are (mode upsert and cdc "
                              "need decoded values)")
        route_version = _format_version(s.get("format_version", None, int), f"{where}.format_version")
        # router.decisions.wanted_format_version's rule (not imported: the configuration loads light)
        variant_route(fmt, write, s.mapping("fields"), where,
                       route_version if route_version is not None else tables_version, route_version is not None)
        routes.append(RouteConfig(
            name=s.get("name", f"route{i}", str), table=table, topic=topic,
            headers={k: str(v) for k, v in s.mapping("headers").items()}, fields=s.mapping("fields"),
            columns=tuple(map(str, columns)) if columns is not None else None,
            evolution=_route_policy(s.get("evolution"), f"{where}.evolution"),
            partition_by=_partition_by(partition_by, f"{where}.partition_by"),
            write=write, format=fmt, commit_after=_commit_after(s.get("commit_after"), f"{where}.commit_after"),
            format_version=route_version,
            sort_by=_sort_by(s.get("sort_by", None, list), f"{where}.sort_by")))
    names = [r.name for r in routes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"routes: duplicate route name {dupes[0]!r}")
    _same_mode_per_table(routes)
    return tuple(routes)


def _write(s: Section, default_mode: str, columns: list | None) -> TableWrite:
    """mode / key / cdc / sequence_by of one route: an upsert route is checked whole at load."""
    cdc = s.get("cdc", None, str)
    if cdc is not None and cdc not in CDC_FORMATS:
        raise ConfigError(f"{s.where}.cdc: {cdc!r} is not one of {', '.join(CDC_FORMATS)}")
    mode = s.choice("mode", "upsert" if cdc else default_mode, TABLE_MODES)
    if cdc and mode != "upsert":
        raise ConfigError(f"{s.where}.mode: a cdc route mirrors its source table, so its mode is upsert, not {mode!r}")
    key = s.get("key", None, (list, str))
    if isinstance(key, str):
        key = [key]
    sequence_by = s.get("sequence_by", None, str)
    if mode != "upsert":
        for name, value in (("key", key), ("sequence_by", sequence_by)):
            if value is not None:
                raise ConfigError(f"{s.where}.{name}: only an upsert route has one (set mode: upsert)")
        return APPEND
    if key is not None:
        if not key or not all(isinstance(k, str) and k for k in key):
            raise ConfigError(f"{s.where}.key: expected a column name or a list of them, got {key!r}")
        if len(set(key)) != len(key):
            raise ConfigError(f"{s.where}.key: column {sorted(k for k in key if key.count(k) > 1)[0]!r} given twice")
        if columns is not None:
            missing = [k for k in key if k.split(".")[0] not in columns]
            if missing:
                raise ConfigError(f"{s.where}.columns: the projection drops key column {missing[0]!r}")
    return TableWrite(mode, tuple(key) if key is not None else None, cdc, sequence_by)


def _same_mode_per_table(routes: list[RouteConfig]) -> None:
    """Routes that feed one named table (fan-in) must agree on how it is written."""
    seen: dict[str, RouteConfig] = {}
    for route in routes:
        if "{" in route.table:
            continue  # a template: decided per table when it is rendered
        first = seen.setdefault(route.table, route)
        if (first.write.mode, first.write.key) != (route.write.mode, route.write.key):
            raise ConfigError(f"routes: {first.name!r} and {route.name!r} both feed {route.table} but write it "
                              f"differently ({_how(first)} against {_how(route)})")
        if first.format_version != route.format_version:
            raise ConfigError(f"routes: {first.name!r} and {route.name!r} both feed {route.table} but ask for "
                              f"format_version {_version(first)} and {_version(route)}")


def _version(route: RouteConfig) -> str:
    return str(route.format_version) if route.format_version is not None else "(tables.format_version)"


def _how(route: RouteConfig) -> str:
    return f"mode {route.write.mode}" + (f" key {','.join(route.write.key)}" if route.write.key else "")


def _dlq(data: Any) -> DlqConfig:
    s = Section(data, "dlq", ("table", "topic"))
    return DlqConfig(s.get("table", "ops.dead_letters", str), s.get("topic", None, str))


def _maintenance(data: Any) -> MaintenanceConfig:
    s = Section(data, "maintenance", ("expire_every_commits", "retain_last_snapshots",
                                      "max_snapshot_age_seconds", "target_file_size_bytes",
                                      "orphan_min_age_seconds", "compact_interval_seconds",
                                      "compact_after_files", "merge_small_files_at", "transient_file_codec"))
    d = MaintenanceConfig()
    merge_at = s.non_negative("merge_small_files_at", d.merge_small_files_at)
    if merge_at == 1:
        raise ConfigError("maintenance.merge_small_files_at: must be 0 (never) or >= 2, got 1")
    return MaintenanceConfig(*(s.positive(k, getattr(d, k)) for k in (
        "expire_every_commits", "retain_last_snapshots", "max_snapshot_age_seconds",
        "target_file_size_bytes", "orphan_min_age_seconds", "compact_interval_seconds")),
        compact_after_files=s.non_negative("compact_after_files", d.compact_after_files),
        merge_small_files_at=merge_at,
        transient_file_codec=s.choice("transient_file_codec", d.transient_file_codec, TRANSIENT_FILE_CODEC_NAMES))
