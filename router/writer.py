"""Executor side of a micro-batch: route, decode, evolve and write data files.

Runs inside `mapInArrow` on the Spark executors. The input is the Kafka source
rows of one Spark partition; the output is one small descriptor per table
(written DataFile objects, row counts, offsets covered, schema ids, failures),
pickled into a binary column. The data itself never travels to the driver.

Records are grouped by sorting on topic once (contiguous slices; never one
Spark filter per table), then by schema id (decoder) and by route/table.
Any failure that concerns one table stays with that table: its records are
dead-lettered with the reason and the other tables are written normally.
"""

from __future__ import annotations

import logging
import pickle
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from router import progress
from router.config import CatalogConfig, DlqConfig, TablesConfig
from router.dlq import DeadLetter, dead_letter_batch, ensure_dead_letter_table, produce_dead_letters
from router.routes import CompiledRoute, RoutingTable

log = logging.getLogger("icerouter.writer")

STATS_ROW = ""  # the descriptor row carrying a task's phase timings
READ_STAT = "read"  # in the stats row: "topic/partition" -> [min, max] of every record the task read
DESCRIPTOR_SCHEMA = pa.schema([pa.field("table", pa.string()), pa.field("descriptor", pa.binary())])


@dataclass(frozen=True)
class DispatchContext:
    """Everything a task needs; small and picklable (configs only, no clients)."""

    job: str
    batch_id: int
    catalog: CatalogConfig
    registry: Any  # registry.config.RegistryConfig
    routing: RoutingTable
    policies: Any  # evolution.policy.PolicySet
    tables: TablesConfig
    dlq: DlqConfig
    unmatched: str = "dlq"
    tombstones: str = "ignore"
    dlq_producer: dict | None = None
    quarantined: frozenset = frozenset()
    # Second pass after failed commits: only dead-letter the records of these tables.
    redirect: frozenset = frozenset()


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

    def cover(self, topics: pa.Array, partitions: pa.Array, offsets: pa.Array) -> None:
        progress.cover(progress.tp_keys(topics, partitions), offsets, self.offsets)

    def merge(self, other: "TableResult") -> None:
        self.data_files += other.data_files
        self.rows += other.rows
        self.schema_ids |= other.schema_ids
        for key, (lo, hi) in other.offsets.items():
            cur = self.offsets.get(key)
            self.offsets[key] = [min(lo, cur[0]), max(hi, cur[1])] if cur else [lo, hi]
        self.changes += [c for c in other.changes if c not in self.changes]
        self.failure = self.failure or other.failure
        self.dead_letters += other.dead_letters
        self.discarded += other.discarded
        self.broken = self.broken or other.broken
        self.replayed += other.replayed
        for key, (lo, hi) in other.settled.items():
            cur = self.settled.get(key)
            self.settled[key] = [min(lo, cur[0]), max(hi, cur[1])] if cur else [lo, hi]


@dataclass
class Pending:
    """Rows of one table from one writer schema, waiting for evolution and writing."""

    route: CompiledRoute
    schema_id: int
    iceberg_schema: Any
    batch: pa.RecordBatch | pa.Table
    rows: pa.Array  # positions in the sorted partition table
    topic: str


def header_values(headers: pa.Array, name: str) -> list[str | None]:
    """The (last) value of header `name` per row, as text; None when absent or not UTF-8."""
    out: list[str | None] = []
    for entry in headers.to_pylist():
        value = None
        for h in entry or ():
            if h["key"] == name and h["value"] is not None:
                try:
                    value = h["value"].decode("utf-8")
                except UnicodeDecodeError:
                    value = None
        out.append(value)
    return out


def field_column(batch: pa.RecordBatch | pa.Table, path: str) -> pa.Array | None:
    column: Any = batch
    for part in path.split("."):
        names = column.schema.names if hasattr(column, "schema") else [column.type.field(i).name for i in range(column.type.num_fields)]
        if part not in names:
            return None
        column = column.column(part) if hasattr(column, "schema") else pc.struct_field(column, part)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column


def process_partition(batches: Iterator[pa.RecordBatch], ctx: DispatchContext) -> Iterator[pa.RecordBatch]:
    """mapInArrow entry point."""
    from router.partition import PartitionWriter

    import time

    started = time.perf_counter()
    source = pa.Table.from_batches(list(batches))
    read_seconds = time.perf_counter() - started
    if source.num_rows == 0:
        return
    writer = PartitionWriter(ctx)
    results = writer.run(source)
    writer.timings["source"] = read_seconds
    writer.timings["records"] = source.num_rows
    read: dict = {}
    progress.cover(progress.tp_keys(source.column("topic").combine_chunks(),
                                    source.column("partition").combine_chunks()),
                   source.column("offset").combine_chunks(), read)
    writer.timings[READ_STAT] = read
    tables = [r.table for r in results] + [STATS_ROW]
    payloads = [pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in results]
    payloads.append(pickle.dumps(writer.timings))
    yield pa.RecordBatch.from_arrays([pa.array(tables, pa.string()), pa.array(payloads, pa.binary())],
                                     schema=DESCRIPTOR_SCHEMA)


def sort_by_topic(source: pa.Table) -> tuple[pa.Table, list[tuple[str, int, int]]]:
    """Sort once by topic and return contiguous (topic, start, length) runs."""
    order = pc.sort_indices(source, sort_keys=[("topic", "ascending"), ("partition", "ascending"),
                                               ("offset", "ascending")])
    ordered = source.take(order)
    topics = ordered.column("topic").combine_chunks()
    encoded = topics.dictionary_encode()
    indices = encoded.indices.to_numpy(zero_copy_only=False)
    starts = np.concatenate(([0], np.flatnonzero(indices[1:] != indices[:-1]) + 1))
    ends = np.append(starts[1:], len(indices))
    runs = [(encoded.dictionary[indices[a]].as_py(), int(a), int(b - a)) for a, b in zip(starts, ends)]
    return ordered, runs


def write_dead_letters(ctx: DispatchContext, source: pa.Table, letters: list[DeadLetter],
                       results: dict[str, TableResult]) -> None:
    """DLQ rows are a table like any other: written here, committed by the driver."""
    if not letters:
        return
    batch = dead_letter_batch(source, letters, ctx.job)
    if not ctx.dlq.table:
        if ctx.dlq.topic and ctx.dlq_producer:
            produce_dead_letters(batch, ctx.dlq.topic, ctx.dlq_producer)
        else:
            log.warning("%d dead letters and no dlq.table configured", batch.num_rows)
        return
    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    table = ensure_dead_letter_table(ctx.catalog, ctx.dlq.table)
    letter_keys = progress.tp_keys(batch.column("topic"), batch.column("partition"), batch.column("table_name"))
    keep = progress.trim_mask(letter_keys, batch.column("offset"),
                              progress.stored_progress(table, ctx.job).get("offsets", {}))
    result = results.setdefault(ctx.dlq.table, TableResult(ctx.dlq.table))
    if keep is not None:  # a replay: these dead letters are in the table already
        result.replayed += batch.num_rows - pc.sum(keep).as_py()
        batch, letter_keys = batch.filter(keep), letter_keys.filter(keep)
        if batch.num_rows == 0:
            return
    if ctx.dlq.topic and ctx.dlq_producer:
        produce_dead_letters(batch, ctx.dlq.topic, ctx.dlq_producer)
    files = list(_dataframe_to_data_files(table.metadata, batch, table.io))
    result.data_files += files
    result.rows += batch.num_rows
    progress.cover(letter_keys, batch.column("offset"), result.offsets)
