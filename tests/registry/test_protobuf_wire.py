"""The fast Protobuf paths (wire-level columns, one upb parse a batch) against the per-record path:
the same values for every supported type and for unusual but valid bytes, the same failures for
bad rows, and the fallbacks taken where a fast path must not guess."""
from __future__ import annotations

import random
import struct

import pyarrow as pa
import pytest

import registry.protobuf_decode as protobuf_decode
from registry.artifacts import build_artifacts, protobuf_message_artifacts
from registry.protobuf_schema import _varint, encode_message_indexes
from tests import protobuf_data as pb

WIRE = """syntax = "proto3";
package wire;
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";

enum Color { RED = 0; GREEN = 1; BLUE = 2; }

message Rec {
  int32 i32 = 1; sint32 s32 = 2; sfixed32 sf32 = 3; int64 i64 = 4; sint64 s64 = 5; sfixed64 sf64 = 6;
  uint32 u32 = 7; fixed32 f32 = 8; uint64 u64 = 9; fixed64 f64 = 10; float fl = 11; double db = 12;
  bool b = 13; string s = 14; bytes by = 15; Color color = 16;
  google.protobuf.Timestamp at = 17; google.protobuf.Duration took = 18;
  google.protobuf.Int32Value w_i32 = 19; google.protobuf.Int64Value w_i64 = 20;
  google.protobuf.UInt32Value w_u32 = 21; google.protobuf.UInt64Value w_u64 = 22;
  google.protobuf.FloatValue w_fl = 23; google.protobuf.DoubleValue w_db = 24;
  google.protobuf.BoolValue w_b = 25; google.protobuf.StringValue w_s = 26; google.protobuf.BytesValue w_by = 27;
  optional int64 opt = 28; optional string opt_s = 29;
  oneof pick { string p_text = 30; int32 p_num = 31; Inner p_inner = 32; }
  message Inner {
    string name = 1; repeated int32 nums = 2; Deep deep = 3;
    message Deep { sint64 d = 1; bytes raw = 2; }
  }
  Inner inner = 33;
  repeated Inner inners = 34;
  repeated int32 r_i32 = 35; repeated sint64 r_s64 = 36; repeated fixed32 r_f32 = 37; repeated double r_db = 38;
  repeated bool r_b = 39; repeated Color r_color = 40; repeated string r_s = 41; repeated bytes r_by = 42;
  repeated google.protobuf.Timestamp r_at = 43; repeated uint64 r_u64 = 44;
  string far = 3000; int64 farther = 536870911;
}
"""

PROTO2 = """syntax = "proto2";
package old;
enum Level { LOW = 1; HIGH = 2; }
message Rec {
  optional int32 a = 1 [default = 7]; optional Level level = 2; optional string s = 3; repeated int32 xs = 4;
}
"""


@pytest.fixture(scope="module")
def art():
    return build_artifacts(11, "PROTOBUF", WIRE)


def cls_of(art, indexes=(0,)):
    return pb.message_class(art.parsed.file, indexes)


