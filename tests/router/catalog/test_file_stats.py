"""A Parquet file's column statistics: router/catalog/file_stats.py against pyiceberg's own.

Real Parquet files written with field ids (as the data-file writer writes them:
decimals as integers, and as fixed-length bytes too), read back, and described
both ways: every statistics field must be equal, in the same order (the order
the manifest writer serialises the maps in).
"""

from __future__ import annotations

import datetime as dt
import decimal
import uuid

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyiceberg.io.pyarrow import (
    compute_statistics_plan, data_file_statistics_from_parquet_metadata, parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.schema import Schema
from pyiceberg.types import (
    BinaryType, BooleanType, DateType, DecimalType, DoubleType, FixedType, FloatType, IntegerType, ListType,
    LongType, MapType, NestedField, StringType, StructType, TimestampType, TimestamptzType, TimeType, UUIDType,
)

from router.catalog.file_stats import file_statistics, stat_columns

SCHEMA = Schema(
    NestedField(1, "id", LongType(), required=True),
    NestedField(2, "name", StringType(), required=False),
    NestedField(3, "small_dec", DecimalType(7, 2), required=False),
    NestedField(4, "mid_dec", DecimalType(15, 3), required=False),
    NestedField(5, "big_dec", DecimalType(30, 4), required=False),
    NestedField(6, "qty", IntegerType(), required=False),
    NestedField(7, "ratio", FloatType(), required=False),
    NestedField(8, "price", DoubleType(), required=False),
    NestedField(9, "ts", TimestamptzType(), required=False),
    NestedField(10, "local_ts", TimestampType(), required=False),
    NestedField(11, "day", DateType(), required=False),
    NestedField(12, "at", TimeType(), required=False),
    NestedField(13, "flag", BooleanType(), required=False),
    NestedField(14, "payload", BinaryType(), required=False),
    NestedField(15, "digest", FixedType(4), required=False),
    NestedField(16, "uid", UUIDType(), required=False),
    NestedField(17, "addr", StructType(NestedField(18, "city", StringType(), required=False),
                                       NestedField(19, "zip", IntegerType(), required=False)), required=False),
    NestedField(20, "tags", ListType(21, StringType(), element_required=False), required=False),
    NestedField(22, "attrs", MapType(23, StringType(), 24, LongType(), value_required=False), required=False),
    NestedField(25, "empty", StringType(), required=False),  # all null: no bounds
    NestedField(26, "top.dotted", StringType(), required=False),  # a dot in a top-level name
    NestedField(27, "note", StringType(), required=False),  # long strings: truncated bounds
)

BASE = dt.datetime(2026, 10, 30, 22, tzinfo=dt.timezone.utc)
NAMES = ["alpha", "zeta-long-name-over-sixteen-chars", "ünïcödé-ünïcödé-ünïcödé", "\U0010ffff" * 20,
         "b" * 15 + "\U0010ffff" + "c", ""]


def rows(n: int) -> pa.Table:
    records = []
    for i in range(n):
        ts = BASE + dt.timedelta(hours=i * 7, microseconds=i)
        records.append({
            "id": i * 1_000_003 - 5_000_000,
            "name": None if i % 7 == 0 else NAMES[i % len(NAMES)] + str(i % 3),
            "small_dec": None if i % 5 == 0 else decimal.Decimal(i * 37 - 400).scaleb(-2),
            "mid_dec": None if i % 6 == 0 else decimal.Decimal(i * 123_457 - 2_000_000).scaleb(-3),
            "big_dec": None if i % 4 == 0 else decimal.Decimal(10**24 - i * 10**20).scaleb(-4),
            "qty": None if i % 3 == 0 else (i * 97) % 1000 - 500,
            "ratio": None if i % 8 == 0 else (float("nan") if i % 9 == 0 else i / 7.0),
            "price": None if i % 10 == 0 else (float("-inf") if i == 11 else i * 1.25),
            "ts": None if i % 11 == 0 else ts,
            "local_ts": None if i % 12 == 0 else ts.replace(tzinfo=None) - dt.timedelta(days=800),
            "day": None if i % 13 == 0 else ts.date() - dt.timedelta(days=400 * (i % 3)),
            "at": None if i % 5 == 1 else (ts + dt.timedelta(seconds=i)).time(),
            "flag": None if i % 2 == 0 else i % 4 == 1,
            "payload": None if i % 9 == 0 else (b"\xff" * (i % 20) if i % 2 else bytes(range(i % 30))),
            "digest": None if i % 6 == 1 else bytes([i % 256, 255, 0, i % 7]),
            "uid": None if i % 7 == 1 else uuid.UUID(int=i * 2**100 + i).bytes,
            "addr": None if i % 8 == 0 else {"city": None if i % 3 == 0 else f"city-{i % 4}", "zip": i % 1000},
            "tags": None if i % 10 == 0 else [f"tag-{i % 4}", None][: i % 3],
            "attrs": None if i % 4 == 1 else {f"k{i % 3}": i, "z": None},
            "empty": None,
            "top.dotted": f"dotted-{i}",
            "note": f"a fairly long note number {i:04d}",
        })
    return pa.Table.from_pylist(records, schema=schema_to_pyarrow(SCHEMA, include_field_ids=True))


def parquet_metadata(tmp_path, table: pa.Table, **options) -> pq.FileMetaData:
    path = tmp_path / f"f{len(list(tmp_path.iterdir()))}.parquet"
    pq.write_table(table, path, **options)
    return pq.ParquetFile(path).metadata


PROPERTIES = {
    "default (truncate(16))": {},
    "full": {"write.metadata.metrics.default": "full"},
    "counts": {"write.metadata.metrics.default": "counts"},
    "none": {"write.metadata.metrics.default": "none"},
    "truncate(4) with column modes": {"write.metadata.metrics.default": "truncate(4)",
                                      "write.metadata.metrics.column.id": "none",
                                      "write.metadata.metrics.column.price": "counts",
                                      "write.metadata.metrics.column.payload": "truncate(2)",
                                      "write.metadata.metrics.column.name": "full",
                                      "write.metadata.metrics.column.addr.city": "full"},
    "truncate(1)": {"write.metadata.metrics.default": "truncate(1)"},
}


def pyiceberg_statistics(metadata, properties: dict) -> dict:
    plan = compute_statistics_plan(SCHEMA, properties)
    return data_file_statistics_from_parquet_metadata(metadata, plan, parquet_path_to_id_mapping(SCHEMA)) \
        .to_serialized_dict()


def ours(metadata, properties: dict) -> dict:
    return file_statistics(metadata, stat_columns(compute_statistics_plan(SCHEMA, properties),
                                                  parquet_path_to_id_mapping(SCHEMA)))


def assert_same(mine: dict, theirs: dict) -> None:
    assert mine == theirs
    for name, value in theirs.items():  # and in the same order: the manifest writes the maps in it
        if isinstance(value, dict):
            assert list(mine[name].items()) == list(value.items()), name


@pytest.mark.parametrize("properties", list(PROPERTIES.values()), ids=list(PROPERTIES))
@pytest.mark.parametrize("options", [
    {"store_decimal_as_integer": True},  # the data-file writer's setting
    {"store_decimal_as_integer": False},  # decimals as fixed-length bytes
    {"store_decimal_as_integer": True, "row_group_size": 7},  # bounds and counts over several row groups
    {"store_decimal_as_integer": True, "use_dictionary": False, "compression": "none"},
], ids=["decimal-as-int", "decimal-as-fixed", "row-groups", "plain"])
def test_statistics_equal_pyiceberg(tmp_path, properties, options):
    metadata = parquet_metadata(tmp_path, rows(40), **options)
    theirs = pyiceberg_statistics(metadata, properties)
    assert_same(ours(metadata, properties), theirs)
    if options.get("row_group_size"):
        assert metadata.num_row_groups > 1 and len(theirs["split_offsets"]) == metadata.num_row_groups
    if not properties:  # the default mode really produced truncated bounds and counts of nested columns
        assert theirs["lower_bounds"] and theirs["upper_bounds"] and 21 in theirs["value_counts"]
        assert theirs["upper_bounds"][27] == b"a fairly long np"  # cut, last char + 1
        assert 2 in theirs["lower_bounds"] and 2 not in theirs["upper_bounds"]  # U+10FFFF...: no upper bound


def test_statistics_of_one_row_and_of_all_nulls(tmp_path):
    for table in (rows(1), rows(40).filter(pa.array([i % 7 == 0 for i in range(40)]))):
        metadata = parquet_metadata(tmp_path, table, store_decimal_as_integer=True)
        assert_same(ours(metadata, {}), pyiceberg_statistics(metadata, {}))


def test_unexpected_physical_type_fails_like_pyiceberg(tmp_path):
    """A column written with a physical type its Iceberg type does not allow: both refuse the file."""
    schema = Schema(NestedField(1, "n", IntegerType(), required=False))
    arrow = pa.schema([pa.field("n", pa.string(), metadata={b"PARQUET:field_id": b"1"})])
    metadata = parquet_metadata(tmp_path, pa.table({"n": ["a", "b"]}, schema=arrow))
    plan, ids = compute_statistics_plan(schema, {}), parquet_path_to_id_mapping(schema)
    with pytest.raises(ValueError) as theirs:
        data_file_statistics_from_parquet_metadata(metadata, plan, ids)
    with pytest.raises(ValueError) as mine:
        file_statistics(metadata, stat_columns(plan, ids))
    assert str(mine.value) == str(theirs.value)
