"""Rewinds (new tables' backfills, rolled-back tables) read in bounded batches, quiet topics included:
the pure planning functions, then real Spark queries against a real broker."""

from __future__ import annotations

import json

import pytest

from router.source import KafkaSourceOptions, kafka_stream
from router.source.offsets import ResumePlan
from router.source.rewind import REWIND_PREFIX, next_end, open_rewinds, rewind_ranges, split_rewinds

from .kafka_helpers import create_topics, produce
from .test_stream import BatchLog, checkpoint_offsets, expected_offsets, run_available_now


def drain(start: dict, latest: dict, backfill: dict, limit: int | None) -> list[list[tuple]]:
    """Batches (ranges) a source plans from a checkpoint `start` until the document stops changing."""
    opened, batches, turn = open_rewinds(start, backfill), [], None
    while True:
        end, turn = next_end(start, latest, limit, "even", turn, opened)
        if end == start:
            return batches
        batches.append(sorted(r.as_tuple() for r in rewind_ranges(start, end, opened)))
        start, opened = end, {}


def test_a_quiet_partition_is_read_again_in_bounded_batches():
    batches = drain({"t/0": 100, "u/0": 7}, {"t/0": 100, "u/0": 7}, {"t/0": 0}, limit=30)
    assert batches == [[("t", 0, 0, 30)], [("t", 0, 30, 60)], [("t", 0, 60, 90)], [("t", 0, 90, 100)]]


def test_the_cursor_shares_the_limit_and_the_position_waits_for_it():
    batches = drain({"t/0": 50, "u/0": 0}, {"t/0": 60, "u/0": 40}, {"t/0": 10}, limit=40)
    assert batches[0] == [("t", 0, 10, 30), ("u", 0, 0, 20)]  # shared evenly, the cursor first
    assert batches[1] == [("t", 0, 30, 50), ("u", 0, 20, 40)]
    assert batches[2] == [("t", 0, 50, 60)]  # the cursor closed: the partition goes on from its position
    reached = {(t, p): until for batch in batches for t, p, _, until in batch}
    assert reached == {("t", 0): 60, ("u", 0): 40}


def test_without_a_limit_one_batch_reads_from_the_cursor_to_the_end():
    assert drain({"t/0": 50}, {"t/0": 60}, {"t/0": 10}, limit=None) == [[("t", 0, 10, 60)]]


def test_no_rewind_where_the_checkpoint_is_not_past_the_backfill():
    assert open_rewinds({"t/0": 5, "t/1": 3}, {"t/0": 5, "t/1": 9, "x/0": 0}) == {}
    assert drain({"t/0": 5}, {"t/0": 5}, {"t/0": 5}, limit=10) == []


def test_a_partition_new_to_the_document_waits_when_the_limit_leaves_no_room():
    """A topic found by pattern while the batch is full: not in this end document, read later (as before
    rewinds existed: Spark's start of the next batch is this end)."""
    latest = {"a/0": 100, **{f"{t}/0": 50 for t in "bcde"}}
    for catch_up in ("turns", "even"):
        end, _ = next_end({"a/0": 0}, latest, 2, catch_up, None)
        assert sum(end.values()) == 2 and "a/0" in end  # no KeyError, and no new key without records
        assert all(v > 0 for k, v in end.items() if k != "a/0")
    end, _ = next_end({"a/0": 0, "#rewind:a/0": 0}, {"a/0": 0, "b/0": 50}, 10, "even", None)
    assert end == {"a/0": 0, "b/0": 10}  # an empty cursor closes; the new partition is read from 0


@pytest.mark.parametrize("limit", [400, 100, None], ids=["backlog-under-limit", "backlog-equal-limit", "no-limit"])
def test_a_backlog_that_fits_in_one_batch_runs_with_no_new_data(limit):
    """The cursor reaches its position in its first batch: the end document must still differ from
    the start (Spark runs no batch otherwise), and the cursor closes in the batch after."""
    start, latest, opened = {"t/0": 100, "u/0": 7}, {"t/0": 100, "u/0": 7}, {"t/0": 0}
    end, _ = next_end(start, latest, limit, "turns", None, opened)
    assert end != start and end == {f"{REWIND_PREFIX}t/0": 100, "t/0": 100, "u/0": 7}
    assert drain(start, latest, {"t/0": 0}, limit) == [[("t", 0, 0, 100)], []]
    closed, _ = next_end(end, latest, limit, "turns", None)
    assert closed == start  # back to the plain document: an idle source plans nothing more
    assert next_end(closed, latest, limit, "turns", None)[0] == closed


def test_new_data_beside_a_backlog_that_fits_moves_the_position_and_no_cursor_stays():
    end, _ = next_end({"t/0": 100}, {"t/0": 120}, None, "turns", None, {"t/0": 40})
    assert end == {"t/0": 120}
    assert [r.as_tuple() for r in rewind_ranges({"t/0": 100}, end, {"t/0": 40})] == [("t", 0, 40, 120)]


