"""Protobuf topics through the executor write path (no Spark): real registry emulator, real
SQLite and PostgreSQL catalogs, DuckDB as the reader; dead letters keep the original bytes."""
from __future__ import annotations

import datetime as dt
import decimal

import pytest

import router.cli.demo_data as data
from router.catalog import load_table
from tests import protobuf_data as pb
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch

__all__ = ["catalog_config"]  # the fixture, parametrised over SQLite and PostgreSQL

V1 = """syntax = "proto3";
package ev;
message Order { int64 id = 1; int32 amount = 2; string name = 3; }
"""
V2 = """syntax = "proto3";
package ev;
message Order { int64 id = 1; int64 amount = 2; string title = 3; string note = 4; }
"""
V3_STRING_AMOUNT = """syntax = "proto3";
package ev;
message Order { int64 id = 1; string amount = 2; }
"""


def test_protobuf_topic_lands_in_iceberg_and_bad_records_are_dead_lettered(catalog_config, registry_url,
                                                                            unique_name):
    ns = unique_name("pb")
    topic, nested, tree = f"{ns}.orders", f"{ns}.nested", f"{ns}.tree"
    money_id = pb.register(registry_url, f"{ns}-money", pb.MONEY)
    assert money_id
    sid = pb.register(registry_url, f"{topic}-value", pb.ALL_TYPES, [("common/money.proto", f"{ns}-money", 1)])
    nid = pb.register(registry_url, f"{nested}-value", pb.NESTED)
    rid = pb.register(registry_url, f"{tree}-value", pb.RECURSIVE)
    avro_id = data.register(registry_url, f"{ns}.avro-value", data.CLICK)
    order = pb.message_class(pb.load(pb.ALL_TYPES, [("common/money.proto", pb.MONEY)]))
    files = pb.load(pb.NESTED)
    inner = pb.message_class(files, (1, 0))
    node = pb.message_class(pb.load(pb.RECURSIVE))

    good = [pb.encode(sid, pb.full_order(order))] + [pb.encode(sid, order(i64=i, status=i % 4)) for i in (1, 2)]
    bad = {3: good[0][:-6],                                          # truncated payload
           4: pb.frame(sid, order(i64=4).SerializeToString(), (3,)),  # names no message of the file
           5: pb.frame(avro_id, order(i64=5).SerializeToString())}    # schema id of another format
    records = [(topic, 0, i, v, None) for i, v in enumerate(good)]
    records += [(topic, 0, off, v, None) for off, v in bad.items()]
    records += [(nested, 0, 0, pb.encode(nid, inner(c="deep"), (1, 0)), None)]
    records += [(tree, 0, 0, pb.encode(rid, node(name="root")), None)]
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}])
    results, report = run_batch(dispatcher, [source_batch(records)])
    assert not report.failed, report.failed

    rows = read(catalog_config, f"{ns}.{ns}_orders", "i64, u64, status, \"at\", took, total, lines, tags, opt, w_str",
                order="_kafka_offset")
    assert [r[0] for r in rows] == [-(2**63), 1, 2]
    first = rows[0]
    assert first[1] == decimal.Decimal(2**64 - 1) and first[2] == "SHIPPED"
    assert first[3] == dt.datetime(2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.timezone.utc)
    assert first[4] == -3_000_500 and first[5] == {"units": 12, "currency": "EUR"}
    assert first[6][0]["sku"] == "a" and first[7] == {"k": 1} and first[8] == 0 and first[9] == "wrapped"
    assert [r[2] for r in rows[1:]] == ["NEW", "SHIPPED"] and rows[1][8] is None
    assert read(catalog_config, f"{ns}.{ns}_nested", "c, deep") == [("deep", None)]

    letters = read(catalog_config, f"{ns}.dead_letters", "topic, \"offset\", error_class, reason, value",
                   order="topic, \"offset\"")
    by_key = {(t, o): (cls, reason, value) for t, o, cls, reason, value in letters}
    for off, value in bad.items():
        assert by_key[(topic, off)][0] == "decode_error" and by_key[(topic, off)][2] == value
    assert "Error parsing message" in by_key[(topic, 3)][1]
    assert "names no message" in by_key[(topic, 4)][1]
    cls, reason, value = by_key[(tree, 0)]
    assert cls == "unsupported_schema" and "recursive message tree.Node" in reason
    assert value == records[-1][3]
    assert len(letters) == 4


def test_evolution_by_field_number_rename_widen_add_and_refused_change(catalog_config, registry_url,
                                                                       unique_name):
    ns = unique_name("pe")
    topic = f"{ns}.orders"
    v1 = pb.register(registry_url, f"{topic}-value", V1)
    v2 = pb.register(registry_url, f"{topic}-value", V2)  # compatible: same numbers, wire-compatible widening
    c1, c2 = pb.message_class(pb.load(V1)), pb.message_class(pb.load(V2))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}])
    table = f"{ns}.{ns}_orders"
    run_batch(dispatcher, [source_batch([(topic, 0, 0, pb.encode(v1, c1(id=1, amount=5, name="one")), None)])], 0)
    before = {f.name: f for f in load_table(catalog_config, table, refresh=True).schema().fields}
    results, report = run_batch(dispatcher, [source_batch(
        [(topic, 0, 1, pb.encode(v2, c2(id=2, amount=5_000_000_000, title="two", note="n")), None)])], 1)
    assert not report.failed
    after = {f.name: f for f in load_table(catalog_config, table, refresh=True).schema().fields}
    assert "name" not in after and after["title"].field_id == before["name"].field_id  # renamed, id kept
    assert str(after["amount"].field_type) == "long" and after["amount"].field_id == before["amount"].field_id
    assert "note" in after
    assert read(catalog_config, table, "id, amount, title, note", order="id") == [
        (1, 5, "one", None), (2, 5_000_000_000, "two", "n")]

    # field 2 reused as a string: refused by the registry, and by the table's policy (dlq)
    with pytest.raises(Exception, match="FIELD_SCALAR_KIND_CHANGED"):
        pb.register(registry_url, f"{topic}-value", V3_STRING_AMOUNT)
    v3 = pb.register(registry_url, f"{topic}-value-v3", V3_STRING_AMOUNT)
    c3 = pb.message_class(pb.load(V3_STRING_AMOUNT))
    refused = pb.encode(v3, c3(id=3, amount="lots"))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}],
        evolution={"default": "evolve", "topics": {rf"{ns}\..*": {"type_change": "dlq"}}})
    run_batch(dispatcher, [source_batch([(topic, 0, 2, refused, None)])], 2)
    assert [r[0] for r in read(catalog_config, table, "id", order="id")] == [1, 2]
    letters = read(catalog_config, f"{ns}.dead_letters", "\"offset\", reason, value", order="1")
    assert len(letters) == 1 and letters[0][0] == 2 and letters[0][2] == refused
    assert "amount" in letters[0][1] and "type_change" in letters[0][1]