def random_rec(cls, rng: random.Random):
    m = cls()
    ints = [0, 1, -1, 127, 128, 300, 2**31 - 1, -(2**31), 16383, 16384]
    longs = ints + [2**63 - 1, -(2**63), 2**40]
    pick = rng.random

    def maybe(p=0.6):
        return pick() < p
    if maybe(): m.i32 = rng.choice(ints)
    if maybe(): m.s32 = rng.choice(ints)
    if maybe(): m.sf32 = rng.choice(ints)
    if maybe(): m.i64 = rng.choice(longs)
    if maybe(): m.s64 = rng.choice(longs)
    if maybe(): m.sf64 = rng.choice(longs)
    if maybe(): m.u32 = rng.choice([0, 1, 2**32 - 1, 2**31])
    if maybe(): m.f32 = rng.choice([0, 7, 2**32 - 1])
    if maybe(): m.u64 = rng.choice([0, 1, 2**64 - 1, 2**63])
    if maybe(): m.f64 = rng.choice([0, 5, 2**64 - 1])
    if maybe(): m.fl = rng.choice([0.0, 1.5, -2.25, 3.4e38, 1e-45])
    if maybe(): m.db = rng.choice([0.0, -0.0, 1e300, -5e-324, rng.random()])
    if maybe(): m.b = rng.random() < 0.5
    if maybe(): m.s = rng.choice(["", "a", "zürich", "x" * 12, "y" * 13, "日本語テキスト" * 20])
    if maybe(): m.by = bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 12, 13, 200])))
    if maybe(): m.color = rng.choice([0, 1, 2, 7, -3])
    if maybe():
        m.at.seconds, m.at.nanos = rng.choice([0, -1, 1_700_000_000, -62135596800, 253402300799]), \
            rng.choice([0, 1, 999, 999_999_999])
    if maybe():
        sec = rng.choice([0, 3, -3, 315576000000])
        m.took.seconds, m.took.nanos = sec, rng.choice([0, 500_000, 999_999_999]) * (-1 if sec < 0 else 1)
    for name, values in (("w_i32", ints), ("w_i64", longs), ("w_u32", [0, 2**32 - 1]), ("w_u64", [0, 2**64 - 1]),
                         ("w_fl", [0.0, 2.5]), ("w_db", [0.0, -1.25]), ("w_b", [False, True]),
                         ("w_s", ["", "wrapped"]), ("w_by", [b"", b"\x00\xff"])):
        if maybe(0.4):
            getattr(m, name).value = rng.choice(values)
    if maybe(0.5): m.opt = rng.choice(longs)
    if maybe(0.5): m.opt_s = rng.choice(["", "o"])
    which = rng.randrange(4)
    if which == 1: m.p_text = rng.choice(["", "t"])
    elif which == 2: m.p_num = rng.choice(ints)
    elif which == 3: m.p_inner.name = "in"
    if maybe():
        fill_inner(m.inner, rng)
    for _ in range(rng.choice([0, 0, 1, 3])):
        fill_inner(m.inners.add(), rng)
    for name, values in (("r_i32", ints), ("r_s64", longs), ("r_f32", [0, 2**32 - 1]), ("r_db", [0.0, 1.5]),
                         ("r_b", [False, True]), ("r_color", [0, 2, 9]), ("r_s", ["", "s", "z" * 40]),
                         ("r_by", [b"", b"\x01"]), ("r_u64", [0, 2**64 - 1])):
        getattr(m, name).extend(rng.choice(values) for _ in range(rng.choice([0, 1, 2, 5])))
    for _ in range(rng.choice([0, 1, 2])):
        ts = m.r_at.add()
        ts.seconds, ts.nanos = rng.randrange(-10**9, 10**10), rng.randrange(10**9)
    if maybe(0.3): m.far = "far"
    if maybe(0.3): m.farther = -9
    return m


def fill_inner(inner, rng):
    if rng.random() < 0.7: inner.name = rng.choice(["", "n", "name-" * 5])
    inner.nums.extend(rng.randrange(-300, 300) for _ in range(rng.choice([0, 1, 4])))
    if rng.random() < 0.6: inner.deep.d = rng.choice([0, -1, 2**62])
    if rng.random() < 0.3: inner.deep.raw = b"\x80\x81"


def decode_both(art, values, skip=5):
    """Column-wise and per-record decode of one batch: they must agree exactly."""
    framed = pa.array(values, pa.binary())
    col, ok, bad = art.decoder.decode(framed, skip)
    rec, ok2, bad2 = art.decoder.decode_records(framed, skip)
    assert col.schema == art.arrow_schema
    assert col.equals(rec), [(a, b) for a, b in zip(col.to_pylist(), rec.to_pylist()) if a != b][:2]
    assert list(ok) == list(ok2) and bad == bad2
    return col.to_pylist(), list(ok), bad


def stats_delta(art, fn):
    before = dict(art.decoder.stats)
    out = fn()
    return out, {k: v - before[k] for k, v in art.decoder.stats.items()}


def test_every_supported_type_decodes_on_the_wire_path_exactly_as_per_record(art):
    cls = cls_of(art)
    rng = random.Random(5)
    values = [pb.encode(11, random_rec(cls, rng)) for _ in range(3000)] + [pb.encode(11, cls())]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert len(rows) == 3001 and not bad
    assert delta["wire_rows"] == 3001 and delta["wire_fallbacks"] == 0  # no row needed upb


def field(number: int, wire: int, body: bytes) -> bytes:
    return _varint(number << 3 | wire) + body


def ld(number: int, body: bytes) -> bytes:
    return field(number, 2, _varint(len(body)) + body)


