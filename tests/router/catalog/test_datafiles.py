"""The lean data-file writer against pyiceberg's own writer, on real SQLite and PostgreSQL catalogs.

Every file ``write_data_files`` writes is committed with a fast append and read
back by pyiceberg and by DuckDB; its DataFile must equal, field by field, the
one pyiceberg's ``_dataframe_to_data_files`` produces for the same rows (only
the path and the size may differ, as the names carry a fresh uuid).
"""

from __future__ import annotations

import datetime as dt
import decimal
import math
import os
import re

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from pyiceberg.expressions import EqualTo, IsNull
from pyiceberg.io.pyarrow import _dataframe_to_data_files, schema_to_pyarrow
from pyiceberg.manifest import DATA_FILE_TYPE, DEFAULT_READ_VERSION
from pyiceberg.partitioning import PartitionField, PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.locations import load_location_provider
from pyiceberg.transforms import (
    BucketTransform, DayTransform, HourTransform, IdentityTransform, MonthTransform, TruncateTransform, YearTransform,
)
from pyiceberg.types import StringType

from router.catalog import datafiles, rolling
from router.catalog.datafiles import write_data_files
from router.catalog import DEFAULT_TABLE_PROPERTIES
from scripts.perf.components.writer import SCHEMA  # every kind of column the writer converts
from tests.duckdb_reader import read_iceberg

BASE = dt.datetime(2026, 10, 30, 22, tzinfo=dt.timezone.utc)
ROWS = 240

SPECS = {
    "unpartitioned": [],
    "identity": [PartitionField(2, 1000, IdentityTransform(), "name")],
    "day": [PartitionField(6, 1000, DayTransform(), "ts_day")],
    "bucket": [PartitionField(1, 1000, BucketTransform(16), "id_bucket")],
    "truncate": [PartitionField(2, 1000, TruncateTransform(3), "name_trunc")],
    "hour_month_year": [PartitionField(6, 1000, HourTransform(), "ts_hour"),
                        PartitionField(7, 1001, MonthTransform(), "local_month"),
                        PartitionField(8, 1002, YearTransform(), "day_year")],
    "decimal_identity": [PartitionField(3, 1000, IdentityTransform(), "amount")],
}
# A value of each partition source present in the data, to check pruning on it.
PROBES = {"unpartitioned": ("id", 7), "identity": ("name", "beta-1"), "day": ("ts", BASE + dt.timedelta(hours=7)),
          "bucket": ("id", 7), "truncate": ("name", "beta-1"), "hour_month_year": ("ts", BASE + dt.timedelta(hours=7)),
          "decimal_identity": ("amount", decimal.Decimal("2.25"))}


def sample(rows: int = ROWS, offset: int = 0) -> pa.Table:
    """Rows with nulls in every column (partition sources too), nested values, decimals and timestamps."""
    arrow_schema = schema_to_pyarrow(SCHEMA, include_field_ids=False)
    names = ["alpha", "beta-1", "beta-2", "gamma", "zeta-long-name-over-sixteen-chars"]
    records = []
    for i in range(offset, offset + rows):
        ts = BASE + dt.timedelta(hours=i % 60)
        records.append({
            "id": None if i == offset + 3 else i,
            "name": None if i % 17 == 0 else names[i % len(names)],
            "amount": None if i % 13 == 0 else decimal.Decimal(i % 4 * 50 - 25).scaleb(-2) + 2,
            "qty": None if i % 5 == 0 else i % 100,
            "price": None if i % 19 == 0 else (i * 1.25 if i % 7 else float("nan")),
            "ts": None if i % 23 == 0 else ts,
            "local_ts": None if i % 29 == 0 else (ts.replace(tzinfo=None) + dt.timedelta(days=i % 40)),
            "day": None if i % 31 == 0 else (ts.date() - dt.timedelta(days=400 * (i % 3))),
            "flag": None if i % 11 == 0 else i % 2 == 0,
            "payload": None if i % 9 == 0 else bytes([i % 256]) * (i % 40),
            "addr": None if i % 8 == 0 else {"city": None if i % 3 == 0 else f"city-{i % 4}", "zip": i % 1000},
            "tags": None if i % 10 == 0 else [f"t{i % 4}", None][: i % 3],
        })
    return pa.Table.from_pylist(records, schema=arrow_schema)


