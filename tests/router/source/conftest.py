"""Real services for the source tests: a Kafka-compatible broker and a local Spark session.

The broker comes from ``ICEROUTER_TEST_BOOTSTRAP`` when set, else the PyPI
``noida-db`` binary is started on 127.0.0.1 for the test session.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"noida-db exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"noida-db did not listen on {port} within {timeout}s")


@pytest.fixture(scope="session")
def kafka_bootstrap():
    external = os.environ.get("ICEROUTER_TEST_BOOTSTRAP")
    if external:
        yield external
        return
    exe = shutil.which("noida-db")
    if exe is None:
        pytest.skip("noida-db is not installed and ICEROUTER_TEST_BOOTSTRAP is not set")
    data_dir = tempfile.mkdtemp(prefix="icerouter-source-broker-")
    port = _free_port()
    proc = subprocess.Popen(
        [exe, "start", "--data-dir", data_dir, "--only", "kafka", "--kafka-port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_for_port(port, proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(data_dir, ignore_errors=True)


@pytest.fixture(scope="session")
def kafka_client_config() -> dict[str, str]:
    """Extra librdkafka settings every client needs for the test broker."""
    return {"receive.message.max.bytes": "100000000"}


@pytest.fixture(scope="session")
def spark():
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2]")
        .appName("icerouter-source-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def uid() -> str:
    """A short unique prefix so topics never collide between tests or runs."""
    return uuid.uuid4().hex[:8]
