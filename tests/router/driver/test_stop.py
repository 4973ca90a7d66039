"""Stopping the job between micro-batches (router/driver/job.stop_between_batches), on real Spark."""

from __future__ import annotations

import threading
import time

import pytest

from router.driver.job import stop_between_batches

BATCH_SECONDS = 20.0  # a task's sleep: only a cancelled job ends sooner


def _slow_task(rows):
    time.sleep(BATCH_SECONDS)
    return rows


def _rate_stream(spark, tmp_path, handle, trigger: str):
    return (spark.readStream.format("rate").option("rowsPerSecond", 10).load()
            .writeStream.foreachBatch(handle).trigger(processingTime=trigger)
            .option("checkpointLocation", str(tmp_path / "checkpoint")).start())


def gated_query(spark, tmp_path, marks: list, gate: threading.Event):
    """A rate stream whose batch 1 runs a Spark job and then holds until `gate` opens, so the test, not
    the machine's speed, decides how long the batch runs; notes when each call starts and ends."""

    def handle(df, batch_id):
        marks.append(("start", batch_id))
        df.count()  # a Spark job, as the job's write tasks are
        if batch_id == 1:
            gate.wait(120)
        marks.append(("end", batch_id))

    return _rate_stream(spark, tmp_path, handle, "10 seconds")


def slow_query(spark, tmp_path, marks: list):
    """A rate stream whose foreachBatch runs a Spark job of BATCH_SECONDS and notes when each call
    starts, ends, or fails."""

    def handle(df, batch_id):
        marks.append(("start", batch_id))
        try:
            df.rdd.mapPartitions(_slow_task).count()
        except Exception:  # the job was cancelled under it
            marks.append(("failed", batch_id))
            raise
        marks.append(("end", batch_id))

    return _rate_stream(spark, tmp_path, handle, "6 seconds")


def _wait_for(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_stop_during_a_batch_lets_it_finish_first(spark, tmp_path):
    marks: list = []
    gate = threading.Event()
    result: dict = {}
    query = gated_query(spark, tmp_path, marks, gate)
    try:
        _wait_for(lambda: ("start", 1) in marks)  # batch 0 of a rate stream is empty
        stopper = threading.Thread(target=lambda: result.update(between=stop_between_batches(query, timeout=90)))
        stopper.start()
        time.sleep(1.0)
        assert query.isActive and ("end", 1) not in marks  # the stop waits for the running batch
        gate.set()
        stopper.join(120)
        ended_at_stop = list(marks)
    finally:
        gate.set()
        if query.isActive:
            query.stop()
    assert result.get("between") is True and not query.isActive
    assert ("end", 1) in ended_at_stop  # the batch ran to its end before the query stopped
    assert sum(1 for m in ended_at_stop if m[0] == "start") == sum(1 for m in ended_at_stop if m[0] == "end")


def test_a_batch_that_outlasts_the_wait_is_stopped_anyway(spark, tmp_path):
    marks: list = []
    query = slow_query(spark, tmp_path, marks)
    try:
        _wait_for(lambda: ("start", 1) in marks)  # batch 0 of a rate stream is empty
        started = time.monotonic()
        between = stop_between_batches(query, timeout=0.5)
        waited = time.monotonic() - started
    finally:
        if query.isActive:
            query.stop()
    assert not between and not query.isActive
    assert waited < BATCH_SECONDS  # the running batch's job was cancelled: the timeout decided
    assert ("end", 1) not in marks
