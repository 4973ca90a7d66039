"""The driver's Spark session (driver side, once per start).

Apart from the rest of the driver so that `icerouter run` can start the JVM (seconds) first, in a
thread, while the job's own modules (pyiceberg, pyarrow, the catalog) are imported and the
catalog and broker are read: this module imports pyspark and the config alone.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from router.config import RouterConfig
from router.driver.jvm_classes import note_classpath, sharing_options

log = logging.getLogger("icerouter.job")

SPARK_DEFAULTS = {
    "spark.master": "local[*]",
    "spark.app.name": "icerouter",
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.driver.memory": "4g",
    "spark.driver.maxResultSize": "1g",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.python.worker.reuse": "true",
    # tasks are retried on executors (registry hiccups, lost workers)
    "spark.task.maxFailures": "4",
}

#: With a checkpoint on local disk: Spark's default manager (Hadoop's FileContext over the checksummed
#: local file system) took ~40 ms to write each of a batch's two log files, these ~7 ms (an idle
#: machine, a trivial query: triggerExecution 104 -> 42 ms). Same rename of a temporary file into
#: place; no .crc files. Other file systems (HDFS, object stores) keep Spark's defaults.
LOCAL_CHECKPOINT_SETTINGS = {
    "spark.sql.streaming.checkpointFileManagerClass":
        "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
    "spark.hadoop.fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
}


def checkpoint_settings(checkpoint: str) -> dict[str, str]:
    """LOCAL_CHECKPOINT_SETTINGS for a checkpoint on local disk (a path, or a file: URI), else none."""
    scheme = urlparse(checkpoint).scheme
    return dict(LOCAL_CHECKPOINT_SETTINGS) if scheme in ("", "file") else {}


#: The driver JVM's thread stack. A foreachBatch error reaches the stream thread as a Py4J message (the
#: Python traceback and the Java stack), and Spark tells an interruption from a failure by matching it
#: against `((.|\r\n|\r|\n)*)`, which recurses once per character: with Java's default 1 MiB stack a
#: message over ~3,000 characters overflowed it, so a stop during a batch, or a batch's own error,
#: killed the stream thread with a StackOverflowError instead (tests/router/driver/test_session.py).
#: 32 MiB takes ~90,000 characters; stacks are reserved, not committed, memory.
DRIVER_THREAD_STACK = "-Xss32m"


def build_spark(config: RouterConfig, extra: dict[str, Any] | None = None):
    """A SparkSession: our defaults, then what spark-submit set (when it started this driver), then
    `job.spark` (Spark's own order: settings made in code win over spark-submit's). Call before any
    JVM starts, or from a driver spark-submit started."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # a corrupt Avro payload makes the columnar reader panic (caught, the record is dead-lettered);
    # keep that to one line in the worker logs instead of a full Rust backtrace
    os.environ["RUST_BACKTRACE"] = "0"
    log4j = Path(__file__).with_name("log4j2.properties")
    quiet = {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j} {DRIVER_THREAD_STACK}",
             "spark.executor.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}"}
    submitted = submitted_settings()
    own = {k: str(v) for k, v in config.job.spark.items()}
    for key in sorted(own.keys() & submitted.keys()):
        if own[key] != submitted[key]:
            log.warning("job.spark sets %s=%s over spark-submit's %s", key, own[key], submitted[key])
    settings = {**SPARK_DEFAULTS, **quiet, **checkpoint_settings(config.job.checkpoint), **submitted, **own,
                **(extra or {})}
    launched = not submitted and not jvm_running()  # this process starts the driver's JVM
    # the driver's JVM maps Spark's classes from an archive of a previous start (router/driver/jvm_classes.py)
    sharing, dump = (sharing_options(config.job.checkpoint, settings) if launched and config.job.jvm_class_archive
                     else ("", None))
    if sharing:
        settings["spark.driver.extraJavaOptions"] = f"{settings['spark.driver.extraJavaOptions']} {sharing}"
    # the Python workers' interpreter is PYSPARK_PYTHON in this process (pyspark reads nothing else);
    # spark-submit sets it from spark.pyspark.python, pyspark's own JVM launch does not
    if settings.get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = settings["spark.pyspark.python"]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    master = settings.pop("spark.master")
    if master.startswith("local[") and "," not in master:
        master = master[:-1] + ",4]"  # local[N,F]: allow task retries in local mode
    # the context first: Spark's look-up of installed Python data sources then runs while the session is built
    context = SparkContext.getOrCreate(SparkConf().setMaster(master).setAll(list(settings.items())))
    threading.Thread(target=look_up_python_sources, args=(context,), name="icerouter-sources", daemon=True).start()
    builder = SparkSession.builder.master(master)
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()  # on that context
    spark.sparkContext.setLogLevel(os.environ.get("ICEROUTER_SPARK_LOG_LEVEL", "ERROR"))
    if dump is not None:
        note_classpath(spark, dump)
    return spark


def look_up_python_sources(context) -> None:
    """Spark looks up the installed Python data sources (`pyspark_*` packages) in a Python process of
    its own, once per JVM, when a session first registers one (~1.3 s of a start, measured): done
    here beside the session's construction, `fused_stream`'s registration finds it done. Any
    failure leaves the look-up to that registration, as without this."""
    with contextlib.suppress(Exception):
        context._jvm.org.apache.spark.sql.execution.datasources.DataSourceManager().dataSourceExists("icerouter")


def warm_python_workers(spark) -> threading.Thread:
    """Python workers with the write path imported, one per task slot, started in a daemon thread
    while the query starts (router/executor/warm_up.py). A failure only leaves the start as it was.
    ICEROUTER_WARM_UP=0 turns it off."""

    def work() -> None:
        from router.executor.warm_up import NAME, SCHEMA, WarmUpSource

        with contextlib.suppress(Exception):
            spark.dataSource.register(WarmUpSource)
            slots = spark.sparkContext.defaultParallelism
            spark.read.format(NAME).schema(SCHEMA).option("slots", slots).load().collect()

    thread = threading.Thread(target=work, name="icerouter-warm-up", daemon=True)
    if os.environ.get("ICEROUTER_WARM_UP", "1") != "0":
        thread.start()
    return thread


def jvm_running() -> bool:
    """True when this process is connected to a JVM already (its options are fixed)."""
    return SparkContext._gateway is not None


def submitted_settings() -> dict[str, str]:
    """The settings of the JVM spark-submit started for this driver (its --master, --conf and
    spark-defaults.conf); empty when pyspark is to start its own JVM."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:  # set by spark-submit for the Python it runs
        return {}
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM, starts none
    return dict(SparkConf().getAll())


def in_background(call, *args) -> Future:
    """`call(*args)` in a daemon thread: a start refused meanwhile exits at once with its one
    line, instead of waiting for the JVM, the broker or the catalog (an unreachable broker held
    the exit ~30 s, its client's connection errors printed after the refusal)."""
    future: Future = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call(*args))
        except BaseException as exc:  # handed to whoever awaits the answer
            future.set_exception(exc)

    threading.Thread(target=work, name=f"icerouter-start-{getattr(call, '__name__', 'call')}", daemon=True).start()
    return future


def start_spark(config: RouterConfig) -> Future:
    """`build_spark(config)` begun in the background: the session, once the JVM is up."""
    return in_background(build_spark, config)
