"""`icerouter demo`: the whole product on one machine, in about two minutes.

Starts a local broker, schema registry and SQLite Iceberg catalog (``--s3``:
SeaweedFS as object storage behind its Iceberg REST catalog), creates ~50
topics, produces Avro records, runs the streaming job live, then changes the
data under it: version 2 of the schema (a new field, int -> long), a topic that
appears mid-run, fan-out by header, fan-in of three topics into one table and a
poison record; then a Debezium change stream mirrored into an upsert table with
position deletes; then topics without a registry: plain JSON (columns inferred) and
the change stream as Debezium's JSON. Ends with a table of tables read back through DuckDB.

Shutdown order matters for a clean last screen: the Spark session (and with it
every Python worker holding a Kafka client) stops before the broker does.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from pyiceberg.exceptions import NoSuchTableError

from router.catalog import load_table
from router.cli import demo_cdc as cdc
from router.cli import demo_data as data
from router.cli.summary import table_of_tables
from router.config import parse_config
from router.devstack.broker import LocalBroker
from router.devstack.objectstore import LocalObjectStore
from router.devstack.registry_server import RegistryServer
from router.driver.job import start_query
from router.driver.session import build_spark

REGIONS = ("eu", "us")
CDC_TOPIC = "cdc.customers"
CLICK_TOPICS = ("clicks.web", "clicks.ios", "clicks.android")
JSON_TOPIC = "json.events"  # plain JSON, no registry: columns inferred
CDC_JSON_TOPIC = "cdc.customers_json"  # Debezium through Kafka Connect's JsonConverter


def demo_config(workdir: Path, bootstrap: str, registry_url: str, catalog_properties: dict | None = None) -> dict:
    """The demo's job config; the catalog defaults to SQLite + a local warehouse under ``workdir``."""
    catalog = catalog_properties or {"type": "sql", "uri": f"sqlite:///{workdir / 'catalog.db'}",
                                     "warehouse": (workdir / "warehouse").as_uri()}
    return {
        "kafka": {"bootstrap_servers": bootstrap, "pattern": r"(shop\..*|clicks\..*|payments|cdc\..*|json\..*)",
                  "client": {"receive.message.max.bytes": 1_000_000_000},
                  "max_records_per_batch": 200_000},
        "registry": {"url": registry_url, "latest_ttl_seconds": 5},
        "catalog": {"name": "demo", "properties": catalog},
        "job": {"name": "demo", "checkpoint": str(workdir / "checkpoint"), "trigger_seconds": 3,
                "status_file": str(workdir / "status.json"),
                "spark": {"spark.master": "local[2]", "spark.driver.memory": "2g"}},
        "tables": {"partition_by": ["day(created_at)"],
                   "allowed_namespaces": ["raw", "analytics", "payments", "ops", "crm"]},
        "routes": [
            {"name": "orders", "topic": r"shop\..*", "table": "raw.{topic}"},
            {"name": "clicks", "topic": r"clicks\..*", "table": "analytics.clicks"},
            {"name": "payments-by-region", "topic": "payments", "headers": {"region": "eu|us"},
             "table": "payments.{header.region}"},
            {"name": "payments-all", "topic": "payments", "table": "payments.all_regions",
             "columns": ["id", "amount", "created_at"]},
            {"name": "customers", "topic": r"cdc\.customers", "table": "crm.customers", "cdc": "debezium"},
            {"name": "events", "topic": r"json\.events", "table": "analytics.events", "format": "json"},
            {"name": "customers-json", "topic": r"cdc\.customers_json", "table": "crm.customers_json",
             "cdc": "debezium", "format": "connect_json"},
        ],
        "dlq": {"table": "ops.dead_letters"},
    }


