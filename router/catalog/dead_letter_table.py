"""The dead-letter table: its one schema definition and its creation.

The Iceberg schema is the definition; the Arrow schema that dead-letter rows
are built in derives from it (evolution/arrow.py), so the two cannot drift.
Created by the driver at start (never by racing tasks) and written like any
other table, so dead letters are exactly-once too.
"""

from __future__ import annotations

from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType, IntegerType, ListType, LongType, NestedField, StringType, StructType, TimestamptzType,
)

from evolution.arrow import iceberg_to_arrow
from router.catalog.tables import create_table, load_table

DLQ_ICEBERG_SCHEMA = Schema(
    NestedField(1, "topic", StringType(), required=False),
    NestedField(2, "partition", IntegerType(), required=False),
    NestedField(3, "offset", LongType(), required=False),
    NestedField(4, "timestamp", TimestamptzType(), required=False),
    NestedField(5, "key", BinaryType(), required=False),
    NestedField(6, "value", BinaryType(), required=False),
    NestedField(7, "headers", ListType(15, StructType(
        NestedField(16, "key", StringType(), required=False),
        NestedField(17, "value", BinaryType(), required=False)), element_required=False), required=False),
    NestedField(8, "error_class", StringType(), required=False),
    NestedField(9, "reason", StringType(), required=False),
    NestedField(10, "table_name", StringType(), required=False),
    NestedField(11, "route", StringType(), required=False),
    NestedField(12, "schema_id", LongType(), required=False),
    NestedField(13, "job", StringType(), required=False),
    NestedField(14, "failed_at", TimestamptzType(), required=False),
)

DLQ_ARROW_SCHEMA = iceberg_to_arrow(DLQ_ICEBERG_SCHEMA)

DLQ_PARTITION_BY = ("day(failed_at)",)

#: columns copied from the Kafka record as it came
SOURCE_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "headers")

#: table property: what `icerouter dlq replay` runs did, committed with their letters' removal
#: (router/operations/replay.py): {"runs", "landed", "superseded", "still_failing", "last_run"}
REPLAYS_PROPERTY = "icerouter.replays.{job}"
REPLAY_COUNTS = ("runs", "landed", "superseded", "still_failing")


def replay_counts(table, job: str) -> dict[str, int]:
    """The replay counts the dead-letter table records for `job` (zeros before any replay)."""
    import json

    try:
        doc = json.loads(table.metadata.properties.get(REPLAYS_PROPERTY.format(job=job)) or "{}")
    except ValueError:
        doc = {}
    return {k: int(doc.get(k, 0)) for k in REPLAY_COUNTS}


def ensure_dead_letter_table(catalog, identifier: str, format_version: int = 2):
    """The dead-letter table, created on first use (by the driver at start, so tasks never race) at
    `format_version` (``tables.format_version``: replays delete letters as the table's format says)."""
    try:
        return load_table(catalog, identifier)
    except NoSuchTableError:
        return create_table(catalog, identifier, DLQ_ICEBERG_SCHEMA, DLQ_PARTITION_BY,
                            properties={"format-version": str(format_version)})
