"""The job configuration: YAML in, typed and validated objects out.

Everything is checked at load so a typo fails the deploy, not the third batch:
unknown keys are rejected with their path, `${ENV}` / `${ENV:-default}` is
interpolated, and secrets (passwords, tokens, SASL/SSL keys) never appear in a
repr or an error message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml
from pyiceberg.catalog import load_catalog

from evolution.exceptions import PolicyConfigError
from evolution.policy import PolicySet, parse_policy_spec
from registry.config import RegistryConfig
from registry.exceptions import RegistryConfigError
from router.exceptions import ConfigError
from router.masking import mask_secrets, mask_url
from router.source.offsets import CATCH_UP_MODES

PARTITION_TRANSFORMS = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
PARTITION_PATTERN = re.compile(r"\s*(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)\s*")
ENV_PATTERN = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-(.*?))?\}")

UNMATCHED_MODES = ("dlq", "drop")
TOMBSTONE_MODES = ("ignore", "dlq")
STARTING_OFFSETS = ("earliest", "latest")


class _Section:
    """Reads one mapping of the config file and remembers where it is, for messages."""

    def __init__(self, data: Any, where: str, allowed: tuple[str, ...]):
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise ConfigError(f"{where}: expected a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - set(allowed))
        if unknown:
            raise ConfigError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(allowed)})")
        self.data, self.where = data, where

    def get(self, key: str, default: Any = None, kind: type | tuple[type, ...] | None = None) -> Any:
        value = self.data.get(key, default)
        if value is not None and kind is not None and not isinstance(value, kind):
            names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
            raise ConfigError(f"{self.where}.{key}: expected {names}, got {value!r}")
        return value

    def choice(self, key: str, default: str, choices: tuple[str, ...]) -> str:
        value = self.get(key, default, str)
        if value not in choices:
            raise ConfigError(f"{self.where}.{key}: {value!r} is not one of {', '.join(choices)}")
        return value

    def positive(self, key: str, default: float | int | None, kind: type = int) -> Any:
        value = self.get(key, default, (int, float) if kind is float else int)
        if value is not None and value <= 0:
            raise ConfigError(f"{self.where}.{key}: must be > 0, got {value!r}")
        return value

    def non_negative(self, key: str, default: int) -> int:
        value = self.get(key, default, int)
        if value < 0:
            raise ConfigError(f"{self.where}.{key}: must be >= 0, got {value!r}")
        return value

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.get(key, {}, Mapping)
        return {str(k): v for k, v in value.items()}


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str
    client: Mapping[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: Any = "earliest"
    max_records_per_batch: int | None = 500_000
    catch_up: str = "turns"

    def __repr__(self) -> str:
        return (f"KafkaConfig(bootstrap_servers={self.bootstrap_servers!r}, client={mask_secrets(self.client)!r}, "
                f"topics={self.topics!r}, pattern={self.pattern!r})")


@dataclass(frozen=True)
class CatalogConfig:
    name: str = "icerouter"
    properties: Mapping[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        return f"CatalogConfig(name={self.name!r}, properties={mask_secrets(self.properties)!r})"

    @property
    def url(self) -> str:
        """Where the catalog is (its ``uri``, else its warehouse), credentials masked: for messages."""
        return mask_url(str(self.properties.get("uri") or self.properties.get("warehouse") or "<no uri>"))

    def load(self, sql_impl: str | None = None):
        """The pyiceberg catalog; `sql_impl` ("module.Class") replaces pyiceberg's SQL catalog class."""
        props = {k: str(v) for k, v in self.properties.items()}
        _ensure_local_dirs(props)
        if sql_impl and "py-catalog-impl" not in props and _is_sql(props):
            props.pop("type", None)
            props["py-catalog-impl"] = sql_impl
        return load_catalog(self.name, **props)


def _is_sql(props: Mapping[str, str]) -> bool:
    if "type" in props:
        return props["type"].lower() == "sql"
    return props.get("uri", "").startswith(("sqlite", "postgresql"))


def _ensure_local_dirs(props: Mapping[str, str]) -> None:
    """Create the folders of a local SQLite catalog / file warehouse so first runs just work."""
    uri, warehouse = props.get("uri", ""), props.get("warehouse", "")
    if uri.startswith("sqlite:///") and uri != "sqlite:///:memory:":
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    if warehouse.startswith("file://"):
        Path(warehouse[len("file://"):]).mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class JobConfig:
    name: str = "icerouter"
    checkpoint: str = ".icerouter/checkpoint"
    trigger_seconds: float = 10.0
    status_file: str | None = None
    commit_threads: int = 8
    commit_retries: int = 6
    spark: Mapping[str, Any] = field(default_factory=dict)
    fused_read: bool = True  # source tasks decode and write themselves (see router/executor/fused_reader.py)
    commit_in_tasks: bool = True  # a task commits the tables it wrote (router/executor/tasks.py)


