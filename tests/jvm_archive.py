"""One class-data archive for every Spark driver JVM the test session starts.

Each `icerouter run` a test starts, and each in-process session, starts a driver JVM that loads
Spark's classes from its jars (~7 CPU-s a JVM with the tests' JVM options, dozens of JVMs a run).
The job's own archive (`job.jvm_class_archive`, router/driver/jvm_classes.py) is kept per
checkpoint and recorded by a restart, so the tests' fresh checkpoints never get one. Here one JVM
records Spark's classes once, before the workers start (a job's session, a Python data source
read, a streaming query through foreachBatch), and every later JVM maps them with -Xshare:auto
through SPARK_SUBMIT_OPTS: a JVM the archive does not fit (another classpath, the Java reference
reader's Spark) ignores it and loads from its jars as before.

The archive is kept under ~/.cache/icerouter/test-jvm, named by what it depends on (the JDK,
Spark's jars, the tests' JVM options); ICEROUTER_TEST_JVM_ARCHIVE=0 turns it off. .ci/run records
it beside the Java reference reader's install (`python3 -m tests.jvm_archive prepare`).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from router.driver import jvm_classes

#: The tests' JVM options (tests/conftest.py): C1 alone and the serial collector suit JVMs that live
#: seconds to minutes with small heaps (the exactly-once scenario took ~20% less CPU so).
TEST_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
FOLDER = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "icerouter" / "test-jvm"
RECORD_TIMEOUT_SECONDS = 300


def prepare() -> None:
    """Record the archive if there is none, then name it in SPARK_SUBMIT_OPTS (inherited by the
    workers and every process they start). Any failure leaves the JVMs as they were."""
    options = os.environ.get("SPARK_SUBMIT_OPTS", "")
    if os.environ.get("ICEROUTER_TEST_JVM_ARCHIVE") == "0" or any(f in options for f in jvm_classes.USER_FLAGS):
        return
    archive = ensure(options)
    if archive is not None:
        os.environ["SPARK_SUBMIT_OPTS"] = f"{options} -XX:SharedArchiveFile={archive} -Xshare:auto {jvm_classes.QUIET}"


def ensure(options: str) -> Path | None:
    """The archive for `options`, recorded first if there is none. The recorded dump is checked and
    put in place by the job's own `settle`, which also removes the archives of other keys."""
    java = jvm_classes.java_binary()
    key = java and jvm_classes.archive_key({"spark.driver.extraJavaOptions": options}, java)
    if not key:
        return None
    archive = FOLDER / f"driver-{key}{jvm_classes.ARCHIVE_SUFFIX}"
    if archive.exists():
        return archive
    FOLDER.mkdir(parents=True, exist_ok=True)
    dump = FOLDER / f"driver-{key}.{os.getpid()}{jvm_classes.DUMP_SUFFIX}"
    started = time.monotonic()
    try:
        done = subprocess.run([sys.executable, "-m", "tests.jvm_archive"], capture_output=True, text=True,
                              timeout=RECORD_TIMEOUT_SECONDS, cwd=Path(__file__).parent.parent,
                              env={**os.environ, "SPARK_SUBMIT_OPTS":
                                   f"{options} -XX:ArchiveClassesAtExit={dump} {jvm_classes.QUIET}"})
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"tests: no class archive for the session's JVMs: {exc}", file=sys.stderr)
        return None
    lines = done.stdout.strip().splitlines() if done.returncode == 0 else []
    if lines and dump.exists():
        jvm_classes.record_classpath(dump, lines[-1])  # the recording JVM's classpath, which the check runs with
        # the dump is finished (its JVM exited): settled as if its settling time had passed
        if jvm_classes.settle(FOLDER, key, java, now=time.time() + jvm_classes.DUMP_SETTLE_SECONDS) is not None:
            print(f"tests: Spark's classes recorded for the session's JVMs in {time.monotonic() - started:.0f} s "
                  f"({archive})", file=sys.stderr)
            return archive
    print(f"tests: no class archive for the session's JVMs (exit {done.returncode}): "
          f"{(done.stderr or '').strip().splitlines()[-1:]}", file=sys.stderr)
    with contextlib.suppress(OSError):
        dump.unlink()
    return None


def record() -> None:
    """What a test's job does in its driver JVM, once: the classes it loads are the ones recorded."""
    from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

    from router.config.load import parse_config
    from router.driver.session import build_spark, warm_python_workers

    class Ticks(DataSource):
        @classmethod
        def name(cls) -> str:
            return "icerouter-archive-ticks"

        def schema(self) -> str:
            return "n long"

        def streamReader(self, schema) -> DataSourceStreamReader:
            return TicksReader()

    class TicksReader(DataSourceStreamReader):
        def initialOffset(self) -> dict:
            return {"n": 0}

        def latestOffset(self) -> dict:
            return {"n": 100}

        def partitions(self, start: dict, end: dict) -> list[InputPartition]:
            return [InputPartition((start["n"], end["n"]))]

        def read(self, partition):
            low, high = partition.value
            for n in range(low, high):
                yield (n,)

    def arrow_identity(batches):
        yield from batches

    with tempfile.TemporaryDirectory(prefix="icerouter-archive-") as work:
        config = parse_config({"kafka": {"bootstrap_servers": "127.0.0.1:9", "pattern": ".*"},
                               "registry": {"url": "http://127.0.0.1:9"},
                               "job": {"name": "archive", "checkpoint": f"{work}/checkpoint",
                                       "spark": {"spark.master": "local[2]"}},
                               "routes": [{"name": "all", "topic": ".*", "table": "raw.{topic}"}]})
        spark = build_spark(config)
        warm_python_workers(spark).join()
        spark.dataSource.register(Ticks)
        seen = []

        def batch(frame, batch_id) -> None:
            seen.append(frame.mapInArrow(arrow_identity, frame.schema).count())

        query = (spark.readStream.format(Ticks.name()).load().writeStream
                 .option("checkpointLocation", f"{work}/checkpoint").trigger(availableNow=True)
                 .foreachBatch(batch).start())
        query.awaitTermination()
        spark.createDataFrame([(1, "a")], "id long, s string").collect()
        if seen != [100]:
            raise SystemExit(f"the recording query saw {seen}")
        print(spark.sparkContext._jvm.java.lang.System.getProperty("java.class.path"))
        spark.stop()


if __name__ == "__main__":
    if sys.argv[1:] == ["prepare"]:  # .ci/run: recorded while the Java reference reader installs
        ensure(os.environ.get("SPARK_SUBMIT_OPTS", TEST_JVM_OPTIONS))
    else:
        record()
