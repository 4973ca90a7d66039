"""Iceberg -> Arrow shape used by the decoders: deterministic and cached."""
from __future__ import annotations

import datetime as dt
import decimal

import pyarrow as pa

from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_to_iceberg
from tests.evolution.helpers import amap, arr, dec, logical, opt, rec

SCHEMA = rec(
    ("id", "long"), ("n", opt("int")), ("f", "float"), ("s", "string"), ("b", "bytes"),
    ("d", dec(12, 3)), ("ts", logical("long", "timestamp-millis")),
    ("lts", logical("long", "local-timestamp-micros")), ("day", logical("int", "date")),
    ("t", logical("long", "time-micros")), ("fx", {"type": "fixed", "name": "F", "size": 3}),
    ("tags", arr("string")), ("m", amap("long")), ("sub", rec(("x", "int"), name="Sub")),
)


def test_exact_arrow_types() -> None:
    a = iceberg_to_arrow(avro_to_iceberg(SCHEMA))
    expected = {
        "id": pa.int64(), "n": pa.int32(), "f": pa.float32(), "s": pa.large_string(),
        "b": pa.large_binary(), "d": pa.decimal128(12, 3), "ts": pa.timestamp("us", tz="UTC"),
        "lts": pa.timestamp("us"), "day": pa.date32(), "t": pa.time64("us"),
        "fx": pa.binary(3),
    }
    for name, typ in expected.items():
        assert a.field(name).type == typ, name
    assert a.field("tags").type == pa.large_list(pa.field("element", pa.large_string(), nullable=False))
    assert pa.types.is_map(a.field("m").type)
    assert a.field("sub").type == pa.struct([pa.field("x", pa.int32(), nullable=False)])
    assert not a.field("id").nullable and a.field("n").nullable
    assert not a.field("id").metadata  # no field ids: shape depends on names and types only


def test_cached_and_id_independent() -> None:
    s1 = avro_to_iceberg(SCHEMA)
    s2 = avro_to_iceberg(SCHEMA)
    assert iceberg_to_arrow(s1) is iceberg_to_arrow(s2)


def test_decoded_rows_cast_to_shape() -> None:
    shape = iceberg_to_arrow(avro_to_iceberg(rec(("id", "long"), ("d", dec(12, 3)),
                                                 ("ts", logical("long", "timestamp-micros")))))
    raw = pa.table({"id": pa.array([1, 2], pa.int64()),
                    "d": pa.array([decimal.Decimal("1.500"), decimal.Decimal("2.250")], pa.decimal128(12, 3)),
                    "ts": pa.array([dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)] * 2,
                                   pa.timestamp("ms", tz="UTC"))})
    cast = raw.cast(shape)
    assert cast.schema == shape
    assert cast.column("ts").to_pylist()[0] == dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc)
