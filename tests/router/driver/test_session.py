"""The driver's Spark session helpers (router/driver/session.py) on real Spark in local mode."""

from __future__ import annotations

import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from router.driver.session import warm_python_workers

pytestmark = pytest.mark.slow


class Probe(DataSource):
    """What a Python data source's task finds in its worker: its pid and whether the write path is imported."""

    @classmethod
    def name(cls) -> str:
        return "icerouter-test-probe"

    def schema(self) -> str:
        return "pid int, warm boolean"

    def reader(self, schema) -> DataSourceReader:
        return ProbeReader()


class ProbeReader(DataSourceReader):
    def partitions(self):
        return [InputPartition(i) for i in range(2)]

    def read(self, partition):
        import os
        import sys

        yield (os.getpid(), "router.executor.tasks" in sys.modules)


def test_the_warm_up_leaves_workers_whose_write_path_is_imported(spark):
    warm = warm_python_workers(spark)
    warm.join(180)
    assert not warm.is_alive()
    spark.dataSource.register(Probe)
    rows = spark.read.format("icerouter-test-probe").load().collect()
    assert len(rows) == 2 and all(r.warm for r in rows), rows


def test_the_warm_up_can_be_turned_off(spark, monkeypatch):
    monkeypatch.setenv("ICEROUTER_WARM_UP", "0")
    thread = warm_python_workers(spark)
    assert thread.ident is None  # never started


@pytest.mark.parametrize("checkpoint, local", [
    ("/var/lib/icerouter/checkpoint", True), ("file:///var/lib/icerouter/checkpoint", True),
    ("checkpoint", True), ("hdfs://nn/icerouter/checkpoint", False), ("s3a://bucket/icerouter/checkpoint", False),
])
def test_a_local_checkpoint_skips_the_checksummed_file_context(checkpoint, local):
    """The live job's checkpoint files (tests/router/driver/test_job_e2e.py) show the settings take effect."""
    from router.driver.session import LOCAL_CHECKPOINT_SETTINGS, checkpoint_settings

    assert checkpoint_settings(checkpoint) == (LOCAL_CHECKPOINT_SETTINGS if local else {})