def plain(rows: list[dict]) -> list[dict]:
    """NaN spelled out: NaN != NaN would fail every comparison."""
    return [{k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()} for r in rows]


def by_id(rows: list[dict]) -> list[dict]:
    return sorted(plain(rows), key=lambda r: (r["id"] is None, r["id"] or 0))


def described(data_file) -> dict:
    """A DataFile as {field name: value}, without what depends on the file's uuid."""
    names = [f.name for f in DATA_FILE_TYPE[DEFAULT_READ_VERSION].fields]
    d = dict(zip(names, data_file._data))
    d.pop("file_path"), d.pop("file_size_in_bytes")
    return d


def make_table(catalog, unique_name, spec: str = "unpartitioned", schema: Schema = SCHEMA, **properties):
    ns = unique_name("dfw")
    catalog.create_namespace(ns)
    fields = SPECS[spec]
    return catalog.create_table(f"{ns}.t", schema=schema, partition_spec=PartitionSpec(*fields),
                                properties={**DEFAULT_TABLE_PROPERTIES, **properties})


def append(table, files) -> None:
    with table.transaction() as tx:
        with tx.update_snapshot().fast_append() as snapshot:
            for f in files:
                snapshot.append_data_file(f)


def opened(table, path: str):
    """A data file opened through the table's FileIO (local disk or object storage)."""
    return table.io.new_input(path).open()


def assert_same_files(table, ours, theirs, *, same_codec: bool = True) -> None:
    """Field by field equal to pyiceberg's DataFiles, same Parquet schema (field ids included), real sizes.
    Without `same_codec`, the column sizes (bytes on disk) may differ."""
    ours, theirs = (sorted(files, key=lambda f: str(f.partition._data)) for files in (ours, theirs))  # stable
    drop = () if same_codec else ("column_sizes",)
    assert ([{k: v for k, v in described(f).items() if k not in drop} for f in ours]
            == [{k: v for k, v in described(f).items() if k not in drop} for f in theirs])
    for mine, ref in zip(ours, theirs):
        assert mine.file_size_in_bytes == len(table.io.new_input(mine.file_path))
        assert os.path.dirname(mine.file_path) == os.path.dirname(ref.file_path)  # partition directory
        mine_schema = pq.ParquetFile(opened(table, mine.file_path)).schema_arrow
        assert mine_schema.equals(pq.ParquetFile(opened(table, ref.file_path)).schema_arrow, check_metadata=True)
        rows = [plain(pq.read_table(opened(table, f.file_path)).to_pylist()) for f in (mine, ref)]
        assert rows[0] == rows[1]  # same rows in the same order


@pytest.mark.parametrize("spec", list(SPECS))
def test_files_equal_pyiceberg_and_read_back(catalog, unique_name, spec):
    table = make_table(catalog, unique_name, spec)
    data = sample()
    ours = write_data_files(table, data)
    theirs = list(_dataframe_to_data_files(table.metadata, data, table.io))
    assert_same_files(table, ours, theirs)
    if spec != "unpartitioned":  # one file per partition value, nulls being one of them
        assert len(ours) > 1
        assert any(any(v is None for v in f.partition._data) for f in ours)
    assert sum(f.record_count for f in ours) == ROWS

    append(table, ours)
    table = catalog.load_table(table.name())
    expected = by_id(data.to_pylist())
    assert by_id(table.scan().to_arrow().to_pylist()) == expected
    assert by_id(read_iceberg(table).to_pylist()) == expected

    # Partition values and bounds drive pruning: a wrong one loses these rows.
    column, value = PROBES[spec]
    want = data.filter(pc.field(column) == value)
    assert want.num_rows > 0
    got = table.scan(row_filter=EqualTo(column, value)).to_arrow()
    assert by_id(got.to_pylist()) == by_id(want.to_pylist())
    nulls = table.scan(row_filter=IsNull(column)).to_arrow()
    assert nulls.num_rows == data.column(column).null_count > 0


