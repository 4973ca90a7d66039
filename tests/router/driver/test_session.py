"""The driver's Spark session helpers (router/driver/session.py) on real Spark in local mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from router.driver.session import warm_python_workers

pytestmark = pytest.mark.slow


# A fresh driver, as a job's start has: in a session other tests already used, Spark's pool of idle
# Python workers may hold older workers, which it hands out first (a queue), so the warmed ones are
# not the next read's.
WARM_UP_THEN_PROBE = """
import json, os
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from router.driver.session import warm_python_workers


class Probe(DataSource):
    @classmethod
    def name(cls):
        return "icerouter-test-probe"

    def schema(self):
        return "pid int, warm boolean"

    def reader(self, schema):
        return ProbeReader()


class ProbeReader(DataSourceReader):
    def partitions(self):
        return [InputPartition(i) for i in range(2)]

    def read(self, partition):  # what a data source's task finds in its worker
        import os, sys
        yield (os.getpid(), "router.executor.tasks" in sys.modules)


spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
warm = warm_python_workers(spark)
if warm.ident is not None:  # ICEROUTER_WARM_UP=0 never starts it
    warm.join(180)
spark.dataSource.register(Probe)
rows = spark.read.format("icerouter-test-probe").load().collect()
print("RESULT " + json.dumps({"alive": warm.is_alive(), "rows": [[r.pid, r.warm] for r in rows]}))
spark.stop()
"""


def test_the_warm_up_leaves_workers_whose_write_path_is_imported(tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(WARM_UP_THEN_PROBE)
    env = {k: v for k, v in os.environ.items() if k != "ICEROUTER_WARM_UP"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env,
                         cwd=str(Path(__file__).resolve().parents[3]))
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT ")]
    assert out.returncode == 0 and lines, out.stderr[-3000:]
    result = json.loads(lines[-1].removeprefix("RESULT "))
    assert not result["alive"]
    assert len(result["rows"]) == 2 and all(warm for _, warm in result["rows"]), result


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