@pytest.mark.parametrize("payload, expect", [
    # any order, the last of a field written twice wins
    (field(4, 0, _varint(5)) + field(1, 0, _varint(2)) + field(4, 0, _varint(9)), {"i64": 9, "i32": 2}),
    # packed and unpacked elements of one field
    (field(35, 0, _varint(3)) + ld(35, _varint(4) + _varint(300)) + field(35, 0, _varint(1)), {"r_i32": [3, 4, 300, 1]}),
    (ld(35, b"") + ld(35, _varint(1)), {"r_i32": [1]}),
    (field(38, 1, struct.pack("<d", 1.5)) + field(38, 1, struct.pack("<d", -2.0)), {"r_db": [1.5, -2.0]}),
    (field(99, 0, _varint(1)) + field(98, 5, b"abcd") + field(97, 1, b"abcdefgh") + ld(96, b"junk") +
     field(1, 0, _varint(7)), {"i32": 7}),  # unknown fields of every wire type
    (ld(33, ld(1, b"a")) + ld(33, ld(3, field(1, 0, _varint(2)))), None),  # a message written twice: merged
    (ld(30, b"t") + field(31, 0, _varint(4)), {"p_text": None, "p_num": 4}),  # two oneof members: the last stays
    (field(1, 0, b"\xff" * 9 + b"\x01"), {"i32": -1}),  # int32 from a 10-byte varint
    (field(13, 0, _varint(2)), {"b": True}),
    (field(14, 2, _varint(3) + b"a\xffb"), "bad"),  # invalid UTF-8: that row fails, as per record
    (field(14, 2, _varint(9) + b"abc"), "bad"),  # truncated
    (field(1, 3, b""), "bad"),  # a group start
    (ld(17, field(1, 0, _varint(2**62))), "conversion"),  # a Timestamp beyond int64 microseconds
])
def test_unusual_valid_bytes_and_bad_bytes_agree_with_the_per_record_path(art, payload, expect):
    cls = cls_of(art)
    good = pb.encode(11, random_rec(cls, random.Random(1)))
    if expect == "conversion":  # the per-record path isolates the row that does not convert
        _, ok, bad = art.decoder.decode(pa.array([good, pb.frame(11, payload), good], pa.binary()), 5)
        assert list(ok) == [0, 2] and bad[0][0] == 1 and bad[0][1].startswith("arrow conversion")
        return
    rows, ok, bad = decode_both(art, [good, pb.frame(11, payload), good])
    if expect == "bad":
        assert ok == [0, 2] and [p for p, _ in bad] == [1]
        return
    assert ok == [0, 1, 2] and not bad
    for k, v in (expect or {}).items():
        assert rows[1][k] == v, k


def test_a_bad_row_leaves_the_others_to_one_upb_parse_and_is_dead_lettered_alone(art):
    cls = cls_of(art)
    rng = random.Random(9)
    values = [pb.encode(11, random_rec(cls, rng)) for _ in range(50)]
    values[17] = values[17][:-3]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert ok == [i for i in range(50) if i != 17] and [p for p, _ in bad] == [17]
    assert delta["wire_fallbacks"] == 1 and delta["batch_parse_failures"] == 1


def test_maps_and_json_come_from_one_upb_parse_the_other_columns_from_the_wire():
    art = build_artifacts(7, "PROTOBUF", pb.ALL_TYPES, [("common/money.proto", pb.MONEY)])
    plan = art.decoder.plan
    assert [art.arrow_schema.field(i).name for i in plan.upb] == ["lines", "tags", "by_id", "extra"]
    cls = pb.message_class(art.parsed.file)
    values = [pb.encode(7, pb.full_order(cls)) for _ in range(20)] + [pb.encode(7, cls(i32=i)) for i in range(20)]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert len(rows) == 40 and delta["wire_rows"] == 40 and delta["batch_parse_failures"] == 0
    values[3] = values[3][:-1]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert [p for p, _ in bad] == [3] and delta["wire_fallbacks"] == 1 and delta["batch_parse_failures"] == 1


def test_a_oneof_with_a_member_left_to_upb_is_left_to_upb_whole():
    art = build_artifacts(12, "PROTOBUF", """syntax = "proto3";
package mix;
import "google/protobuf/struct.proto";
message M { string a = 1; oneof pick { google.protobuf.Struct doc = 2; string text = 3; } map<string, int32> m = 4; }
""")
    assert art.decoder.plan.upb == [1, 2, 3]
    cls = pb.message_class(art.parsed.file)
    doc_then_text = cls(a="x")
    doc_then_text.doc.update({"k": 1})
    raw = doc_then_text.SerializeToString() + field(3, 2, _varint(1) + b"t")  # the text clears the doc
    text_then_doc = cls(text="t").SerializeToString() + ld(2, b"")  # the doc clears the text
    rows, ok, bad = decode_both(art, [pb.frame(12, raw), pb.frame(12, text_then_doc)])
    assert (rows[0]["doc"], rows[0]["text"]) == (None, "t") and (rows[1]["doc"], rows[1]["text"]) == ("{}", None)


