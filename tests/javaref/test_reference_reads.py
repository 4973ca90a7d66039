"""Java Iceberg, the reference implementation, reads every kind of table the job writes.

Tables are written through the executor write path and the real commit (process_partition +
commit_all, as tests/router/executor/ do) and maintained by the real maintenance functions; then
Iceberg 1.10 on Spark 3.5 (one JVM for the session, tests/javaref/), DuckDB and pyiceberg must read
the same rows. A live job's tables get the same check in tests/router/driver/test_job_merge_e2e.py.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import time

import pytest

import router.cli.demo_cdc as cdc
import router.cli.demo_data as data
from router.catalog import load_table
from router.catalog.snapshot_files import live_delete_files, snapshot_files
from router.config import CatalogConfig
from router.maintenance import compact, plan_compaction
from router.maintenance.files import expire
from tests import protobuf_data as pb
from tests.javaref.client import assert_readers_agree
from tests.router.executor.test_partition import make_dispatcher, run_batch, source_batch
from tests.router.executor.test_upsert import Stream

pytestmark = pytest.mark.slow

MiB = 1 << 20

SHIPMENT_V1 = {"type": "record", "name": "Shipment", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "address", "type": {"type": "record", "name": "Addr", "fields": [{"name": "city", "type": "string"}]}},
    {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "Item", "fields": [
        {"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}]}}},
    {"name": "props", "type": {"type": "map", "values": "double"}},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
    {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}
SHIPMENT_V2 = json.loads(json.dumps(SHIPMENT_V1))
SHIPMENT_V2["fields"][1] = {"name": "full_name", "type": "string", "aliases": ["name"]}          # renamed by alias
SHIPMENT_V2["fields"][2]["type"]["fields"].append({"name": "country", "type": ["null", "string"], "default": None})
SHIPMENT_V2["fields"][3]["type"]["items"]["fields"][1] = {"name": "qty", "type": "long"}         # widened
SHIPMENT_V2["fields"][3]["type"]["items"]["fields"].append({"name": "gift", "type": ["null", "boolean"],
                                                              "default": None})


@pytest.fixture
def catalog_config(tmp_path, unique_name):
    """A SQLite catalog on a local warehouse (the Java reader reads local files; S3 would need jars
    that do not ship on PyPI)."""
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                                            "warehouse": (tmp_path / "wh").as_uri()})


def _committed(report) -> None:
    assert not report.failed and not [o for o in report.outcomes if o.status == "failed"], report.outcomes


def _shipment(i: int, version: int) -> dict:
    row = {"id": i, "address": {"city": data.CITIES[i % 6]}, "items": [{"sku": f"s{i}", "qty": i}],
           "props": {"w": i / 4, "h": 1.5}, "amount": decimal.Decimal(f"{i}.{i % 100:02d}"),
           "at": dt.datetime(2026, 1, 1 + i % 3, 12, tzinfo=dt.timezone.utc)}
    if version == 1:
        return {**row, "name": f"n{i}"}
    row["address"]["country"] = "PE" if i % 2 else None
    row["items"] = [{"sku": f"s{i}", "qty": 5_000_000_000 + i, "gift": bool(i % 2)}]
    return {**row, "full_name": f"f{i}"}


def test_append_tables_after_nested_add_widen_and_alias_rename_partitioned_and_merged(
        java_reader, catalog_config, registry_url, unique_name):
    """Evolution (a nested column added, a list element's int widened, a column renamed by alias), a
    day-partitioned copy, small files merged inline at every second commit, and the fan-in table."""
    ns = unique_name("ev")
    topic, clicks = f"{ns}.shipments", [f"{ns}.clicks_{i}" for i in range(3)]
    v1 = data.Encoder(SHIPMENT_V1, data.register(registry_url, f"{topic}-value", SHIPMENT_V1))
    v2 = data.Encoder(SHIPMENT_V2, data.register(registry_url, f"{topic}-v2-value", SHIPMENT_V2))
    click = data.Encoder(data.CLICK, data.register(registry_url, f"{ns}.clicks-value", data.CLICK))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\.shipments", "table": f"{ns}.shipments"},
        {"name": "by-day", "topic": rf"{ns}\.shipments", "table": f"{ns}.shipments_by_day",
         "partition_by": ["day(at)", "bucket(4, id)"]},
        {"name": "fan-in", "topic": rf"{ns}\.clicks_.*", "table": f"{ns}.clicks"},
    ], maintenance={"merge_small_files_at": 2})
    offset = 0
    for batch_id, (version, encode) in enumerate([(1, v1), (1, v1), (2, v2), (2, v2), (1, v1)]):
        records = [(topic, 0, offset + i, encode(_shipment(offset + i, version)), None) for i in range(6)]
        records += [(clicks[(offset + i) % 3], 0, offset + i, click(data.click(offset + i)), None) for i in range(9)]
        offset += 9
        _, report = run_batch(dispatcher, [source_batch(records)], batch_id)
        _committed(report)
    tables = {name: load_table(catalog_config, f"{ns}.{name}", refresh=True)
              for name in ("shipments", "shipments_by_day", "clicks")}
    schema = tables["shipments"].schema()
    # renamed in place (its field id kept); the last v1 batch then adds `name` back as a new column
    assert schema.find_field("full_name").field_id == 2 and schema.find_field("name").field_id > 2
    assert str(schema.find_field("items.element.qty").field_type) == "long"
    assert tables["shipments_by_day"].spec().fields
    merges = [s for s in tables["shipments"].metadata.snapshots if s.summary.operation.value == "overwrite"]
    assert merges, "no inline merge of small files happened"
    for name, table in tables.items():
        rows = assert_readers_agree(java_reader, table)
        assert len(rows) == (30 if name.startswith("shipments") else 45), name
    clicks = tables["clicks"]  # an append table compacted: the files its merges left rewritten as one
    result = compact(clicks, plan_compaction(clicks, MiB), MiB)
    assert result.files_removed >= 2 and result.files_added == 1 and result.rows == 45
    assert assert_readers_agree(java_reader, load_table(catalog_config, f"{ns}.clicks", refresh=True)) == rows


def test_protobuf_mapped_types_and_the_dead_letter_table(java_reader, catalog_config, registry_url, unique_name):
    """Every row of the Protobuf mapping table (wrappers, Timestamp, Duration, enums, uint64, maps,
    references, Struct) and the dead letters of records that could not be decoded."""
    ns = unique_name("pb")
    topic = f"{ns}.orders"
    pb.register(registry_url, f"{ns}-money", pb.MONEY)
    sid = pb.register(registry_url, f"{topic}-value", pb.ALL_TYPES, [("common/money.proto", f"{ns}-money", 1)])
    order = pb.message_class(pb.load(pb.ALL_TYPES, [("common/money.proto", pb.MONEY)]))
    good = [pb.encode(sid, pb.full_order(order))] + [pb.encode(sid, order(i64=i, status=i % 4)) for i in (1, 2)]
    records = [(topic, 0, i, v, None) for i, v in enumerate(good)]
    records += [(topic, 0, 3, good[0][:-6], [("trace", b"t-1")]), (topic, 0, 4, b"not framed", None)]
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}])
    _, report = run_batch(dispatcher, [source_batch(records)])
    _committed(report)
    rows = [json.loads(r) for r in assert_readers_agree(java_reader, load_table(catalog_config, f"{ns}.{ns}_orders"))]
    first = next(r for r in rows if r["i64"] == -(2**63))
    assert first["u64"] == f"dec:{2**64 - 1}" and first["at"] == "ts:2023-11-14T22:13:20.123456"
    assert len(assert_readers_agree(java_reader, load_table(catalog_config, f"{ns}.dead_letters"))) == 2


@pytest.mark.parametrize("partition_by", [None, ["identity(region)", "bucket(4, id)"]],
                         ids=["unpartitioned", "partitioned"])
def test_cdc_tables_before_and_after_compaction_then_after_expiry(java_reader, catalog_config, registry_url,
                                                                   unique_name, partition_by):
    """A Debezium mirror (position deletes only): Java must apply the deletes; compaction rewrites
    the files without the deleted rows; snapshot expiry leaves the current snapshot readable."""
    ns = unique_name("cdc")
    topic, name = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic)
    route = {"name": "customers", "topic": rf"{ns}\.customers", "table": name, "cdc": "debezium"}
    if partition_by:
        route["partition_by"] = partition_by
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [route])
    script = cdc.ChangeScript(seed=7)
    steps = [lambda: list(script.snapshot(40)),
             lambda: [*script.mixed(30), *script.update(3), *script.update(3)],
             lambda: [*script.delete(5), *script.recreate(5), *script.change_key(7), *script.mixed(25)],
             lambda: [*script.update(5), *script.mixed(20)]]
    for batch_id, step in enumerate(steps):
        _, report = run_batch(dispatcher, stream.batches(step()), batch_id)
        _committed(report)
    table = load_table(catalog_config, name, refresh=True)
    assert live_delete_files(table, snapshot_files(table)), "no position deletes to apply"
    before = assert_readers_agree(java_reader, table)
    assert len(before) == len(script.rows)

    result = compact(table, plan_compaction(table, MiB), MiB)
    assert result.files_removed and result.rows_deleted and result.removed_delete_files
    table = load_table(catalog_config, name, refresh=True)
    assert assert_readers_agree(java_reader, table) == before

    _, report = run_batch(dispatcher, stream.batches([*script.mixed(10)]), len(steps))
    _committed(report)
    table = load_table(catalog_config, name, refresh=True)
    snapshots = len(table.metadata.snapshots)
    time.sleep(0.01)
    expired = expire(table, retain_last=1, max_age_seconds=0)
    table = load_table(catalog_config, name, refresh=True)
    assert expired.expired and len(table.metadata.snapshots) == 1 < snapshots
    assert len(assert_readers_agree(java_reader, table)) == len(script.rows)


def test_stale_changes_deleted_in_their_own_snapshot_and_json_mirrors(java_reader, catalog_config, registry_url,
                                                                       unique_name):
    """sequence_by across batches deletes a stale change's image by position in the snapshot that adds
    it (router/catalog/sequence.py): Java must apply a delete to a file of its own snapshot. With it,
    the mirrors of Debezium's JSON (the Connect envelope) and of the flattened records."""
    from tests.router.executor.test_sequence_across_batches import Topics, event
    from tests.router.executor.test_unframed_writes import FlatStream, JsonStream

    ns = unique_name("sq")
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "seq", "topic": r"db[12]\.customers", "table": f"{ns}.seq", "cdc": "debezium",
         "format": "connect_json", "sequence_by": "source.lsn"},
        {"name": "json", "topic": r"dbz\.customers", "table": f"{ns}.json", "cdc": "debezium",
         "format": "connect_json"},
        {"name": "flat", "topic": r"flat\.customers", "table": f"{ns}.flat", "cdc": "debezium",
         "format": "json", "key": ["id"], "sequence_by": "__source_lsn"}])
    t = Topics()
    for batch_id, batch in enumerate([
            t.batch(("db1.customers", event("c", 1, 10, None, 10)), ("db1.customers", event("c", 2, 11, None, 11))),
            t.batch(("db2.customers", event("u", 1, 5, 1, 5)), ("db2.customers", event("d", 2, 6, 2, None)))]):
        _committed(run_batch(dispatcher, batch, batch_id)[1])
    seq = load_table(catalog_config, f"{ns}.seq", refresh=True)
    assert [r.split("v")[-1][:2] for r in assert_readers_agree(java_reader, seq)] == ["10", "11"]

    script, flat_script = cdc.ChangeScript(seed=3), cdc.ChangeScript(seed=4)
    json_stream, flat_stream = JsonStream("dbz.customers"), FlatStream("flat.customers", cdc.FlattenedJsonEncoder())
    for batch_id, (a, b) in enumerate([(lambda: list(script.snapshot(20)), lambda: list(flat_script.snapshot(20))),
                                       (lambda: [*script.mixed(30), *script.change_key()],
                                        lambda: [*flat_script.mixed(30), *flat_script.change_key()])], start=2):
        _committed(run_batch(dispatcher, json_stream.batches(a()) + flat_stream.batches(b()), batch_id)[1])
    for name, source in (("json", script), ("flat", flat_script)):
        table = load_table(catalog_config, f"{ns}.{name}", refresh=True)
        assert live_delete_files(table, snapshot_files(table))
        assert len(assert_readers_agree(java_reader, table)) == len(source.rows)