def test_a_cursor_left_at_its_position_is_reopened_when_the_tables_need_more():
    """A restart between the backfill's batch and the batch that closes its cursor, with the table
    rolled back again meanwhile: the new backfill is read, not hidden by the old cursor."""
    start = {f"{REWIND_PREFIX}t/0": 100, "t/0": 100}
    end, _ = next_end(start, {"t/0": 100}, 30, "even", None, {"t/0": 60})
    assert [r.as_tuple() for r in rewind_ranges(start, end, {"t/0": 60})] == [("t", 0, 60, 90)]
    assert drain(start, {"t/0": 100}, {"t/0": 60}, 30)[:2] == [[("t", 0, 60, 90)], [("t", 0, 90, 100)]]


def test_cursor_keys_cannot_be_topics():
    end, _ = next_end({"t/0": 100}, {"t/0": 100}, 10, "even", None, {"t/0": 0})
    assert end == {f"{REWIND_PREFIX}t/0": 10, "t/0": 100}
    assert split_rewinds(end) == ({"t/0": 100}, {"t/0": 10})


@pytest.mark.slow
@pytest.mark.parametrize("limit", [30, 80, 200, None],
                         ids=["backlog-over-limit", "backlog-equal-limit", "backlog-under-limit", "default-limit"])
def test_a_backfill_runs_on_a_quiet_topic_in_batches_of_the_limit(spark, kafka_bootstrap, kafka_client_config, uid,
                                                                   tmp_path, limit):
    """The checkpoint stands at the end of a topic that receives nothing more; a new table needs it
    from offset 0: the query runs anyway, in batches of at most the limit, whether the backlog (80
    records) is larger than the limit, equal to it, smaller, or read under no limit at all; a restart
    in the middle goes on where the rewind was."""
    topic = f"quiet-{uid}"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 2)
    produce(kafka_bootstrap, kafka_client_config, [topic], 2, 40)
    options = KafkaSourceOptions(kafka_bootstrap, topics=(topic,), client_config=kafka_client_config,
                                 max_records_per_trigger=limit)
    checkpoint = tmp_path / "ck"
    first = BatchLog()
    run_available_now(kafka_stream(spark, options, force_python=True), checkpoint, first)
    assert sum(t.num_rows for t in first.tables.values()) == 80

    backfill = ResumePlan(resume={}, backfill={f"{topic}/0": 0, f"{topic}/1": 0}).to_json()
    again = BatchLog()
    run_available_now(kafka_stream(spark, options, force_python=True, resume_json=backfill), checkpoint, again)
    sizes = [t.num_rows for t in again.tables.values() if t.num_rows]
    assert all(0 < n <= (limit or 80) for n in sizes) and len(sizes) == -(-80 // (limit or 80)), sizes
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in again.rows())
    assert got == expected_offsets([topic], 2, 0, 40)
    last = json.loads(checkpoint_offsets(checkpoint)[max(checkpoint_offsets(checkpoint))])
    assert last == {f"{topic}/0": 40, f"{topic}/1": 40}  # every cursor closed

    idle = BatchLog()  # no backfill asked, nothing new: no batch
    run_available_now(kafka_stream(spark, options, force_python=True), checkpoint, idle)
    assert sum(t.num_rows for t in idle.tables.values()) == 0


@pytest.mark.slow
def test_a_backfill_within_one_batch_runs_in_continuous_mode(spark, kafka_bootstrap, kafka_client_config, uid,
                                                            tmp_path):
    """The same under a processing-time trigger with no new records: the backlog is read within a
    few triggers, once, and the query then stays idle (no batch re-reads it)."""
    import time

    topic = f"quiet-cont-{uid}"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 2)
    produce(kafka_bootstrap, kafka_client_config, [topic], 2, 40)
    options = KafkaSourceOptions(kafka_bootstrap, topics=(topic,), client_config=kafka_client_config)
    checkpoint = tmp_path / "ck"
    run_available_now(kafka_stream(spark, options, force_python=True), checkpoint, BatchLog())

    backfill = ResumePlan(resume={}, backfill={f"{topic}/0": 10, f"{topic}/1": 0}).to_json()
    seen = BatchLog()
    query = (kafka_stream(spark, options, force_python=True, resume_json=backfill).writeStream
             .foreachBatch(seen).trigger(processingTime="500 milliseconds")
             .option("checkpointLocation", str(checkpoint)).start())
    try:
        deadline = time.monotonic() + 90
        while len(seen.rows()) < 70 and time.monotonic() < deadline and query.exception() is None:
            time.sleep(0.2)
        time.sleep(2)  # a few idle triggers more
    finally:
        query.stop()
    assert query.exception() is None
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in seen.rows())
    assert got == sorted([(topic, 0, o) for o in range(10, 40)] + [(topic, 1, o) for o in range(40)])
