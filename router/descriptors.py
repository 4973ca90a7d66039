"""What crosses between the driver and the tasks of a micro-batch, defined once.

Out: a `DispatchContext` (configs only, small and picklable). Back: one
descriptor row per table a task wrote (a pickled `TableResult`: data files, row
counts, offsets covered) plus one stats row (phase timings, the offsets the task
read and, in fused mode, its ranges). The data itself never reaches the driver.
Both sides import this module and nothing else of each other.
"""

from __future__ import annotations

import functools
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from evolution.policy import PolicySet
from registry.config import RegistryConfig
from router import progress
from router.config import CatalogConfig, DlqConfig, MaintenanceConfig, TablesConfig
from router.routing import RoutingTable
from router.source.offsets import tp_key

STATS_ROW = ""  # the descriptor row carrying a task's phase timings
READ_STAT = "read"  # in the stats row: "topic/partition" -> [min, max] of every record the task read
RANGES_STAT = "ranges"  # in the stats row (fused read): the offset ranges the task read
DESCRIPTOR_SCHEMA = pa.schema([pa.field("table", pa.string()), pa.field("descriptor", pa.binary())])


@functools.lru_cache(maxsize=1)
def descriptor_spark_schema() -> Any:
    """DESCRIPTOR_SCHEMA as a Spark StructType (mapInArrow output, fused source schema)."""
    # deferred: the commit path and its tests run without Spark
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(DESCRIPTOR_SCHEMA)


@dataclass(frozen=True)
class DispatchContext:
    """Everything a task needs; small and picklable (configs only, no clients)."""

    job: str
    batch_id: int
    catalog: CatalogConfig
    registry: RegistryConfig
    routing: RoutingTable
    policies: PolicySet
    tables: TablesConfig
    dlq: DlqConfig
    unmatched: str = "dlq"
    tombstones: str = "ignore"
    dlq_producer: dict | None = None
    quarantined: frozenset = frozenset()
    # Second pass after failed commits: only dead-letter the records of these tables.
    redirect: frozenset = frozenset()
    commit_in_tasks: bool = True  # tasks commit the tables they wrote; the driver commits the rest
    commit_retries: int = 6
    maintenance: MaintenanceConfig | None = None  # the snapshot expiry rule applied inside each commit
    drill: tuple | None = None  # crash drills only (router/faults.py): (spec, driver pid, marker dir)

    @classmethod
    def for_config(cls, config, batch_id: int, routing: RoutingTable | None = None, **overrides) -> "DispatchContext":
        """The context of `config` (a RouterConfig) for one batch: the job's dispatcher and the dead-letter
        replay (router/operations/replay.py) build it here, so both route, decode and write alike."""
        dlq_producer = None
        if config.dlq.topic:
            dlq_producer = {"bootstrap.servers": config.kafka.bootstrap_servers,
                            **{k: v for k, v in config.kafka.client.items() if not k.startswith("consumer.")}}
        fields = dict(
            job=config.job.name, batch_id=batch_id, catalog=config.catalog, registry=config.registry,
            routing=routing or RoutingTable(config.routes, config.tables, config.dlq), policies=config.evolution,
            tables=config.tables, dlq=config.dlq, unmatched=config.unmatched, tombstones=config.tombstones,
            dlq_producer=dlq_producer, commit_in_tasks=config.job.commit_in_tasks,
            commit_retries=config.job.commit_retries, maintenance=config.maintenance)
        fields.update(overrides)
        return cls(**fields)


@dataclass
class UpsertWork:
    """An upsert table's part of a result: the keys whose current rows its commit replaces or deletes.

    Their positions are looked up at commit time, on the snapshot the commit
    builds on (router/catalog/commit.py), never in advance: a commit that lost
    its compare-and-swap looks again, so positions are never stale.
    """

    key_columns: tuple[str, ...]
    touched: pa.Table  # one row per distinct key changed
    deletes: int = 0  # keys whose last change deleted them (no new image)
    sequence_column: str | None = None  # sequence_by: the table column holding each row's value
    sequences: pa.Array | None = None  # sequence_by: the value of each touched key's last change


