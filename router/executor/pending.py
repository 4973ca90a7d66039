"""Rows routed to a table and waiting to be written, and the Kafka columns every row can carry."""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
from cachetools import LRUCache

from router.arrays import one_chunk
from router.decisions import KAFKA_METADATA, table_view
from router.routing import CompiledRoute


@dataclass
class Pending:
    """Rows of one table from one writer schema, waiting for evolution and writing."""

    route: CompiledRoute
    schema_id: int
    iceberg_schema: Any  # the table's view of the writer schema; None for tombstones
    batch: pa.RecordBatch | pa.Table | None  # None: tombstones (upsert routes delete their keys)
    rows: pa.Array  # positions in the sorted partition table
    topic: str
    keys: Any = None  # upsert routes: the rows' decoded Kafka keys (router.changes.extract.KafkaKeys)

    def keep(self, mask: pa.Array) -> "Pending":
        """These rows only (a replay dropped the others)."""
        return dataclasses.replace(
            self, batch=self.batch.filter(mask) if self.batch is not None else None, rows=self.rows.filter(mask),
            keys=self.keys.take(np.flatnonzero(mask.to_numpy(zero_copy_only=False))) if self.keys is not None else None)


TOMBSTONES = -1  # Pending.schema_id of an upsert route's tombstones


def with_kafka_metadata(batch, source: pa.Table, rows: pa.Array) -> pa.Table:
    """Append the record's Kafka coordinates, so every row can be traced to (topic, partition, offset).

    The matching schema comes from ``router.decisions.table_view``."""
    picked = source.select([c for _, c, _ in KAFKA_METADATA]).take(rows)
    names = list(batch.schema.names)
    arrays = [batch.column(i) for i in range(batch.num_columns)]
    for name, column, _ in KAFKA_METADATA:
        if name in names:
            continue
        names.append(name)
        arrays.append(one_chunk(picked.column(column)))
    return pa.Table.from_arrays(arrays, names=names)


# (writer schema artifacts, route's projection, metadata columns, cdc) -> the table's view of it
_views: LRUCache = LRUCache(maxsize=4096)
_views_lock = threading.Lock()


def cached_table_view(artifacts: Any, columns: tuple[str, ...] | None, metadata_columns: bool, cdc: str | None,
                      sequence_by: str | None = None):
    """``router.decisions.table_view`` of a writer schema, built once per process and route shape.

    Building it costs ~0.3 ms (new pyiceberg Schema objects) for every topic and route in
    every batch, and the same object each time lets the evolution step recognise a table
    that needs no change (router.executor.evolve). Keyed by the artifacts' identity (the
    registry client's cache hands out one object per schema id), held in the entry.
    Raises what ``table_view`` raises (not cached).
    """
    key = (id(artifacts), columns, metadata_columns, cdc, sequence_by)
    with _views_lock:
        hit = _views.get(key)
    if hit is not None and hit[0] is artifacts:
        return hit[1]
    view = table_view(artifacts.iceberg_schema, columns=columns, metadata_columns=metadata_columns,
                      schema_type=artifacts.schema_type, schema_str=artifacts.schema_str, cdc=cdc,
                      sequence_by=sequence_by)
    with _views_lock:
        _views[key] = (artifacts, view)
    return view
