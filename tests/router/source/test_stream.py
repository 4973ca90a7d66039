"""The source inside real Spark Structured Streaming queries against a real broker."""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from router.source import KafkaSourceOptions, kafka_stream
from router.source.offsets import pack_ranges, plan_ranges

from .kafka_helpers import create_topics, expected_record, produce

pytestmark = pytest.mark.slow

TOPICS, PARTITIONS, FIRST, MORE = 30, 3, 20, 10


class BatchLog:
    """Collects what each micro-batch saw; foreachBatch runs in the driver process."""

    def __init__(self) -> None:
        self.tables: dict[int, pa.Table] = {}
        self.num_partitions: dict[int, int] = {}

    def __call__(self, batch_df, batch_id: int) -> None:
        self.num_partitions[batch_id] = batch_df.rdd.getNumPartitions()
        self.tables[batch_id] = batch_df.toArrow()

    def rows(self) -> list[dict]:
        return [r for t in self.tables.values() for r in t.to_pylist()]


def run_available_now(df, checkpoint: Path, sink) -> "object":
    query = (
        df.writeStream.foreachBatch(sink)
        .trigger(availableNow=True)
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    assert query.awaitTermination(180), "availableNow query did not finish"
    assert query.exception() is None
    return query


def assert_rows_match_producer(rows: list[dict]) -> None:
    for row in rows:
        topic, partition, seq = row["key"].decode().rsplit(":", 2)
        assert (topic, int(partition)) == (row["topic"], row["partition"])
        rec = expected_record(row["topic"], row["partition"], int(seq))
        assert row["value"] == rec["value"]
        assert int(row["timestamp"].timestamp() * 1000) == rec["timestamp_ms"]
        assert row["timestampType"] == 0
        expected_headers = [{"key": k, "value": v} for k, v in rec["headers"]] if rec["headers"] else None
        assert row["headers"] == expected_headers


def expected_offsets(topics, partitions, first, last):
    return sorted((t, p, o) for t in topics for p in range(partitions) for o in range(first, last))


def checkpoint_offsets(checkpoint: Path) -> dict[int, str]:
    """Raw source offset JSON of every batch in the checkpoint's offset log."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = f.read_text().splitlines()[-1]
    return out


@pytest.fixture(scope="module")
def many_topics(spark, kafka_bootstrap, kafka_client_config, tmp_path_factory):
    """30 topics x 3 partitions read once with availableNow."""
    uid = f"{time.time_ns() % 10**9:09d}"
    topics = [f"many-{uid}-{i:02d}" for i in range(TOPICS)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, PARTITIONS)
    produce(kafka_bootstrap, kafka_client_config, topics, PARTITIONS, FIRST)
    options = KafkaSourceOptions(kafka_bootstrap, pattern=f"many-{uid}-.*", client_config=kafka_client_config)
    checkpoint = tmp_path_factory.mktemp("many") / "checkpoint"
    log = BatchLog()
    query = run_available_now(kafka_stream(spark, options, force_python=True), checkpoint, log)
    return {"topics": topics, "options": options, "checkpoint": checkpoint, "log": log, "query": query}


def test_available_now_reads_every_record_exactly_once(many_topics):
    rows = many_topics["log"].rows()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert got == expected_offsets(many_topics["topics"], PARTITIONS, 0, FIRST)
    assert_rows_match_producer(rows)


def test_input_partitions_are_packed_tasks_not_topic_partitions(many_topics, spark):
    target = 2 * spark.sparkContext.defaultParallelism
    for progress in many_topics["query"].recentProgress:
        source = progress["sources"][0]
        if not progress["numInputRows"]:
            continue
        start, end = _as_dict(source["startOffset"]), _as_dict(source["endOffset"])
        packed = pack_ranges(plan_ranges(start, end), target)
        assert many_topics["log"].num_partitions[progress["batchId"]] == len(packed)
        assert len(packed) <= target < TOPICS * PARTITIONS


def test_checkpointed_offsets_have_sorted_keys(many_topics):
    offsets = checkpoint_offsets(many_topics["checkpoint"])
    assert offsets
    for text in offsets.values():
        keys = [k for k, _ in json.loads(text, object_pairs_hook=lambda pairs: pairs)]
        assert keys == sorted(keys) and len(keys) == TOPICS * PARTITIONS


def test_restart_from_checkpoint_reads_only_new_records(many_topics, spark, kafka_bootstrap, kafka_client_config):
    produce(kafka_bootstrap, kafka_client_config, many_topics["topics"], PARTITIONS, MORE, first_seq=FIRST)
    log = BatchLog()
    run_available_now(kafka_stream(spark, many_topics["options"], force_python=True), many_topics["checkpoint"], log)
    rows = log.rows()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    assert got == expected_offsets(many_topics["topics"], PARTITIONS, FIRST, FIRST + MORE)
    assert_rows_match_producer(rows)


def test_max_records_per_trigger_bounds_every_batch(spark, kafka_bootstrap, kafka_client_config, uid, tmp_path):
    topics = [f"limit-{uid}-{i}" for i in range(4)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    produce(kafka_bootstrap, kafka_client_config, topics, 2, 25)
    options = KafkaSourceOptions(
        kafka_bootstrap, topics=tuple(topics), client_config=kafka_client_config, max_records_per_trigger=30
    )
    log = BatchLog()
    run_available_now(kafka_stream(spark, options, force_python=True), tmp_path / "ck", log)
    sizes = [t.num_rows for t in log.tables.values()]
    assert all(0 < n <= 30 for n in sizes), sizes
    assert sum(sizes) == 200 and len(sizes) >= 7
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in log.rows())
    assert got == expected_offsets(topics, 2, 0, 25)


@pytest.mark.parametrize("catch_up", ["turns", "even"])
def test_a_backlog_larger_than_the_limit_is_read_in_turns_or_evenly(catch_up, spark, kafka_bootstrap,
                                                                    kafka_client_config, uid, tmp_path):
    topics = [f"turns-{uid}-{catch_up}-{i}" for i in range(4)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    produce(kafka_bootstrap, kafka_client_config, topics, 2, 25)
    options = KafkaSourceOptions(kafka_bootstrap, topics=tuple(topics), client_config=kafka_client_config,
                                 max_records_per_trigger=100, catch_up=catch_up)
    log = BatchLog()
    run_available_now(kafka_stream(spark, options, force_python=True), tmp_path / "ck", log)
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in log.rows())
    assert got == expected_offsets(topics, 2, 0, 25)
    per_batch = [Counter((t, p) for t, p in zip(table.column("topic").to_pylist(), table.column("partition").to_pylist()))
                 for table in log.tables.values() if table.num_rows]
    if catch_up == "turns":  # two batches of two whole topics each
        assert sorted(sorted({t for t, _ in batch}) for batch in per_batch) == [topics[:2], topics[2:]]
        assert all(set(batch.values()) == {25} for batch in per_batch)
    else:  # every partition in every batch
        assert len(per_batch) == 2 and all(len(batch) == 8 for batch in per_batch)


def test_pattern_picks_up_topics_created_while_running(spark, kafka_bootstrap, kafka_client_config, uid, tmp_path):
    first, later = f"pat-{uid}-first", f"pat-{uid}-later"
    create_topics(kafka_bootstrap, kafka_client_config, [first], 2)
    produce(kafka_bootstrap, kafka_client_config, [first], 2, 5)
    options = KafkaSourceOptions(
        kafka_bootstrap, pattern=f"pat-{uid}-.*", client_config=kafka_client_config, starting_offsets="latest"
    )
    log = BatchLog()
    query = (
        kafka_stream(spark, options, force_python=True)
        .writeStream.foreachBatch(log)
        .trigger(processingTime="500 milliseconds")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .start()
    )
    try:
        _wait(lambda: query.lastProgress is not None, query)
        produce(kafka_bootstrap, kafka_client_config, [first], 2, 3, first_seq=5)
        create_topics(kafka_bootstrap, kafka_client_config, [later], 2)
        produce(kafka_bootstrap, kafka_client_config, [later], 2, 4)
        _wait(lambda: len(log.rows()) >= 6 + 8, query)
        time.sleep(1.5)  # a few more triggers: nothing may be read twice
    finally:
        query.stop()
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in log.rows())
    # "latest" skips what existed at start; the new topic is read from its earliest offset
    assert got == expected_offsets([first], 2, 5, 8) + expected_offsets([later], 2, 0, 4)


def test_map_in_arrow_over_the_stream_counts_per_topic(spark, kafka_bootstrap, kafka_client_config, uid, tmp_path):
    topics = [f"arrow-{uid}-{i}" for i in range(3)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    for i, topic in enumerate(topics):
        produce(kafka_bootstrap, kafka_client_config, [topic], 2, 10 * (i + 1))

    def count_per_topic(batches):
        import pyarrow.compute as pc

        counts: Counter = Counter()
        for batch in batches:
            for item in pc.value_counts(batch.column("topic")).to_pylist():
                counts[item["values"]] += item["counts"]
        yield pa.RecordBatch.from_pylist(
            [{"topic": t, "n": n} for t, n in counts.items()],
            schema=pa.schema([("topic", pa.string()), ("n", pa.int64())]),
        )

    options = KafkaSourceOptions(kafka_bootstrap, topics=tuple(topics), client_config=kafka_client_config)
    counted = kafka_stream(spark, options, force_python=True).mapInArrow(count_per_topic, "topic string, n long")
    log = BatchLog()
    run_available_now(counted, tmp_path / "ck", log)
    totals: Counter = Counter()
    for row in log.rows():
        totals[row["topic"]] += row["n"]
    assert dict(totals) == {t: 2 * 10 * (i + 1) for i, t in enumerate(topics)}


def _wait(condition, query, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if query.exception() is not None:
            raise query.exception()
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError("condition not reached before timeout")


def _as_dict(offset) -> dict:
    """Progress reports offsets as parsed JSON (or a string, or null for the first batch)."""
    if isinstance(offset, str):
        offset = json.loads(offset)
    return offset or {}


def test_without_jvm_connector_the_python_source_is_used(spark, kafka_bootstrap):
    from router.source import jvm_kafka_available

    assert not jvm_kafka_available(spark)  # no spark-sql-kafka jars in this environment
    df = kafka_stream(spark, KafkaSourceOptions(kafka_bootstrap, topics=("unused",)))
    assert df.isStreaming
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert "PythonMicroBatchStream" in df._jdf.queryExecution().toString() or "icerouter-kafka" in str(
        df._jdf.queryExecution().logical()
    )
