"""The columnar (polars) path detects misaligned records that polars itself misses."""
from __future__ import annotations

import dataclasses
import io
import json

import fastavro
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

from registry.artifacts import build_artifacts
from registry.avro_columnar import SYNC, ColumnarDecoder, _varint, container_header, reader_schema

SCHEMA = {"type": "record", "name": "Longs", "fields": [
    {"name": "a", "type": "long"}, {"name": "b", "type": "long"}]}


def _payload(i: int) -> bytes:
    buf = io.BytesIO()
    fastavro.schemaless_writer(buf, SCHEMA, {"a": i, "b": -i})
    return buf.getvalue()


def test_polars_alone_silently_misreads_a_shifted_block():
    """Evidence for the check column: one extra byte shifts all later rows, no error."""
    payloads = [_payload(i) for i in range(50)]
    payloads[20] += b"\x02"
    data = b"".join(payloads)
    block = container_header(json.dumps(SCHEMA)) + _varint(50) + _varint(len(data)) + data + SYNC
    df = pl.read_avro(io.BytesIO(block))
    assert df.height == 50
    assert df["a"].to_list()[:21] == list(range(21))
    assert df["a"].to_list()[21:] != list(range(21, 50))


def test_check_column_isolates_the_shifted_record():
    art = build_artifacts(1, "AVRO", json.dumps(SCHEMA))
    assert art.columnar
    framed = [b"\x00\x00\x00\x00\x01" + _payload(i) for i in range(50)]
    framed[20] += b"\x02"
    batch, positions, bad = art.decoder.decode(pa.array(framed, type=pa.binary()), 5)
    assert bad == []
    rows = dict(zip(positions.tolist(), batch.to_pylist()))
    assert rows == {i: {"a": i, "b": -i} for i in range(50)}
    assert art.decoder.stats["misaligned"] == 1
    assert art.decoder.stats["per_record_rows"] == 1      # only record 20 left the fast path
    assert art.decoder.stats["reader_errors"] == 0


def test_reader_errors_are_bisected_to_the_bad_record():
    art = build_artifacts(1, "AVRO", json.dumps(SCHEMA))
    framed = [b"\x00\x00\x00\x00\x01" + _payload(i) for i in range(1_000)]
    framed[777] = framed[777][:5] + b"\xff\xff"       # unterminated varint: a reader error
    batch, positions, bad = art.decoder.decode(pa.array(framed, type=pa.binary()), 5)
    assert [pos for pos, _ in bad] == [777]
    assert sorted(positions.tolist()) == [i for i in range(1_000) if i != 777]
    assert art.decoder.stats["per_record_rows"] <= 32


def test_schema_polars_cannot_read_falls_back_to_per_record_for_good():
    """If polars fails where fastavro decodes everything, stop asking polars."""
    schema = {"type": "record", "name": "Dur", "fields": [
        {"name": "a", "type": "long"},
        {"name": "d", "type": {"type": "fixed", "name": "D12", "size": 12, "logicalType": "duration"}}]}
    art = build_artifacts(1, "AVRO", json.dumps(schema))
    assert not art.columnar                      # known: polars panics on duration
    records = art.decoder.inner                  # build the columnar decoder anyway
    art = dataclasses.replace(art, decoder=ColumnarDecoder(schema, art.arrow_schema, records))
    recs = [{"a": i, "d": bytes(range(12))} for i in range(3_000)]
    framed = []
    for rec in recs:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, schema, rec)
        framed.append(b"\x00\x00\x00\x00\x01" + buf.getvalue())
    batch, positions, bad = art.decoder.decode(pa.array(framed, type=pa.binary()), 5)
    assert bad == [] and sorted(positions.tolist()) == list(range(3_000))
    rows = dict(zip(positions.tolist(), batch.to_pylist()))
    assert rows == dict(enumerate(recs))
    assert art.decoder.disabled
    assert art.decoder.stats["reader_disagreements"] == 3
    assert art.decoder.stats["reads"] < 30


def test_decimal_beyond_iceberg_precision_stays_bytes():
    schema = {"type": "record", "name": "Big", "fields": [
        {"name": "b", "type": {"type": "bytes", "logicalType": "decimal", "precision": 50, "scale": 2}},
        {"name": "f", "type": {"type": "fixed", "name": "F", "size": 24, "logicalType": "decimal",
                               "precision": 55, "scale": 0}}]}
    art = build_artifacts(1, "AVRO", json.dumps(schema))
    assert not art.columnar and str(art.arrow_schema.field("b").type) == "large_binary"
    buf = io.BytesIO()
    from decimal import Decimal
    fastavro.schemaless_writer(buf, schema, {"b": Decimal("-1.25"), "f": Decimal(10 ** 40)})
    batch, positions, bad = art.decoder.decode(pa.array([b"\x00\x00\x00\x00\x01" + buf.getvalue()]), 5)
    assert bad == []
    row = batch.to_pylist()[0]
    assert int.from_bytes(row["b"], "big", signed=True) == -125
    assert row["f"] == (10 ** 40).to_bytes(24, "big", signed=True)