@dataclass(frozen=True)
class TablesConfig:
    auto_create: bool = True
    default_namespace: str = "raw"
    allowed_namespaces: tuple[str, ...] = ()
    partition_by: tuple[str, ...] = ()
    properties: Mapping[str, str] = field(default_factory=dict)
    case_sensitive: bool = True
    metadata_columns: bool = True  # _kafka_topic/_partition/_offset/_timestamp on every row


@dataclass(frozen=True)
class DlqConfig:
    table: str | None = "ops.dead_letters"
    topic: str | None = None


@dataclass(frozen=True)
class MaintenanceConfig:
    expire_every_commits: int = 10
    retain_last_snapshots: int = 5
    max_snapshot_age_seconds: int = 60
    target_file_size_bytes: int = 128 * 1024 * 1024
    orphan_min_age_seconds: int = 3 * 24 * 3600
    compact_interval_seconds: int = 900  # per table, in a background thread of the job
    # ... and sooner once this many data files were committed to the table since its last run (0: never)
    compact_after_files: int = 100


@dataclass(frozen=True)
class RouteConfig:
    name: str
    table: str
    topic: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] | None = None
    evolution: Any = None
    partition_by: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RouterConfig:
    kafka: KafkaConfig
    registry: Mapping[str, Any]
    catalog: CatalogConfig
    job: JobConfig
    tables: TablesConfig
    routes: tuple[RouteConfig, ...]
    evolution: Mapping[str, Any]
    dlq: DlqConfig
    maintenance: MaintenanceConfig
    unmatched: str = "dlq"
    tombstones: str = "ignore"
    source: Path | None = None

    def __repr__(self) -> str:
        return f"RouterConfig(source={self.source}, routes={len(self.routes)}, kafka={self.kafka!r}, catalog={self.catalog!r})"

    def registry_config(self) -> RegistryConfig:
        return _registry_config(self.registry)

    def policies(self) -> PolicySet:
        return _policy_set(self.evolution)


ROOT_KEYS = ("kafka", "registry", "catalog", "job", "tables", "routes", "evolution", "dlq", "maintenance",
             "unmatched", "tombstones")


