"""Dead-letter records: the original Kafka record plus why and where it failed.

Dead letters are written like any other table (by the executors, committed by
the driver with the batch offsets), so they are exactly-once too. An optional
Kafka DLQ topic receives the same records (at-least-once: a replayed batch may
produce a record twice).
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Producer

from router import progress
from router.catalog.datafiles import write_data_files
from router.catalog.dead_letter_table import DLQ_ARROW_SCHEMA, SOURCE_COLUMNS, ensure_dead_letter_table
from router.descriptors import DispatchContext, TableResult

log = logging.getLogger("icerouter.writer")

@dataclass(frozen=True)
class DeadLetter:
    """Why a set of source rows failed; rows are positions in the source slice."""

    rows: Sequence[int]
    error_class: str
    reason: str
    table: str | None = None
    route: str | None = None
    schema_id: int | None = None


def dead_letter_batch(source: pa.Table, letters: Sequence[DeadLetter], job: str) -> pa.Table:
    """Build DLQ rows from source rows (the original bytes are kept as they came)."""
    if not letters:
        return DLQ_ARROW_SCHEMA.empty_table()
    indices, classes, reasons, tables, routes, schema_ids = [], [], [], [], [], []
    for letter in letters:
        n = len(letter.rows)
        indices.extend(letter.rows)
        classes += [letter.error_class] * n
        reasons += [letter.reason[:4000]] * n
        tables += [letter.table] * n
        routes += [letter.route] * n
        schema_ids += [letter.schema_id] * n
    picked = source.select(list(SOURCE_COLUMNS)).take(pa.array(indices, pa.int64()))
    now = dt.datetime.now(dt.timezone.utc)
    columns = {name: picked.column(name) for name in SOURCE_COLUMNS}
    columns.update({
        "error_class": pa.array(classes, pa.string()),
        "reason": pa.array(reasons, pa.string()),
        "table_name": pa.array(tables, pa.string()),
        "route": pa.array(routes, pa.string()),
        "schema_id": pa.array(schema_ids, pa.int64()),
        "job": pa.array([job] * len(indices), pa.string()),
        "failed_at": pa.array([now] * len(indices), pa.timestamp("us", tz="UTC")),
    })
    arrays = [columns[f.name].cast(f.type) if columns[f.name].type != f.type else columns[f.name]
              for f in DLQ_ARROW_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=DLQ_ARROW_SCHEMA)


def produce_dead_letters(batch: pa.Table, topic: str, producer_config: dict) -> int:
    """Send dead letters to a Kafka topic with the original key/value/headers plus error headers."""
    producer = Producer(producer_config)
    for row in batch.to_pylist():
        headers = [(h["key"], h["value"]) for h in (row["headers"] or [])]
        headers += [
            ("icerouter.error.class", row["error_class"].encode()),
            ("icerouter.error.reason", row["reason"].encode()),
            ("icerouter.source", f"{row['topic']}/{row['partition']}/{row['offset']}".encode()),
        ]
        if row["table_name"]:
            headers.append(("icerouter.table", row["table_name"].encode()))
        producer.produce(topic, key=row["key"], value=row["value"], headers=headers)
        producer.poll(0)
    remaining = producer.flush(30)
    if remaining:
        raise RuntimeError(f"{remaining} dead letters not acknowledged by topic {topic}")
    return batch.num_rows


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
    table = ensure_dead_letter_table(ctx.catalog, ctx.dlq.table, ctx.tables.format_version)
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
    files = write_data_files(table, batch)
    result.data_files += files
    result.rows += batch.num_rows
    for entry in pc.value_counts(batch.column("error_class")).to_pylist():  # metrics: dead letters by reason
        reason = entry["values"] or "unknown"
        result.reasons[reason] = result.reasons.get(reason, 0) + entry["counts"]
    progress.cover(letter_keys, batch.column("offset"), result.offsets)