ENVELOPE = {"type": "record", "name": "Envelope", "namespace": "db.public.customers", "fields": [
    {"name": "before", "type": ["null", {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": "long"},
        {"name": "code", "type": {"type": "fixed", "name": "Code", "size": 2}},
        {"name": "email", "type": ["null", "string"], "default": None}]}], "default": None},
    {"name": "after", "type": ["null", "Value"], "default": None},       # a reference, as Debezium writes it
    {"name": "history", "type": {"type": "array", "items": "db.public.customers.Value"}},
    {"name": "tier", "type": {"type": "enum", "name": "Tier", "symbols": ["free", "pro"]}},
    {"name": "plan", "type": "Tier"},
    {"name": "op", "type": "string"}]}


def test_named_references_are_read_columnar_as_the_per_record_decoder_reads_them():
    """polars fails a block whose schema names a type defined earlier: the reader schema spells it out."""
    def value(i):
        return {"id": i, "code": b"%02d" % (i % 100), "email": None if i % 3 else f"c{i}@x"}

    records = [{"before": None if i % 4 == 0 else value(i), "after": None if i % 4 == 3 else value(-i),
                "history": [value(i + k) for k in range(i % 3)], "tier": "free", "plan": "pro" if i % 2 else "free",
                "op": "curd"[i % 4]}
               for i in range(2_000)]
    framed = []
    for rec in records:
        buf = io.BytesIO()
        fastavro.schemaless_writer(buf, fastavro.parse_schema(json.loads(json.dumps(ENVELOPE))), rec)
        framed.append(b"\x00\x00\x00\x00\x01" + buf.getvalue())
    art = build_artifacts(1, "AVRO", json.dumps(ENVELOPE))
    assert art.columnar
    batch, positions, bad = art.decoder.decode(pa.array(framed, type=pa.binary()), 5)
    assert bad == [] and positions.tolist() == list(range(2_000))
    assert art.decoder.stats["reader_errors"] == 0 and art.decoder.stats["per_record_rows"] == 0
    expected, _, _ = art.decoder.fallback.decode(pa.array(framed, type=pa.binary()), 5)
    assert batch.schema == art.arrow_schema
    assert batch.to_pylist() == expected.to_pylist()
    assert batch.to_pylist()[3]["after"] is None and batch.to_pylist()[4]["before"] is None
    assert batch.column("before").field("id").null_count == 0   # required children of absent records: zeros
    pq.write_table(pa.Table.from_batches([batch]), io.BytesIO())  # which a Parquet writer insists on


def test_reader_schema_spells_out_references_and_leaves_recursion_alone():
    spelled = reader_schema(ENVELOPE)
    text = json.dumps(spelled)
    assert '"Value"' in text and '"type": ["null", "Value"]' not in json.dumps(spelled["fields"][1])
    after = spelled["fields"][1]["type"][1]
    assert after["type"] == "record" and after["name"] != "Value" and after["namespace"] == "db.public.customers"
    assert spelled["fields"][2]["type"]["items"]["type"] == "record"
    assert spelled["fields"][4]["type"]["type"] == "enum" and spelled["fields"][4]["type"]["name"] != "Tier"
    fastavro.parse_schema(json.loads(text))       # a valid schema: no name defined twice
    tree = {"type": "record", "name": "Node", "fields": [
        {"name": "children", "type": {"type": "array", "items": "Node"}}]}
    assert reader_schema(tree) == tree


def test_small_inputs_take_the_per_record_path_with_the_same_result():
    """Below `per_record_below` rows (from the schema's leaf count) the whole input is decoded per
    record; the rows, positions and failures are those of the columnar path."""
    from scripts.perf import workload

    schema = workload.bench_schema(0)
    pool = workload.payload_pool(40)
    art = build_artifacts(1, "AVRO", json.dumps(schema))
    assert art.columnar and art.decoder.per_record_below == 48  # 15 leaf columns
    narrow = build_artifacts(2, "AVRO", json.dumps(SCHEMA))
    assert narrow.decoder.per_record_below == 48  # capped: a 50-row input still goes columnar
    framed = [b"\x00\x00\x00\x00\x01" + p for p in pool[:30]]
    framed[7] = framed[7][:40]  # truncated: a failure either way
    values = pa.array(framed, type=pa.binary())
    small = art.decoder.decode(values, 5)
    assert art.decoder.stats["reads"] == 0 and art.decoder.stats["per_record_rows"] == 30
    forced = build_artifacts(1, "AVRO", json.dumps(schema))
    forced.decoder.per_record_below = 0
    columnar = forced.decoder.decode(values, 5)
    assert forced.decoder.stats["reads"] >= 1
    assert small[0].equals(columnar[0]) and small[0].num_rows == 29
    assert small[1].tolist() == columnar[1].tolist() and [p for p, _ in small[2]] == [p for p, _ in columnar[2]] == [7]