def interpolate(value: Any, where: str = "config") -> Any:
    """Replace ${VAR} and ${VAR:-default} in every string of a parsed YAML tree."""
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name, default = m.group(1), m.group(2)
            if name in os.environ:
                return os.environ[name]
            if default is not None:
                return default
            raise ConfigError(f"{where}: environment variable {name} is not set")
        return ENV_PATTERN.sub(sub, value)
    if isinstance(value, Mapping):
        return {k: interpolate(v, f"{where}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, f"{where}[{i}]") for i, v in enumerate(value)]
    return value


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
    root = _Section(interpolate(raw or {}), "config", ROOT_KEYS)
    base = source.parent if source else Path.cwd()
    return RouterConfig(
        kafka=_kafka(root.get("kafka")),
        registry=_registry(root.get("registry")),
        catalog=_catalog(root.get("catalog"), base),
        job=_job(root.get("job"), base),
        tables=_tables(root.get("tables")),
        routes=_routes(root.get("routes", [], list)),
        evolution=_evolution(root.get("evolution")),
        dlq=_dlq(root.get("dlq")),
        maintenance=_maintenance(root.get("maintenance")),
        unmatched=root.choice("unmatched", "dlq", UNMATCHED_MODES),
        tombstones=root.choice("tombstones", "ignore", TOMBSTONE_MODES),
        source=source,
    )


def _kafka(data: Any) -> KafkaConfig:
    s = _Section(data, "kafka", ("bootstrap_servers", "client", "topics", "pattern", "starting_offsets",
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


def _registry(data: Any) -> dict[str, Any]:
    if not isinstance(data, Mapping) or not data.get("url"):
        raise ConfigError("registry.url: required")
    _registry_config(data)  # every key and value checked now, not on the first executor
    return dict(data)


def _registry_config(data: Mapping[str, Any]) -> RegistryConfig:
    try:
        return RegistryConfig.from_dict(dict(data))
    except RegistryConfigError as exc:
        where = f"registry.{exc.key}" if exc.key else "registry"
        raise ConfigError(f"{where}: {exc.reason}") from None
    except TypeError as exc:
        raise ConfigError(f"registry: {exc}") from None


def _policy_spec(spec: Any, where: str) -> Any:
    """Validate one policy spec at load; the message names the key's path."""
    try:
        parse_policy_spec(spec)
    except PolicyConfigError as exc:
        raise ConfigError(f"{_policy_path(where, spec, exc)}: {exc.reason}") from None
    return spec


def _policy_path(where: str, spec: Any, exc: PolicyConfigError) -> str:
    return f"{where}.{exc.key}" if isinstance(spec, Mapping) and exc.key in spec else where


def _policy_set(evolution: Mapping[str, Any]) -> PolicySet:
    try:
        return PolicySet.from_config(evolution.get("default"), evolution.get("topics") or {})
    except PolicyConfigError as exc:
        if exc.topic is not None:
            where, spec = f"evolution.topics[{exc.topic!r}]", (evolution.get("topics") or {}).get(exc.topic)
        else:
            where, spec = "evolution.default", evolution.get("default")
        raise ConfigError(f"{_policy_path(where, spec, exc)}: {exc.reason}") from None


def _catalog(data: Any, base: Path) -> CatalogConfig:
    s = _Section(data, "catalog", ("name", "properties"))
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
    s = _Section(data, "job", ("name", "checkpoint", "trigger_seconds", "status_file", "commit_threads",
                               "commit_retries", "spark", "fused_read", "commit_in_tasks"))
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
                     bool(s.get("fused_read", True, bool)), bool(s.get("commit_in_tasks", True, bool)))


def _tables(data: Any) -> TablesConfig:
    s = _Section(data, "tables", ("auto_create", "default_namespace", "allowed_namespaces", "partition_by",
                                  "properties", "case_sensitive", "metadata_columns"))
    return TablesConfig(bool(s.get("auto_create", True, bool)), s.get("default_namespace", "raw", str),
                        tuple(s.get("allowed_namespaces", [], list)),
                        _partition_by(s.get("partition_by", [], list), "tables.partition_by"),
                        {k: str(v) for k, v in s.mapping("properties").items()},
                        bool(s.get("case_sensitive", True, bool)), bool(s.get("metadata_columns", True, bool)))


def _partition_by(items: list, where: str) -> tuple[str, ...]:
    """Partition specs are checked at load; whether the column exists is per table (at creation)."""
    for i, text in enumerate(items):
        m = PARTITION_PATTERN.fullmatch(str(text))
        if not m or m.group(1) not in PARTITION_TRANSFORMS:
            raise ConfigError(f"{where}[{i}]: {text!r} is not one of {', '.join(PARTITION_TRANSFORMS)}(<column>)")
        if m.group(1) in ("bucket", "truncate") and m.group(2) is None:
            raise ConfigError(f"{where}[{i}]: {text!r} needs a width, e.g. {m.group(1)}(16, {m.group(3)})")
    return tuple(map(str, items))


def _routes(items: list) -> tuple[RouteConfig, ...]:
    routes = []
    for i, item in enumerate(items):
        where = f"routes[{i}]"
        s = _Section(item, where, ("name", "topic", "headers", "fields", "table", "columns", "evolution",
                                   "partition_by"))
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
        routes.append(RouteConfig(
            name=s.get("name", f"route{i}", str), table=table, topic=topic,
            headers={k: str(v) for k, v in s.mapping("headers").items()}, fields=s.mapping("fields"),
            columns=tuple(map(str, columns)) if columns is not None else None,
            evolution=_policy_spec(s.get("evolution"), f"{where}.evolution"),
            partition_by=_partition_by(partition_by, f"{where}.partition_by") if partition_by is not None else None))
    names = [r.name for r in routes]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"routes: duplicate route name {dupes[0]!r}")
    return tuple(routes)


def _evolution(data: Any) -> dict[str, Any]:
    s = _Section(data, "evolution", ("default", "topics"))
    evolution = {"default": s.get("default", "evolve" if data is None else None), "topics": s.mapping("topics")}
    _policy_set(evolution)  # validated now, with the key's path in the message
    return evolution


def _dlq(data: Any) -> DlqConfig:
    s = _Section(data, "dlq", ("table", "topic"))
    return DlqConfig(s.get("table", "ops.dead_letters", str), s.get("topic", None, str))


def _maintenance(data: Any) -> MaintenanceConfig:
    s = _Section(data, "maintenance", ("expire_every_commits", "retain_last_snapshots",
                                       "max_snapshot_age_seconds", "target_file_size_bytes",
                                       "orphan_min_age_seconds", "compact_interval_seconds",
                                       "compact_after_files"))
    d = MaintenanceConfig()
    return MaintenanceConfig(*(s.positive(k, getattr(d, k)) for k in (
        "expire_every_commits", "retain_last_snapshots", "max_snapshot_age_seconds",
        "target_file_size_bytes", "orphan_min_age_seconds", "compact_interval_seconds")),
        compact_after_files=s.non_negative("compact_after_files", d.compact_after_files))
