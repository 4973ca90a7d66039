"""The typed configuration: what `load_config` returns and every part of the job takes.

Everything here is already validated and parsed (policies, registry settings,
routes), so the driver, the executors, `plan` and `check` never see a raw
config dict. Frozen and picklable: a task receives these objects as they are.
Secrets never appear in a repr.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from evolution.policy import PolicyOverrides, PolicySet
from registry.config import RegistryConfig
from registry.formats import REGISTRY_FORMAT, ValueFormat
from router.masking import MASK, mask_secrets, mask_url
from router.table_writes import APPEND, TableWrite


@dataclass(frozen=True)
class KafkaConfig:
    bootstrap_servers: str
    client: Mapping[str, Any] = field(default_factory=dict)
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    starting_offsets: str | Mapping[str, Any] = "earliest"
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

    @property
    def missing_file(self) -> str | None:
        """The file of a SQLite catalog when it does not exist (None: it exists, or not a file catalog)."""
        path = _sqlite_path(str(self.properties.get("uri", "")))
        return path if path is not None and not Path(path).exists() else None

    def load(self, sql_impl: str | None = None, create: bool = True):
        """The pyiceberg catalog; `sql_impl` ("module.Class") replaces pyiceberg's SQL catalog class.
        `create=False`: no local folder is made (read-only commands leave no trace of a mistyped path)."""
        props = {k: str(v) for k, v in self.properties.items()}
        if create:
            _ensure_local_dirs(props)
        if sql_impl and "py-catalog-impl" not in props and _is_sql(props):
            props.pop("type", None)
            props["py-catalog-impl"] = sql_impl
        from pyiceberg.catalog import load_catalog  # deferred: reading a configuration needs no pyiceberg

        return load_catalog(self.name, **props)


def _is_sql(props: Mapping[str, str]) -> bool:
    if "type" in props:
        return props["type"].lower() == "sql"
    return props.get("uri", "").startswith(("sqlite", "postgresql"))


def _sqlite_path(uri: str) -> str | None:
    """The file of a ``sqlite:///path`` URI (None: another database, or SQLite in memory)."""
    if not uri.startswith("sqlite:///") or uri.startswith("sqlite:///:memory:"):
        return None
    return uri[len("sqlite:///"):].split("?", 1)[0] or None


def _ensure_local_dirs(props: Mapping[str, str]) -> None:
    """Create the folders of a local SQLite catalog / file warehouse so first runs just work."""
    uri, warehouse = props.get("uri", ""), props.get("warehouse", "")
    if (path := _sqlite_path(uri)) is not None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
    if warehouse.startswith("file://"):
        Path(warehouse[len("file://"):]).mkdir(parents=True, exist_ok=True)


@dataclass(frozen=True)
class MetricsConfig:
    """The driver's Prometheus endpoint (router/driver/metrics.py); off unless a port is given."""

    port: int | None = None
    host: str = "0.0.0.0"


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
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    lease_seconds: float = 60.0  # one job per name: the lease a crashed job's successor waits out (0: off)
    # restarts map Spark's classes from an archive an earlier restart recorded (router/driver/jvm_classes.py)
    jvm_class_archive: bool = False
    # after each batch, commit the job's offsets to a Kafka consumer group so kafka-consumer-groups,
    # Burrow or kafka-lag-exporter show its lag; for monitoring only: the tables stay the source of
    # truth, and a failed group commit is logged and counted, never fails the batch
    # (router/driver/consumer_group.py)
    commit_consumer_group: bool = True
    # the group those offsets go to (None: the job's name); it must have no active members
    consumer_group: str | None = None

    @property
    def group_id(self) -> str:
        """The consumer group the job's offsets are committed to (`consumer_group`, else the job's name)."""
        return self.consumer_group or self.name


@dataclass(frozen=True)
class CommitAfter:
    """When a table commits: once its oldest uncommitted record is `seconds` old or it has `records`
    waiting, whichever comes first (router/source/cadence.py); neither set: every batch."""

    seconds: float | None = None
    records: int | None = None

    @property
    def every_batch(self) -> bool:
        return self.seconds is None and self.records is None

    def __str__(self) -> str:
        if self.every_batch:
            return "every batch"
        parts = ([f"{self.seconds:g} s"] if self.seconds is not None else []) + \
            ([f"{self.records} records"] if self.records is not None else [])
        return " or ".join(parts)


EVERY_BATCH = CommitAfter()


