"""Spark session for the source tests; the broker fixtures (``kafka_bootstrap``,
``kafka_client_config``) come from tests/conftest.py."""

from __future__ import annotations

import os
import uuid

import pytest

os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")


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
