"""Broker launcher, catalogs and the whole local stack, with real processes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from router.devstack._proc import pid_alive
from tests.duckdb_reader import read_iceberg_rows
from router.devstack.broker import CLIENT_QUIRKS, LARGE_MESSAGE_TOPIC_CONFIG, LocalBroker, client_config
from router.devstack.catalog import LocalPostgres, find_postgres_bindir
from router.devstack.exceptions import ServiceMissingError
from router.devstack.stack import STATE_FILE, LocalStack, ServiceState, StackState, process_start_time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
STACK_SCRIPT = os.path.join(ROOT, "scripts", "stack.py")

ORDER_SCHEMA = json.dumps({
    "type": "record", "name": "Order", "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
})


def _have_postgres() -> bool:
    try:
        find_postgres_bindir()
        return True
    except ServiceMissingError:
        return False


def _processes_mentioning(text: str) -> list[int]:
    """Live (non-zombie) pids whose command line contains ``text``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline and pid_alive(int(entry)):
            found.append(int(entry))
    return found


def _consume(conf: dict, topic: str, partitions: int, count: int, timeout: float = 30.0) -> list:
    consumer = Consumer({**conf, "group.id": f"g-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    out, deadline = [], time.monotonic() + timeout
    try:
        while len(out) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            out.append(msg)
    finally:
        consumer.close()
    return out


@pytest.fixture
def world_traversable_dir():
    """A temporary dir PostgreSQL (running unprivileged) can reach, unlike pytest's tmp dirs."""
    path = tempfile.mkdtemp(prefix="icerouter-stack-test-")
    os.chmod(path, 0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def broker():
    with LocalBroker() as b:  # temporary data dir: removed, and killed fast, on exit
        yield b


@pytest.mark.slow
def test_broker_starts_and_stops_without_leftovers(tmp_path):
    broker = LocalBroker(str(tmp_path / "b"))
    bootstrap = broker.start()
    pid = broker.pid
    assert bootstrap == f"127.0.0.1:{broker.port}"
    assert _processes_mentioning(str(tmp_path / "b")) == [pid]
    broker.create_topics(["t1", "t2"], partitions=2)
    topics = broker.admin().list_topics(timeout=10).topics
    assert len(topics["t1"].partitions) == 2 and len(topics["t2"].partitions) == 2
    broker.stop()
    assert not pid_alive(pid)
    assert _processes_mentioning(str(tmp_path / "b")) == []
    assert os.path.isdir(tmp_path / "b")  # a caller-owned data dir is kept

    with LocalBroker() as temporary:
        data_dir, pid = temporary.data_dir, temporary.pid
        assert pid_alive(pid)
    assert not pid_alive(pid) and not os.path.exists(data_dir)


@pytest.mark.slow
def test_broker_quirks_auto_create_offsets_delete(broker):
    producer = Producer(client_config(broker.bootstrap))
    topic = f"auto_{uuid.uuid4().hex[:8]}"
    before = int(time.time() * 1000)
    for i in range(5):
        producer.produce(topic, value=f"v{i}".encode(), timestamp=before + i * 1000)
    assert producer.flush(15) == 0
    meta = broker.admin().list_topics(topic, timeout=10).topics[topic]
    assert len(meta.partitions) == 1  # auto-created with one partition
    consumer = Consumer({**client_config(broker.bootstrap), "group.id": "offsets"})
    try:
        assert consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 5)
        found = consumer.offsets_for_times([TopicPartition(topic, 0, before + 2500)], timeout=10)
        assert found[0].offset == 3
        consumer.assign([TopicPartition(topic, 0, 0)])
        assert consumer.poll(10).value() == b"v0"
        # deleting the topic under a live consumer: no crash, no error surfaced
        broker.delete_topics([topic])
        deadline = time.monotonic() + 10
        while topic in broker.admin().list_topics(timeout=10).topics and time.monotonic() < deadline:
            time.sleep(0.2)
        assert topic not in broker.admin().list_topics(timeout=10).topics
        polled = [consumer.poll(0.5) for _ in range(4)]
        assert all(m is None or m.error() is None for m in polled)
    finally:
        consumer.close()


@pytest.mark.slow
def test_broker_message_size_limits(broker):
    small, large = f"small_{uuid.uuid4().hex[:6]}", f"large_{uuid.uuid4().hex[:6]}"
    broker.create_topics([small], partitions=1)
    broker.create_topics([large], partitions=1, config=LARGE_MESSAGE_TOPIC_CONFIG)
    producer = Producer(client_config(broker.bootstrap))
    results: dict = {}

    def produce(topic: str, size: int) -> None:
        producer.produce(topic, value=os.urandom(size),
                         on_delivery=lambda err, msg: results.__setitem__((topic, size), err))
        producer.flush(30)

    produce(small, 1_000_000)
    produce(small, 2 * 1024 * 1024)
    for _ in range(12):
        produce(large, 10 * 1024 * 1024)
    assert results[(small, 1_000_000)] is None
    assert results[(small, 2 * 1024 * 1024)].code() == KafkaError.MSG_SIZE_TOO_LARGE
    assert results[(large, 10 * 1024 * 1024)] is None
    # twelve 10 MB records come back in one fetch above librdkafka's default limit
    got = _consume(client_config(broker.bootstrap), large, 1, 12, timeout=30)
    assert [len(m.value()) for m in got] == [10 * 1024 * 1024] * 12
    assert CLIENT_QUIRKS["receive.message.max.bytes"] > 12 * 10 * 1024 * 1024


@pytest.mark.slow
def test_confluent_avro_round_trip_through_broker_and_registry(kafka_client_config, registry_url, unique_name):
    """AvroSerializer auto-registers; AvroDeserializer resolves the id from the wire."""
    from decimal import Decimal

    topic = unique_name("orders")
    registry = SchemaRegistryClient({"url": registry_url})
    serializer = AvroSerializer(registry, ORDER_SCHEMA)
    deserializer = AvroDeserializer(registry)
    admin_conf = {"bootstrap.servers": kafka_client_config["bootstrap.servers"]}
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(admin_conf)
    admin.create_topics([NewTopic(topic, 3, 1)])[topic].result(15)
    records = [{"id": i, "customer": f"c{i % 4}", "amount": Decimal(f"{i}.25"), "note": None if i % 2 else "x"}
               for i in range(30)]
    producer = Producer(kafka_client_config)
    for rec in records:
        payload = serializer(rec, SerializationContext(topic, MessageField.VALUE))
        producer.produce(topic, key=str(rec["id"]).encode(), value=payload, partition=rec["id"] % 3)
    assert producer.flush(15) == 0

    schema_id = registry.lookup_schema(f"{topic}-value", Schema(ORDER_SCHEMA, "AVRO")).schema_id
    messages = _consume(kafka_client_config, topic, 3, len(records))
    assert len(messages) == len(records)
    decoded = []
    for msg in messages:
        value = msg.value()
        assert value[0] == 0 and int.from_bytes(value[1:5], "big") == schema_id
        decoded.append(deserializer(value, SerializationContext(topic, MessageField.VALUE)))
    assert sorted(decoded, key=lambda r: r["id"]) == records


def test_catalog_fixture_round_trip(catalog, unique_name):
    """Both catalog backends create, append and read back a table."""
    namespace = unique_name("ns")
    catalog.create_namespace(namespace)
    table = catalog.create_table(f"{namespace}.t", schema=pa.schema([("id", pa.int64()), ("s", pa.string())]))
    table.append(pa.table({"id": [1, 2, 3], "s": ["a", "b", None]}))
    loaded = catalog.load_table(f"{namespace}.t")
    assert sorted(loaded.scan().to_arrow().column("id").to_pylist()) == [1, 2, 3]
    assert (namespace,) in catalog.list_namespaces()


@pytest.mark.skipif(not _have_postgres(), reason="PostgreSQL server binaries not installed")
def test_local_postgres_stops_without_leftovers():
    import psycopg2

    pg = LocalPostgres(database="things")
    uri = pg.start()
    assert uri.startswith("postgresql+psycopg2://") and uri.endswith("/things")
    conn = psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="things")
    with conn, conn.cursor() as cur:
        cur.execute("select current_database()")
        assert cur.fetchone() == ("things",)
    conn.close()
    pid = pg.pid
    pg.stop(remove_data=False)
    assert not pid_alive(pid)
    assert _processes_mentioning(pg.workdir) == []
    # a second start reuses the initialised cluster and the database
    assert os.path.exists(os.path.join(pg.data_dir, "PG_VERSION"))
    assert pg.start().endswith("/things")
    pg.stop()
    assert not os.path.exists(pg.workdir)  # a temporary cluster dir is removed


@pytest.mark.skipif(not _have_postgres() or os.geteuid() != 0, reason="needs root and PostgreSQL binaries")
def test_local_postgres_refuses_a_private_parent_dir(tmp_path):
    from router.devstack.exceptions import ServiceStartError

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with pytest.raises(ServiceStartError, match="cannot enter"):
        LocalPostgres(str(private / "pg")).start()


def _stack(args: list[str], stack_dir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ICEROUTER_STACK_DIR": stack_dir}
    return subprocess.run([sys.executable, STACK_SCRIPT, *args], capture_output=True, text=True, env=env,
                          timeout=120, cwd=stack_dir)


@pytest.mark.slow
def test_stack_script_start_status_stop(world_traversable_dir):
    stack_dir = world_traversable_dir
    extra = ["--s3", *(["--postgres"] if _have_postgres() else [])]
    started = _stack(["start", *extra], stack_dir)
    assert started.returncode == 0, started.stderr
    status = json.loads(started.stdout)
    pids = {name: svc["pid"] for name, svc in status["services"].items()}
    try:
        assert set(pids) == {"kafka", "registry", "s3", *(["postgres"] if "--postgres" in extra else [])}
        # the REST catalog over S3 works with the secret from the stack dir; status never shows it
        with open(os.path.join(stack_dir, "s3.secret"), encoding="ascii") as fh:
            secret = fh.read().strip()
        assert secret and secret not in started.stdout
        rest = status["catalogs"]["rest"]
        assert rest["s3.secret-access-key"] == "******" and rest["credential"] == "******"
        from pyiceberg.catalog import load_catalog

        lake = load_catalog("stack", **{**rest, "s3.secret-access-key": secret,
                                        "credential": f"{rest['s3.access-key-id']}:{secret}"})
        lake.create_namespace("stack_ns")
        table = lake.create_table("stack_ns.t", schema=pa.schema([("id", pa.int64())]))
        table.append(pa.table({"id": [1, 2]}))
        assert read_iceberg_rows(lake.load_table("stack_ns.t"), order_by="id") == [{"id": 1}, {"id": 2}]
        assert all(svc["alive"] and svc["listening"] for svc in status["services"].values())
        again = _stack(["status"], stack_dir)
        assert again.returncode == 0 and json.loads(again.stdout)["services"]["kafka"]["pid"] == pids["kafka"]
        # a second start keeps the running services
        restarted = _stack(["start", *extra], stack_dir)
        assert {n: s["pid"] for n, s in json.loads(restarted.stdout)["services"].items()} == pids
        # the services answer
        registry = SchemaRegistryClient({"url": status["services"]["registry"]["url"]})
        sid = registry.register_schema("stack-value", Schema(ORDER_SCHEMA, "AVRO"))
        assert registry.get_latest_version("stack-value").schema_id == sid
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": status["services"]["kafka"]["url"]})
        assert "__consumer_offsets" in admin.list_topics(timeout=10).topics
        assert os.path.exists(os.path.join(stack_dir, STATE_FILE))
    finally:
        stopped = _stack(["stop"], stack_dir)
    assert stopped.returncode == 0, stopped.stderr
    assert all(json.loads(stopped.stdout)["stopped"].values())
    assert not any(pid_alive(pid) for pid in pids.values())
    assert _processes_mentioning(stack_dir) == []
    after = _stack(["status"], stack_dir)
    assert after.returncode == 1 and json.loads(after.stdout)["services"] == {}


@pytest.mark.slow
def test_stack_in_process_and_registry_ids_survive_restart(tmp_path):
    stack_dir = str(tmp_path / "inproc")
    with LocalStack(stack_dir, tied_to_parent=True) as stack:
        assert stack.kafka_config()["receive.message.max.bytes"] == CLIENT_QUIRKS["receive.message.max.bytes"]
        assert stack.catalog_properties("sqlite")["uri"].startswith("sqlite:///")
        first = SchemaRegistryClient({"url": stack.registry_url}).register_schema(
            "keep-value", Schema(ORDER_SCHEMA, "AVRO"))
        pids = [s.pid for s in stack.state.services.values()]
    assert not any(pid_alive(p) for p in pids)
    with LocalStack(stack_dir) as stack:
        again = SchemaRegistryClient({"url": stack.registry_url}).get_latest_version("keep-value")
        assert again.schema_id == first


def test_stop_never_signals_a_recycled_pid(tmp_path):
    """A pid in the state file whose start time differs is left alone."""
    sleeper = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        stack_dir = str(tmp_path)
        state = StackState(stack_dir, {"registry": ServiceState(
            "registry", sleeper.pid, (process_start_time(sleeper.pid) or 0) + 12345, 1, "http://127.0.0.1:1")})
        state.save()
        result = LocalStack(stack_dir).stop()
        assert result == {"registry": True}  # recorded service is gone ...
        assert pid_alive(sleeper.pid)  # ... and the unrelated process survived
        assert not os.path.exists(os.path.join(stack_dir, STATE_FILE))
    finally:
        sleeper.kill()
        sleeper.wait()