@pytest.mark.parametrize("skip", [0, 1, 2, 5, 6, 17, 40])
def test_any_prefix_length_decodes_the_same(art, skip):
    """Header-framed (skip 0), GUID-framed (17) and other prefix lengths: the batch parse fills
    each prefix with a padded varint or a pad field, or leaves the batch to per-record parsing."""
    cls = cls_of(art)
    rng = random.Random(skip)
    values = [b"\x00" * skip + encode_message_indexes([0]) + random_rec(cls, rng).SerializeToString()
              for _ in range(30)]
    rows, ok, bad = decode_both(art, values, skip)
    assert ok == list(range(30))
    assert art.decoder.parse_batch(pa.array(values, pa.binary()), skip,
                                   art.decoder.span(pa.array(values, pa.binary()), skip))[1] == list(range(30))


def test_nested_message_indexes_take_the_fast_paths():
    art = build_artifacts(3, "PROTOBUF", pb.NESTED)
    inner = protobuf_message_artifacts(art, (1, 0))
    msg = pb.message_class(art.parsed.file, (1, 0))(c="x")
    msg.deep.d = 4
    values = [pb.encode(3, msg, (1, 0))] * 10 + [pb.frame(3, msg.SerializeToString(), (1, 1))]
    (rows, ok, bad), delta = stats_delta(inner, lambda: decode_both(inner, values))
    assert ok == list(range(10)) and rows[0] == {"c": "x", "deep": {"d": 4}} and "is not" in bad[0][1]
    (rows, ok, bad), delta = stats_delta(inner, lambda: decode_both(inner, values[:10]))
    assert delta["wire_rows"] == 10


def test_proto2_defaults_presence_and_closed_enums():
    art = build_artifacts(4, "PROTOBUF", PROTO2)
    cls = pb.message_class(art.parsed.file)
    values = [pb.encode(4, cls()), pb.encode(4, cls(a=1, level=2, s="s", xs=[1, 2]))]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert rows[0] == {"a": None, "level": None, "s": None, "xs": []} and delta["wire_rows"] == 2
    unknown_level = pb.frame(4, field(2, 0, _varint(9)))  # a closed enum keeps an unknown number out of the field
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values + [unknown_level]))
    assert rows[2]["level"] is None and delta["wire_fallbacks"] == 1


@pytest.mark.parametrize("limit", [("CHUNK_BYTES", 2000), ("CHUNK_ROWS", 7)])
def test_large_batches_are_decoded_in_pieces(art, monkeypatch, limit):
    monkeypatch.setattr(protobuf_decode, *limit)
    cls = cls_of(art)
    rng = random.Random(3)
    values = [pb.encode(11, random_rec(cls, rng)) for _ in range(200)]
    values[150] = values[150][:-2]
    rows, ok, bad = decode_both(art, values)
    assert len(rows) == 199 and [p for p, _ in bad] == [150]


def test_the_upb_columns_equal_the_per_record_path_too(art, monkeypatch):
    """The column builders over parsed messages (maps, JSON, and every batch the wire path
    leaves) on the same random records, the wire path switched off."""
    monkeypatch.setattr(art.decoder, "plan", None)
    cls = cls_of(art)
    rng = random.Random(8)
    values = [pb.encode(11, random_rec(cls, rng)) for _ in range(1000)]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert len(rows) == 1000 and delta["wire_rows"] == 0 and delta["batch_parse_failures"] == 0


def test_a_row_with_a_longer_spelling_of_its_message_index_leaves_the_batch_to_per_record_parsing(art):
    """[0] may also be written as count 1, index 0 (bytes 02 00): read alike, but not the bytes
    the fast paths check for, so upb parses the rows one by one."""
    cls = cls_of(art)
    rng = random.Random(4)
    values = [pb.encode(11, random_rec(cls, rng)) for _ in range(5)]
    values[2] = values[2][:5] + b"\x02\x00" + values[2][6:]
    (rows, ok, bad), delta = stats_delta(art, lambda: decode_both(art, values))
    assert ok == list(range(5)) and delta["wire_rows"] == 0 and delta["per_record_rows"] == 0