def test_metrics_modes_codec_and_truncation(catalog, unique_name):
    props = {"write.metadata.metrics.default": "truncate(4)", "write.metadata.metrics.column.price": "none",
             "write.metadata.metrics.column.qty": "counts", "write.metadata.metrics.column.id": "full",
             "write.parquet.compression-codec": "snappy", "write.parquet.row-group-limit": "50"}
    table = make_table(catalog, unique_name, "identity", **props)
    data = sample()
    ours = write_data_files(table, data)
    assert_same_files(table, ours, list(_dataframe_to_data_files(table.metadata, data, table.io)))
    f = max(ours, key=lambda f: f.record_count)
    assert 5 not in f.value_counts and 5 not in f.lower_bounds  # price: none
    assert 4 in f.null_value_counts and 4 not in f.lower_bounds  # qty: counts
    assert 1 in f.upper_bounds  # id: full
    long_name = next(f for f in ours if f.partition._data == ["zeta-long-name-over-sixteen-chars"])
    assert long_name.lower_bounds[2] == b"zeta"  # truncate(4)
    meta = pq.ParquetFile(opened(table, f.file_path)).metadata
    assert meta.row_group(0).column(0).compression == "SNAPPY"
    assert meta.num_row_groups == -(-f.record_count // 50)


@pytest.mark.parametrize("spec", ["unpartitioned", "identity"])
def test_a_small_write_takes_the_transient_codec_and_a_big_one_the_tables(catalog, unique_name, spec):
    """Files a merge rewrites soon may skip the table's codec: same DataFiles as pyiceberg's but for
    size, read back the same; a write over TRANSIENT_MAX_BYTES keeps the table's codec."""
    table = make_table(catalog, unique_name, spec)
    data = sample()
    assert data.nbytes < datafiles.TRANSIENT_MAX_BYTES
    ours = write_data_files(table, data, transient_codec="none")
    assert_same_files(table, ours, list(_dataframe_to_data_files(table.metadata, data, table.io)), same_codec=False)
    codecs = {pq.ParquetFile(opened(table, f.file_path)).metadata.row_group(0).column(c).compression
              for f in ours for c in range(len(data.schema))}
    assert codecs == {"UNCOMPRESSED"}

    big = pa.concat_tables([sample(offset=k * ROWS) for k in range(2 + datafiles.TRANSIENT_MAX_BYTES // data.nbytes)])
    assert big.nbytes >= datafiles.TRANSIENT_MAX_BYTES
    big_files = write_data_files(table, big, transient_codec="none")
    assert {pq.ParquetFile(opened(table, f.file_path)).metadata.row_group(0).column(0).compression
            for f in big_files} == {"ZSTD"}  # DEFAULT_TABLE_PROPERTIES

    append(table, ours + big_files)
    table = catalog.load_table(table.name())
    def rows(t: pa.Table) -> list[dict]:  # several rows have a null id: every column orders them
        return sorted(plain(t.to_pylist()), key=lambda r: str(r).replace("Etc/UTC", "UTC"))
    expected = rows(pa.concat_tables([data, big]))
    assert rows(table.scan().to_arrow()) == expected
    assert rows(read_iceberg(table)) == expected


def test_target_file_size_splits_like_pyiceberg(catalog, unique_name):
    table = make_table(catalog, unique_name, "unpartitioned", **{"write.target-file-size-bytes": "16384"})
    data = sample(2000)
    ours = write_data_files(table, data)
    assert len(ours) > 2
    assert_same_files(table, ours, list(_dataframe_to_data_files(table.metadata, data, table.io)))
    append(table, ours)
    assert table.scan().to_arrow().num_rows == 2000


def test_object_store_locations(catalog, unique_name):
    table = make_table(catalog, unique_name, "day", **{"write.object-storage.enabled": "true"})
    ours = write_data_files(table, sample())
    provider = load_location_provider(table.metadata.location, table.metadata.properties)
    spec = table.spec()
    for f in ours:
        key = PartitionKey([PartitionFieldValue(pf, v) for pf, v in zip(spec.fields, f.partition._data)],
                           spec, table.schema())
        assert f.file_path == provider.new_data_location(os.path.basename(f.file_path), key)
        hashed = r"/data/[01]{4}/[01]{4}/[01]{4}/[01]+/ts_day=[^/]+/00000-\d+-[0-9a-f-]+\.parquet$"
        assert re.search(hashed, f.file_path)
    names = sorted(os.path.basename(f.file_path) for f in ours)
    uid = names[0].split("-", 2)[2]
    assert names == sorted(f"00000-{i}-{uid}" for i in range(len(ours)))


def test_input_that_needs_casts_takes_pyiceberg_projection(catalog, unique_name):
    """Reordered columns, a narrower int, millisecond timestamps, a missing optional column."""
    table = make_table(catalog, unique_name, "identity")
    data = sample()
    odd = pa.table({
        "ts": data.column("ts").cast(pa.timestamp("ms", "UTC")),
        "id": data.column("id").cast(pa.int32()),
        **{n: data.column(n) for n in data.column_names if n not in ("ts", "id", "tags")},
    })
    ours = write_data_files(table, odd)
    assert_same_files(table, ours, list(_dataframe_to_data_files(table.metadata, odd, table.io)))
    append(table, ours)
    got = by_id(catalog.load_table(table.name()).scan().to_arrow().to_pylist())
    assert got == by_id(data.set_column(11, "tags", pa.nulls(ROWS, data.schema.field("tags").type)).to_pylist())


def test_schema_evolution_gets_a_new_plan(catalog, unique_name):
    table = make_table(catalog, unique_name, "bucket")
    append(table, write_data_files(table, sample(50)))
    with table.update_schema() as update:
        update.add_column("note", StringType())
    with table.update_spec() as update:
        update.add_field("name", IdentityTransform(), "name_id")
    table = catalog.load_table(table.name())
    more = sample(50, offset=1000)
    more = more.append_column("note", pa.array([f"n{i}" for i in range(50)], pa.large_string()))
    ours = write_data_files(table, more)
    assert table.metadata.default_spec_id == 1
    assert {len(f.partition._data) for f in ours} == {2}  # bucket(id) and the new identity(name)
    assert_same_files(table, ours, list(_dataframe_to_data_files(table.metadata, more, table.io)))
    append(table, ours)
    got = catalog.load_table(table.name()).scan().to_arrow()
    assert got.num_rows == 100
    assert sorted(v for v in got.column("note").to_pylist() if v) == sorted(f"n{i}" for i in range(50))


def test_write_properties_take_effect_and_other_properties_keep_the_plan(catalog, unique_name):
    table = make_table(catalog, unique_name)
    write_data_files(table, sample(5))
    plans = len(datafiles._plans)
    with table.transaction() as tx:  # what every commit of the job does
        tx.set_properties({"icerouter.offsets.q": '{"batch": 7}'})
    assert pq.ParquetFile(opened(table, write_data_files(table, sample(5))[0].file_path)).metadata.row_group(0).column(0) \
        .compression == "ZSTD"
    assert len(datafiles._plans) == plans
    with table.transaction() as tx:
        tx.set_properties({"write.parquet.compression-codec": "gzip"})
    ours = write_data_files(table, sample(5))
    assert pq.ParquetFile(opened(table, ours[0].file_path)).metadata.row_group(0).column(0).compression == "GZIP"
    assert len(datafiles._plans) == plans + 1


def test_cache_is_bounded_and_empty_input_writes_nothing(catalog, unique_name, monkeypatch):
    monkeypatch.setattr(datafiles, "_plans", datafiles.LRUCache(maxsize=2))
    tables = [make_table(catalog, unique_name) for _ in range(3)]
    for t in tables:
        write_data_files(t, sample(5))
    assert len(datafiles._plans) == 2
    assert write_data_files(tables[0], sample(0)) == []


# ----------------------------------------------------------------------------- the rolling writer (compaction)

STATS = ("content", "file_format", "partition", "record_count", "value_counts", "null_value_counts",
         "nan_value_counts", "lower_bounds", "upper_bounds", "spec_id")


def stats_of(data_file) -> dict:
    """What a reader prunes and plans with: the same whatever the row groups are."""
    return {k: v for k, v in described(data_file).items() if k in STATS}


@pytest.mark.parametrize("spec", ["unpartitioned", "identity", "hour_month_year"])
def test_rolling_writer_streams_batches_into_one_file_per_partition_with_pyiceberg_statistics(
        catalog, unique_name, spec):
    table = make_table(catalog, unique_name, spec)
    data = sample()
    writer = rolling.RollingWriter(table, target_file_size=1 << 30, buffer_bytes=1)  # every batch a row group
    for batch in data.to_batches(max_chunksize=20):
        writer.write(batch)
    ours = writer.close()
    theirs = list(_dataframe_to_data_files(table.metadata, data, table.io))
    key = lambda f: str(f.partition._data)  # noqa: E731
    assert [stats_of(f) for f in sorted(ours, key=key)] == [stats_of(f) for f in sorted(theirs, key=key)]
    for mine, ref in zip(sorted(ours, key=key), sorted(theirs, key=key)):
        assert mine.file_size_in_bytes == len(table.io.new_input(mine.file_path))
        assert os.path.dirname(mine.file_path) == os.path.dirname(ref.file_path)
        parquet = pq.ParquetFile(opened(table, mine.file_path))
        assert parquet.schema_arrow.equals(pq.ParquetFile(opened(table, ref.file_path)).schema_arrow,
                                           check_metadata=True)  # field ids
        assert plain(parquet.read().to_pylist()) == plain(pq.read_table(opened(table, ref.file_path)).to_pylist())
    assert sum(pq.ParquetFile(opened(table, f.file_path)).metadata.num_row_groups for f in ours) > len(ours)
    assert writer.rows == ROWS and sorted(writer.paths) == sorted(f.file_path for f in ours)

    append(table, ours)
    expected = by_id(data.to_pylist())
    assert by_id(catalog.load_table(table.name()).scan().to_arrow().to_pylist()) == expected
    assert by_id(read_iceberg(catalog.load_table(table.name())).to_pylist()) == expected
    column, value = PROBES[spec]
    got = catalog.load_table(table.name()).scan(row_filter=EqualTo(column, value)).to_arrow()
    assert by_id(got.to_pylist()) == by_id(data.filter(pc.field(column) == value).to_pylist())


def test_rolling_writer_rolls_over_at_the_target_size_on_disk(catalog, unique_name):
    table = make_table(catalog, unique_name)
    data = sample(3000)
    target = 24 * 1024
    writer = rolling.RollingWriter(table, target_file_size=target, buffer_bytes=16 * 1024)
    for batch in data.to_batches(max_chunksize=100):
        writer.write(batch)
    ours = writer.close()
    sizes = [f.file_size_in_bytes for f in ours]
    assert len(ours) > 2 and sum(f.record_count for f in ours) == 3000
    assert all(s >= target for s in sizes[:-1]) and sizes[-1] <= max(sizes)  # every file but the last is full
    assert all(s < 2 * target for s in sizes)  # rolled at the first row group past the target
    append(table, ours)
    assert by_id(read_iceberg(catalog.load_table(table.name())).to_pylist()) == by_id(data.to_pylist())


def test_rolling_writer_abort_names_every_file_it_started(catalog, unique_name):
    table = make_table(catalog, unique_name, "identity")
    writer = rolling.RollingWriter(table, target_file_size=1 << 30, buffer_bytes=1)
    writer.write(sample(60))
    paths = writer.abort()
    assert len(paths) == len(set(paths)) == 6  # one open file per name (five names and null)
    assert all(table.io.new_input(p).exists() for p in paths)
    assert writer.close() == []  # nothing left to describe
