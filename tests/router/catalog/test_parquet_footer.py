"""The Parquet footer codec (router/catalog/parquet_footer.py): footers written by pyarrow and by DuckDB
decode and encode back byte for byte, and the VARIANT annotation it adds is the one DuckDB writes."""

from __future__ import annotations

import io

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from router.catalog.parquet_footer import AnnotatingStream, annotate_variant_groups, decode_struct, encode_struct


def footer(data: bytes) -> bytes:
    n = int.from_bytes(data[-8:-4], "little")
    return data[-8 - n:-8]


def duckdb_variant_file(tmp_path) -> bytes:
    path = tmp_path / "duck.parquet"
    duckdb.sql(f"""COPY (SELECT '{{"a": 1}}'::JSON::VARIANT AS v, 1.5::DOUBLE AS d, [true] AS l)
                   TO '{path}'""")
    return path.read_bytes()


def pyarrow_file(**kwargs) -> bytes:
    sink = io.BytesIO()
    ids = lambda i: {b"PARQUET:field_id": str(i)}  # noqa: E731
    struct = pa.struct([pa.field("metadata", pa.binary(), False), pa.field("value", pa.binary(), False)])
    schema = pa.schema([pa.field("id", pa.int64(), metadata=ids(1)), pa.field("v", struct, metadata=ids(2)),
                        pa.field("m", pa.map_(pa.string(), pa.float64()), metadata=ids(3))])
    rows = pa.table({"id": [1, 2], "v": [{"metadata": b"\x01\x00\x00", "value": b"\x0c\x05"}, None],
                     "m": [[("k", 1.0)], []]}, schema=schema)
    with pq.ParquetWriter(sink, schema, **kwargs) as writer:
        writer.write_table(rows)
    return sink.getvalue()


def test_footers_round_trip_byte_for_byte(tmp_path):
    for data in (duckdb_variant_file(tmp_path), pyarrow_file(), pyarrow_file(compression="zstd")):
        assert encode_struct(decode_struct(footer(data))) == footer(data)


def test_the_annotation_is_duckdbs(tmp_path):
    theirs = [e for e in decode_struct(footer(duckdb_variant_file(tmp_path))).get(2)[1] if e.get(4) == b"v"][0]
    ours = decode_struct(annotate_variant_groups(footer(pyarrow_file()), {2})).get(2)[1]
    [annotated] = [e for e in ours if e.get(4) == b"v"]
    assert annotated.get(10) == theirs.get(10) == [[16, 12, [[1, 3, 1]]]]  # LogicalType.VARIANT(version 1)
    assert [e.get(10) for e in ours if e.get(4) == b"id"] == [None]


def test_the_annotating_stream_rewrites_only_the_footer(tmp_path):
    plain = pyarrow_file()
    sink = io.BytesIO()
    stream = AnnotatingStream(sink, {2})
    schema = pq.read_schema(io.BytesIO(plain))
    writer = pq.ParquetWriter(stream, schema)
    writer.write_table(pq.read_table(io.BytesIO(plain)))
    stream.hold()
    writer.close()
    stream.finish()
    data = sink.getvalue()
    assert stream.tell() == len(data) and data[:4] == b"PAR1" and data[-4:] == b"PAR1"
    assert "Variant" in str(pq.ParquetFile(io.BytesIO(data)).schema)
    path = tmp_path / "annotated.parquet"
    path.write_bytes(data)
    assert duckdb.sql(f"SELECT id, v::JSON, v IS NULL, typeof(v) FROM '{path}' ORDER BY id").fetchall() == [
        (1, "5", False, "VARIANT"), (2, "null", True, "VARIANT")]
    assert pq.read_schema(io.BytesIO(data)).field("v").type.names == ["metadata", "value"]