def _messages(topics, start, count, version, encoders, click_encoder, payments_encoder):
    per = max(1, count // max(1, len(topics) + 4))
    for t in topics:
        for i in range(start, start + per):
            yield t, str(i).encode(), encoders[(t, version)](data.order(i, version)), None
    for i in range(start, start + per):
        topic = CLICK_TOPICS[i % 3]
        yield topic, None, click_encoder(data.click(i)), None
    for i in range(start, start + per * 3):
        region = REGIONS[i % 2]
        yield "payments", None, payments_encoder(data.order(i)), [("region", region.encode())]


class Progress:
    """Prints one line per batch and keeps totals for the stop condition."""

    def __init__(self, out=sys.stdout):
        self.out, self.rows, self.dead, self.batches = out, 0, 0, 0

    def __call__(self, stats) -> None:
        self.rows += stats.rows_written
        self.dead += stats.dead_letters
        self.batches += 1
        changes = sum(len(c) for c in stats.changes.values())
        print(f"  batch {stats.batch_id:>3}: {stats.rows_written:>7,} rows into {stats.tables_committed:>3} tables"
              f"  {stats.dead_letters:>3} dead letters  {changes:>2} schema changes  {stats.total_seconds:5.1f}s"
              f"  | total {self.rows:,} rows", file=self.out, flush=True)


def wait_for(progress: Progress, expected: int, query, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        if progress.rows + progress.dead >= expected:
            return True
        time.sleep(0.5)
    return False


def wait_for_rows(config, table: str, ids: set, query, timeout: float) -> bool:
    """Until `table` holds exactly the rows of these ids (a change stream's row count is not its event count)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()).splitlines()[0])
        try:
            handle = load_table(config.catalog, table, refresh=True)
            if handle.current_snapshot() is not None and \
                    sorted(handle.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()) == sorted(ids):
                return True
        except NoSuchTableError:
            pass
        time.sleep(1)
    return False


def run_demo(topics: int = 50, records: int = 20_000, workdir: str | None = None, out=sys.stdout,
             s3: bool = False, cdc_rows: int = 2_000) -> int:
    temp = workdir is None
    root = Path(workdir or tempfile.mkdtemp(prefix="icerouter-demo-")).resolve()
    root.mkdir(parents=True, exist_ok=True)
    broker = LocalBroker(data_dir=str(root / "broker"), tied_to_parent=True)
    registry = RegistryServer(data_file=str(root / "registry.json"))
    store = LocalObjectStore(str(root / "objectstore"), tied_to_parent=True) if s3 else None
    query = spark = dispatcher = None
    try:
        print(f"icerouter demo: working in {root}", file=out)
        bootstrap = broker.start()
        registry_url = registry.start()
        catalog_properties = None
        if store is not None:
            store.start()
            catalog_properties = store.rest_catalog_properties()
            where = f"REST {store.catalog_url}, tables in s3://{store.table_bucket} at {store.endpoint}"
        else:
            where = f"sqlite {root / 'catalog.db'}"
        print(f"  broker {bootstrap}, schema registry {registry_url}, catalog {where}", file=out)
        n_orders = max(1, topics - len(CLICK_TOPICS) - 2)
        order_topics = [f"shop.orders_{i:02d}" for i in range(n_orders)]
        broker.create_topics(order_topics + list(CLICK_TOPICS) + ["payments", CDC_TOPIC, JSON_TOPIC, CDC_JSON_TOPIC],
                             partitions=3)
        encoders = {}
        for t in order_topics + ["shop.orders_late"]:
            encoders[(t, 1)] = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{t}-value", data.ORDER_V1))
        click_enc = data.Encoder(data.CLICK, data.register(registry_url, "clicks-value", data.CLICK))
        pay_enc = data.Encoder(data.ORDER_V1, data.register(registry_url, "payments-value", data.ORDER_V1))

        config = parse_config(demo_config(root, bootstrap, registry_url, catalog_properties))
        print(f"phase 1: {len(order_topics) + 4} topics, schema v1, {records:,} records", file=out)
        sent = data.produce(bootstrap, _messages(order_topics, 0, records, 1, encoders, click_enc, pay_enc))
        spark = build_spark(config)
        progress = Progress(out)
        query, dispatcher = start_query(spark, config, listeners=[progress])
        expected = _expected_rows(order_topics, records)
        print(f"  produced {sent:,} records; starting the job", file=out)
        wait_for(progress, expected, query, timeout=300)

        print("phase 2: schema v2 on half the topics (new column `channel`, quantity int -> long), "
              "a new topic, a poison record", file=out)
        v2_topics = order_topics[: max(1, len(order_topics) // 2)]
        for t in v2_topics:
            encoders[(t, 2)] = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{t}-value", data.ORDER_V2))
        data.produce(bootstrap, _messages(v2_topics, records, records // 2, 2, encoders, click_enc, pay_enc))
        late = [("shop.orders_late", str(i).encode(), encoders[("shop.orders_late", 1)](data.order(i)), None)
                for i in range(500)]
        poison = [(order_topics[0], b"poison", b"\x00\x7f\xff\xff\xf0not avro at all", None),
                  (order_topics[-1], b"poison", b"plain text, not framed", None)]
        data.produce(bootstrap, iter(late + poison))
        expected += _expected_rows(v2_topics, records // 2) + len(late) + len(poison)
        if not wait_for(progress, expected, query, timeout=300):
            print(f"  timed out waiting: {progress.rows + progress.dead:,} of {expected:,} records", file=out)

        print(f"phase 3: a Debezium change stream ({CDC_TOPIC} -> crm.customers, upsert by id): a snapshot, "
              "then updates, deletes and a key change", file=out)
        script = cdc.ChangeScript(seed=42)
        encode = cdc.ChangeEncoder(data.register(registry_url, f"{CDC_TOPIC}-key", cdc.CUSTOMER_KEY),
                                   data.register(registry_url, f"{CDC_TOPIC}-value", cdc.CUSTOMER_ENVELOPE))
        snapshot = list(script.snapshot(cdc_rows))
        data.produce(bootstrap, (encode(CDC_TOPIC, e) for e in snapshot))
        if not wait_for_rows(config, "crm.customers", set(script.rows), query, timeout=300):
            print("  timed out waiting for the snapshot of crm.customers", file=out)
        changes = [*script.mixed(cdc_rows), *script.change_key()]
        data.produce(bootstrap, (encode(CDC_TOPIC, e) for e in changes))
        print(f"  produced a snapshot of {len(snapshot):,} rows, then {len(changes):,} change events; the table "
              f"must hold {len(script.rows):,} customers", file=out)
        if not wait_for_rows(config, "crm.customers", set(script.rows), query, timeout=300):
            print("  timed out waiting for crm.customers", file=out)
        _json_phase(bootstrap, config, query, cdc_rows, out, progress)
        query.stop()
        query = None
        if dispatcher.group is not None:  # its admin client would retry the broker once it is gone
            dispatcher.group.close()
        spark.stop()  # its Python workers hold Kafka clients: stop them before the broker goes away
        spark = None
        print("\ntables (read back with DuckDB):", file=out)
        print(table_of_tables(config.catalog), file=out)
        return 0
    finally:
        if query is not None:
            query.stop()
        if spark is not None:
            spark.stop()
        registry.stop()
        broker.stop()
        if store is not None:
            store.stop()
        if temp and not os.environ.get("ICEROUTER_KEEP_DEMO"):
            shutil.rmtree(root, ignore_errors=True)


def _json_phase(bootstrap: str, config, query, cdc_rows: int, out, progress: Progress) -> None:
    """Topics without a registry: plain JSON events (columns inferred, one record that is not JSON)
    and the change stream again, as Debezium writes it through Kafka Connect's JsonConverter."""
    print(f"phase 4: no registry: plain JSON on {JSON_TOPIC} (columns inferred) and Debezium's JSON on "
          f"{CDC_JSON_TOPIC} -> crm.customers_json", file=out)
    events = [(JSON_TOPIC, None, json.dumps(data.json_event(i)).encode(), None) for i in range(1_000)]
    events.append((JSON_TOPIC, None, b"{not json", None))
    script = cdc.ChangeScript(seed=43)
    encode = cdc.DebeziumJsonEncoder(schemas=True)
    changes = [*script.snapshot(cdc_rows // 4), *script.mixed(cdc_rows // 4), *script.change_key()]
    dead_before = progress.dead
    data.produce(bootstrap, iter(events + [encode(CDC_JSON_TOPIC, e) for e in changes]))
    print(f"  produced {len(events):,} JSON events and {len(changes):,} Debezium JSON events; crm.customers_json "
          f"must hold {len(script.rows):,} customers", file=out)
    if not wait_for_rows(config, "crm.customers_json", set(script.rows), query, timeout=300):
        print("  timed out waiting for crm.customers_json", file=out)
    if not wait_for_rows(config, "analytics.events", set(range(1_000)), query, timeout=300):
        print("  timed out waiting for analytics.events", file=out)
    deadline = time.monotonic() + 120  # the record that is not JSON: its batch's dead-letter commit comes last
    while progress.dead <= dead_before and time.monotonic() < deadline and query.exception() is None:
        time.sleep(0.5)


def _expected_rows(order_topics, records: int) -> int:
    """Rows the job writes for one call of `_messages` (payments fan out to two tables)."""
    per = max(1, records // max(1, len(order_topics) + 4))
    return per * len(order_topics) + per + per * 3 * 2
