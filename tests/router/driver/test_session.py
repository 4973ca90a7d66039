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


# A fresh driver built by the job's build_spark, stopped while a batch runs a Spark job: the job is
# cancelled, the batch fails with a Py4J error (a Python traceback and a Java stack: thousands of
# characters), and Spark, the query being stopped, matches that message against its interruption
# regex `((.|\r\n|\r|\n)*)`, which recurses once per character.
STOP_DURING_A_BATCH = """
import os, sys, tempfile, threading, time
from router.config import parse_config
from router.driver.session import build_spark

config = parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": ["t"]},
                       "registry": {"url": "http://127.0.0.1:1"},
                       "job": {"checkpoint": tempfile.mkdtemp(), "spark": {"spark.master": "local[1]"}},
                       "routes": [{"name": "r", "table": "raw.t"}]})
extra = {"spark.ui.enabled": "false"}
if sys.argv[1] != "job":
    extra["spark.driver.extraJavaOptions"] = ""  # Java's default thread stack
spark = build_spark(config, extra)
running = threading.Event()

def slow(rows):
    time.sleep(30)
    return rows

def batch(df, batch_id):
    if batch_id >= 1:
        running.set()
        df.rdd.mapPartitions(slow).count()

query = (spark.readStream.format("rate").option("rowsPerSecond", 5).load().writeStream.foreachBatch(batch)
         .trigger(processingTime="1 second").option("checkpointLocation", tempfile.mkdtemp()).start())
running.wait(120)
time.sleep(2)
query.stop()
error = query.exception()
print("VERDICT " + ("StackOverflowError" if "StackOverflowError" in str(error) else
                    "stopped" if error is None else "other: " + str(error)[:300].replace(chr(10), " ")), flush=True)
"""


@pytest.mark.parametrize("settings, overflow", [("job", False), ("java-default", True)])
def test_a_stop_during_a_batch_stops_the_query_cleanly(settings, overflow):
    """With the job's driver thread stack a stop during a batch is a stop; with Java's default stack
    Spark's own check of the cancelled batch's message overflows the stream thread's stack."""
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    out = subprocess.run([sys.executable, "-c", STOP_DURING_A_BATCH, settings], capture_output=True, text=True,
                         timeout=240, env=env)
    verdicts = [line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("VERDICT ")]
    assert verdicts == ["stopped"], (verdicts, out.stderr[-2000:])
    assert ("java.lang.StackOverflowError" in out.stderr) is overflow, out.stderr[-2000:]
