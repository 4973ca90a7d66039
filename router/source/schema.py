"""The row schema of Spark's own Kafka source, built in code (never DDL strings)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

if TYPE_CHECKING:
    import pyarrow as pa

COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers")


def kafka_struct_type(include_headers: bool = True) -> StructType:
    """key, value, topic, partition, offset, timestamp, timestampType[, headers] (all nullable)."""
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(header)))
    return StructType(fields)


@functools.lru_cache(maxsize=2)
def kafka_arrow_schema(include_headers: bool = True) -> pa.Schema:
    """The Arrow schema pyspark 4.3 checks ``read()`` batches against, derived from Spark's own mapping."""
    from pyspark.sql.pandas.types import to_arrow_schema  # deferred: loads pandas, only needed by readers

    return to_arrow_schema(kafka_struct_type(include_headers), timezone="UTC")