@dataclass(frozen=True)
class TablesConfig:
    auto_create: bool = True
    default_namespace: str = "raw"
    allowed_namespaces: tuple[str, ...] = ()
    # the layout of the tables (route settings win); None: tables keep the spec / order they have
    partition_by: tuple[str, ...] | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    case_sensitive: bool = True
    metadata_columns: bool = True  # _kafka_topic/_partition/_offset/_timestamp on every row
    mode: str = "append"  # what a route does when it does not say: append | upsert
    commit_after: CommitAfter = EVERY_BATCH  # routes that do not say commit at this cadence
    # the Iceberg format version of tables icerouter creates: 2, or 3 (deletion vectors and row lineage,
    # docs/v3.md); a route may say otherwise for its tables; `icerouter maintain` upgrades existing v2 tables
    format_version: int = 2
    sort_by: tuple[str, ...] | None = None  # sort order of the tables' data files (evolution/layout.py)


@dataclass(frozen=True)
class DlqConfig:
    table: str | None = "ops.dead_letters"
    topic: str | None = None


#: maintenance.transient_file_codec -> the pyarrow codec its files are written with (None: the table's)
TRANSIENT_FILE_CODECS: dict[str, str | None] = {"uncompressed": "none", "lz4": "lz4", "snappy": "snappy",
                                                "table": None}


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
    # an append's commit merges small files of the table into one once it holds this many data files
    # (router/catalog/merge_small.py; 0: never)
    merge_small_files_at: int = 0  # opt-in; 16 suits a trigger of seconds (docs/operations.md, benchmarks/freshness*.json)
    # while merging small files: the codec of an append's small files, which a merge rewrites with the
    # table's codec ("table": the table's codec for them too)
    transient_file_codec: str = "uncompressed"


@dataclass(frozen=True)
class LineageConfig:
    """OpenLineage run events (router/lineage/); off unless a transport is given (router/config/lineage.py).

    `transport`: the openlineage-python client's transport settings (type http, file, console or
    kafka, and that type's keys); `namespace`: the jobs' namespace; `queue_size`: events waiting
    for the background sender at most (more are dropped, counted and logged, never waited for).
    """

    transport: Mapping[str, Any] = field(default_factory=dict)
    namespace: str = "icerouter"
    queue_size: int = 1000

    @property
    def enabled(self) -> bool:
        return bool(self.transport)

    def __repr__(self) -> str:
        return (f"LineageConfig(transport={_mask_deep(self.transport)!r}, namespace={self.namespace!r}, "
                f"queue_size={self.queue_size})")


def _mask_deep(values: Mapping[str, Any]) -> dict[str, Any]:
    """`mask_secrets` into nested mappings (a transport's `auth`, a Kafka transport's `config`) and URLs."""
    out = {}
    for key, value in mask_secrets(values).items():
        if str(key).lower().replace("_", "") in ("apikey", "authorization"):
            value = MASK
        elif isinstance(value, Mapping):
            value = _mask_deep(value)
        elif isinstance(value, str) and "://" in value:
            value = mask_url(value)
        out[key] = value
    return out


@dataclass(frozen=True)
class RouteConfig:
    name: str
    table: str
    topic: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    fields: Mapping[str, Any] = field(default_factory=dict)
    columns: tuple[str, ...] | None = None
    evolution: PolicyOverrides | None = None  # the route's policy rule, parsed at load
    partition_by: tuple[str, ...] | None = None
    write: TableWrite = APPEND  # append, or upsert by key / Debezium CDC (router/table_writes.py)
    format: ValueFormat = REGISTRY_FORMAT  # how values are read: registry framing, raw, json, connect_json
    commit_after: CommitAfter | None = None  # None: `tables.commit_after`
    format_version: int | None = None  # the route's tables' Iceberg format version (None: tables.format_version)
    sort_by: tuple[str, ...] | None = None  # overrides tables.sort_by


@dataclass(frozen=True)
class RouterConfig:
    kafka: KafkaConfig
    registry: RegistryConfig | None  # None: no route reads through a registry (router/config/load.py)
    catalog: CatalogConfig
    job: JobConfig
    tables: TablesConfig
    routes: tuple[RouteConfig, ...]
    evolution: PolicySet  # default and per-topic-pattern policies; routes carry their own rule
    dlq: DlqConfig
    maintenance: MaintenanceConfig
    unmatched: str = "dlq"
    tombstones: str = "ignore"
    source: Path | None = None
    lineage: LineageConfig = field(default_factory=LineageConfig)

    def __repr__(self) -> str:
        return f"RouterConfig(source={self.source}, routes={len(self.routes)}, kafka={self.kafka!r}, catalog={self.catalog!r})"
