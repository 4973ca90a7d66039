"""Executor side of an upsert (or CDC) table: the batch's changes become one image per key.

Per table and task: records -> changes (router/changes/extract.py: key, op,
row image, order) -> the last change per key (router/changes/dedup.py) ->
data files with the final images. Which rows those images replace is not
decided here: the commit finds the keys' live rows on the snapshot it builds
on and deletes them with position deletes in the same snapshot
(router/catalog/commit.py), so a commit that lost a race to another committer
of the table looks again instead of deleting stale positions.

Bad records (unknown op, a null or missing key, a delete without a key) are
dead-lettered with their reason; the rest of the table goes on.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import NoSuchTableError

from evolution.arrow import iceberg_to_arrow
from router.catalog.datafiles import write_data_files
from router.catalog import load_table
from router.changes.dedup import last_change_per_key
from router.changes.envelope import key_columns_from_kafka_keys, missing_key_reason
from router.changes.exceptions import ChangeStreamError
from router.changes.extract import DEBEZIUM, UPSERT, ChangeSpec, extract_changes
from router.decisions import SEQUENCE_COLUMN, resolve_policy, sequence_column
from router.descriptors import TableResult, UpsertWork
from router.executor.align import align_table
from router.executor.evolve import evolve_table
from router.executor.pending import TOMBSTONES, Pending, with_kafka_metadata
from router.table_writes import mode_conflict

#: the task's router.executor.partition.PartitionWriter (its results, dead letters, source rows, timings)
PartitionWriter = Any


def key_columns(items: list[Pending]) -> tuple[str, ...] | None:
    """The route's key, else the fields of the records' Kafka key schema (None: neither is known)."""
    route = items[0].route
    if route.write.key:
        return route.write.key
    for item in items:
        if item.keys is not None and item.keys.table.num_columns:
            return key_columns_from_kafka_keys(item.keys.table.column_names)
    return None


def write_upsert_table(writer: PartitionWriter, table_id: str, items: list[Pending]) -> None:
    result = writer.results.setdefault(table_id, TableResult(table_id))
    letters_before = len(writer.letters)
    try:
        items = writer.drop_held(table_id, items, result)
        if not items:
            return
        key = key_columns(items)
        if key is None:
            reason = missing_key_reason(table_id)
            for item in items:
                writer.dead_letter(item.rows, "missing_key", reason, table=table_id, route=item.route.name,
                                   schema_id=None if item.schema_id == TOMBSTONES else item.schema_id)
                result.dead_letters += len(item.rows)
            return
        _write(writer, table_id, items, key, result)
    except Exception as exc:  # one bad table must not stop the others: dead-letter its records
        writer.fail_table(exc, table_id, items, result, letters_before)


def _write(writer: PartitionWriter, table_id: str, items: list[Pending], key: tuple[str, ...],
           result: TableResult) -> None:
    ctx, route = writer.ctx, items[0].route
    policy = resolve_policy(ctx.policies, items[0].topic, route.evolution, ctx.tables.auto_create)
    incoming = {}
    for item in items:
        if item.schema_id != TOMBSTONES:
            incoming.setdefault(item.schema_id, item.iceberg_schema)
    t0 = time.perf_counter()
    decision = evolve_table(ctx.catalog, ctx.tables, table_id, incoming, policy, route.layout,
                            route.write, key, route.format_version) if incoming else None
    t1 = time.perf_counter()
    writer.timings["evolve"] += t1 - t0
    table = decision.table if decision is not None else _existing(writer, table_id, items, key)
    if decision is not None:
        result.changes += decision.changes
    spec = ChangeSpec(DEBEZIUM if route.write.cdc else UPSERT, key, route.write.sequence_by)
    source = writer.source
    change_sets = []
    for item in items:
        if item.schema_id != TOMBSTONES:
            values = writer.admitted(decision, item, table_id, result)
            if values is None:
                continue
        elif table is None:
            continue  # deletes of keys a table that does not exist cannot hold
        else:
            values = None
        changes = extract_changes(spec, values, topic=item.topic,
                                  partition=pc.take(source.column("partition"), item.rows),
                                  offset=pc.take(source.column("offset"), item.rows),
                                  kafka_keys=item.keys, rows=item.rows, source=item)
        for bad in changes.bad:
            writer.dead_letter(pa.array(bad.rows, pa.int64()), bad.error_class, bad.reason, table=table_id,
                               route=item.route.name, schema_id=None if item.schema_id == TOMBSTONES else item.schema_id)
            result.dead_letters += len(bad.rows)
        if len(changes) or len(changes.consumed):
            change_sets.append(changes)
            result.cover(*_coordinates(source, np.concatenate([changes.rows, changes.consumed])))
            result.note_times(pc.take(source.column("timestamp"), pa.array(changes.rows, pa.int64())))
        if item.schema_id != TOMBSTONES and len(changes):
            result.schema_ids.add(item.schema_id)
    if not any(len(c) for c in change_sets) or table is None:
        return
    resolved = last_change_per_key([c for c in change_sets if len(c)])
    target = iceberg_to_arrow(table.schema())
    drops = {sid: d.drop_columns for sid, d in decision.per_schema.items()} if decision is not None else {}
    sequence = sequence_column(table.schema(), route.write.sequence_by) if route.write.sequence_by else None
    parts = [align_table(_image(writer, final, route, drops.get(final.source.schema_id, ()), sequence), target,
                         ctx.tables.case_sensitive)
             for final in resolved.inserts if final.image.num_rows]
    if parts:
        data = pa.concat_tables(parts)
        result.data_files += write_data_files(table, data)
        result.rows += data.num_rows
    result.upsert = UpsertWork(key, resolved.touched, resolved.deleted, sequence, resolved.sequence)
    writer.timings["write"] += time.perf_counter() - t1


def _image(writer: PartitionWriter, final, route, drop_columns: tuple[str, ...], sequence: str | None) -> pa.Table:
    """A CDC route's row images get the route's projection, the policy's dropped values (discard_value)
    and the Kafka columns here (plain upsert values had them applied to the value before); with
    sequence_by, each row keeps its change's value (router/catalog/sequence.py)."""
    image = final.image
    if sequence == SEQUENCE_COLUMN and final.sequence is not None and SEQUENCE_COLUMN not in image.column_names:
        image = image.append_column(SEQUENCE_COLUMN, final.sequence)
    if not route.write.cdc:
        return image
    if drop_columns:
        image = image.select([c for c in image.column_names if c not in drop_columns])
    if route.columns is not None:
        image = image.select([c for c in route.columns if c in image.column_names])
    if writer.ctx.tables.metadata_columns:
        image = with_kafka_metadata(image, writer.source, pa.array(final.rows, pa.int64()))
    return image


def _coordinates(source: pa.Table, rows: np.ndarray) -> tuple[pa.Array, pa.Array, pa.Array]:
    idx = pa.array(rows, pa.int64())
    return (pc.take(source.column("topic"), idx), pc.take(source.column("partition"), idx),
            pc.take(source.column("offset"), idx))


def _existing(writer: PartitionWriter, table_id: str, items: list[Pending], key: tuple[str, ...]):
    """The table, when this batch brought only tombstones (no writer schema to evolve it by)."""
    try:
        table = load_table(writer.ctx.catalog, table_id)
    except NoSuchTableError:
        return None
    conflict = mode_conflict(table_id, table.schema(), items[0].route.write, key)
    if conflict:
        raise ChangeStreamError(conflict, table=table_id)
    return table