@dataclass
class TableResult:
    """What one task did for one table; merged on the driver per table."""

    table: str
    data_files: list = field(default_factory=list)
    rows: int = 0
    schema_ids: set = field(default_factory=set)
    offsets: dict = field(default_factory=dict)  # "topic/partition" -> [min, max]
    changes: list = field(default_factory=list)
    failure: str | None = None
    dead_letters: int = 0
    discarded: int = 0
    broken: bool = False  # an error (not a policy outcome) failed this table
    replayed: int = 0  # rows dropped because the table already held them (a replay or a rewind)
    settled: dict = field(default_factory=dict)  # dead-letter table only: "topic/partition" -> [min, max] read
    # Commits a task already made of its part (router.catalog.commit.CommitOutcome); the data
    # files, offsets and rows above are then only what is left for the driver to commit.
    commits: list = field(default_factory=list)
    upsert: UpsertWork | None = None  # an upsert table: the keys this result's images replace
    # Upsert parts of other tasks, committed after this one in their own snapshots (two tasks may carry
    # one key; each commit replaces the rows the one before it left, so the last commit's image stays).
    later: list = field(default_factory=list)
    oldest_ms: int | None = None  # Kafka timestamp (ms) of the oldest record written: the commit's freshness
    reasons: dict = field(default_factory=dict)  # dead-letter table only: error class -> rows
    read_ms: int | None = None  # when the earliest task of this result began reading (wall clock, router/ledger.py)

    @property
    def has_work(self) -> bool:
        """Something to commit: data files, or (an upsert) keys whose rows go."""
        return bool(self.data_files) or (self.upsert is not None and self.upsert.touched.num_rows > 0) \
            or any(part.has_work for part in self.later)

    @property
    def written(self) -> int:
        """Rows of this batch in the table's new data files, committed by a task or left to the driver."""
        return self.rows + sum(c.rows for c in self.commits if c.status == "committed")

    def cover(self, topics: pa.Array, partitions: pa.Array, offsets: pa.Array) -> None:
        progress.cover_rows(topics, partitions, offsets, self.offsets)

    def note_times(self, timestamps: pa.Array) -> None:
        """Keep the oldest Kafka timestamp of the rows written (metrics: commit time minus record time)."""
        first = pc.min(timestamps).as_py() if len(timestamps) else None
        if first is not None:
            oldest = round(first.timestamp() * 1000)
            self.oldest_ms = oldest if self.oldest_ms is None else min(self.oldest_ms, oldest)

    def merge(self, other: "TableResult") -> None:
        if self.upsert is not None or other.upsert is not None:
            self._keep_part(other)
        else:
            self.data_files += other.data_files
            self.rows += other.rows
            progress.widen(self.offsets, other.offsets)
        self.schema_ids |= other.schema_ids
        if other.oldest_ms is not None:
            self.oldest_ms = other.oldest_ms if self.oldest_ms is None else min(self.oldest_ms, other.oldest_ms)
        if other.read_ms is not None:
            self.read_ms = other.read_ms if self.read_ms is None else min(self.read_ms, other.read_ms)
        for reason, rows in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + rows
        self.changes += [c for c in other.changes if c not in self.changes]
        self.failure = self.failure or other.failure
        self.dead_letters += other.dead_letters
        self.discarded += other.discarded
        self.broken = self.broken or other.broken
        self.replayed += other.replayed
        progress.widen(self.settled, other.settled)
        self.commits += other.commits

    def _keep_part(self, other: "TableResult") -> None:
        """Another task's upsert part stays apart: it commits after this one, in its own snapshot."""
        self.later += other.later
        if not other.has_work:
            return
        part = TableResult(other.table, other.data_files, other.rows, set(other.schema_ids), dict(other.offsets),
                           upsert=other.upsert, read_ms=other.read_ms)
        if self.has_work:
            self.later.insert(len(self.later) - len(other.later), part)
        else:
            self.data_files, self.rows, self.offsets, self.upsert = part.data_files, part.rows, part.offsets, \
                part.upsert


def encode_descriptors(results: Iterable[TableResult], stats: dict) -> pa.RecordBatch:
    """Task side: one row per table result plus the stats row."""
    results = list(results)
    tables = [r.table for r in results] + [STATS_ROW]
    payloads = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in results]
    payloads.append(pickle.dumps(stats))
    return pa.RecordBatch.from_arrays([pa.array(tables, pa.string()), pa.array(payloads, pa.binary())],
                                      schema=DESCRIPTOR_SCHEMA)


@dataclass
class BatchDescriptors:
    """Driver side: the descriptor rows of every task of a pass, merged per table."""

    results: dict[str, TableResult] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    ranges: list = field(default_factory=list)
    read: dict = field(default_factory=dict)  # "topic/partition" -> [min, max] of the records read

    def settled(self) -> dict:
        """"topic/partition" -> [first, last] offset the batch is done with: the records it read, and
        in fused mode each range it read whole, up to the range's end (`until` - 1). A range ends at
        the source's end offset for the batch, past transaction markers, aborted records and
        compacted gaps that no record stands for, so the position taken from it is the one a Kafka
        consumer would commit (the next offset to fetch), not the last record + 1."""
        out = {key: list(span) for key, span in self.read.items()}
        for task in self.ranges:
            progress.widen(out, {tp_key(topic, partition): [lo, until - 1]
                                 for topic, partition, lo, until in task if until > lo})
        return out


def decode_descriptors(rows: Iterable[tuple[str, bytes]]) -> BatchDescriptors:
    out = BatchDescriptors()
    for table, blob in rows:
        if table == STATS_ROW:
            for key, value in pickle.loads(blob).items():
                if key == RANGES_STAT:
                    out.ranges.append(value)
                elif key == READ_STAT:
                    progress.widen(out.read, value)
                else:
                    out.timings[key] = out.timings.get(key, 0) + value
            continue
        result: TableResult = pickle.loads(blob)
        if result.table in out.results:
            out.results[result.table].merge(result)
        else:
            out.results[result.table] = result
    return out
