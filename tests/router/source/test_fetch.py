"""Reading offset ranges from a real broker, without Spark."""

from __future__ import annotations

import logging
import time

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from router.source.exceptions import ReadStalledError
from router.source.fetch import coalesce, read_ranges
from router.source.metadata import BrokerMetadata
from router.source.offsets import Range
from router.source.options import KafkaSourceOptions
from router.source.schema import kafka_arrow_schema

from .kafka_helpers import create_topics, expected_record, produce

pytestmark = pytest.mark.slow


def _opts(bootstrap, config, topics, **kw):
    return KafkaSourceOptions(bootstrap, topics=tuple(topics), client_config=config, **kw)


def _rows(options, ranges):
    batches = list(read_ranges(options.to_json(), ranges))
    for b in batches:
        assert b.schema.equals(kafka_arrow_schema(options.include_headers))
        # one partition per batch, in offset order: the executor groups records by these runs
        assert len(set(zip(b.column("topic").to_pylist(), b.column("partition").to_pylist()))) == 1
        offsets = b.column("offset").to_pylist()
        assert offsets == sorted(set(offsets))
    return [row for b in batches for row in b.to_pylist()]


def test_reads_exact_ranges_with_every_field(kafka_bootstrap, kafka_client_config, uid):
    topics = [f"fetch-{uid}-a", f"fetch-{uid}-b"]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    produce(kafka_bootstrap, kafka_client_config, topics, 2, 40)
    opts = _opts(kafka_bootstrap, kafka_client_config, topics)
    meta = BrokerMetadata(opts)
    assert meta.partitions() == [(t, p) for t in topics for p in range(2)]
    assert set(meta.latest().values()) == {40}

    ranges = [Range(topics[0], 0, 5, 17), Range(topics[0], 1, 0, 40), Range(topics[1], 1, 39, 40)]
    rows = _rows(opts, ranges)
    got = sorted((r["topic"], r["partition"], r["offset"]) for r in rows)
    want = sorted((r.topic, r.partition, o) for r in ranges for o in range(r.from_offset, r.until))
    assert got == want
    for row in rows:
        seq = int(row["key"].decode().rsplit(":", 1)[1])
        rec = expected_record(row["topic"], row["partition"], seq)
        assert row["value"] == rec["value"]
        assert int(row["timestamp"].timestamp() * 1000) == rec["timestamp_ms"]
        assert row["timestampType"] == 0  # CreateTime, as Spark reports it
        assert row["headers"] == ([{"key": k, "value": v} for k, v in rec["headers"]] if rec["headers"] else None)

    # the cached consumer is reused for the next task of the same worker
    again = _rows(opts, [Range(topics[1], 0, 0, 3)])
    assert [r["offset"] for r in again] == [0, 1, 2]


def test_without_headers_the_batches_have_seven_columns(kafka_bootstrap, kafka_client_config, uid):
    topic = f"fetch-{uid}-nohdr"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    produce(kafka_bootstrap, kafka_client_config, [topic], 1, 4)
    opts = _opts(kafka_bootstrap, kafka_client_config, [topic], include_headers=False)
    batches = list(read_ranges(opts.to_json(), [Range(topic, 0, 0, 4)]))
    assert [b.schema for b in batches] == [kafka_arrow_schema(False)]
    assert "headers" not in kafka_arrow_schema(False).names
    assert batches[0].column("offset").to_pylist() == [0, 1, 2, 3]

    opts = _opts(kafka_bootstrap, kafka_client_config, [topic], null_empty_headers=False)
    rows = _rows(opts, [Range(topic, 0, 0, 4)])
    # even sequence numbers carry headers, odd ones none: [] instead of Spark's null
    assert [len(r["headers"]) for r in rows] == [2, 0, 2, 0]


def test_transaction_markers_and_aborted_records_end_the_range(kafka_bootstrap, kafka_client_config, uid):
    topic = f"fetch-{uid}-tx"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": f"tx-{uid}", **kafka_client_config})
    producer.init_transactions(30)
    for value, commit in ((b"c1", True), (b"a1", False), (b"c2", True)):
        producer.begin_transaction()
        producer.produce(topic, value=value, partition=0)
        producer.flush(30)
        producer.commit_transaction(30) if commit else producer.abort_transaction(30)
    opts = _opts(kafka_bootstrap, kafka_client_config, [topic], poll_timeout=0.5, max_idle_polls=4)
    end = BrokerMetadata(opts).latest()[f"{topic}/0"]
    assert end == 6  # 3 records + 3 control markers
    started = time.monotonic()
    rows = _rows(opts, [Range(topic, 0, 0, end)])
    assert [r["value"] for r in rows] == [b"c1", b"c2"]
    assert time.monotonic() - started < 2.0  # ended by end-of-partition, not by idle polls


def test_deleted_offsets_start_from_earliest_and_are_logged(kafka_bootstrap, kafka_client_config, uid, caplog):
    topic = f"fetch-{uid}-retention"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    produce(kafka_bootstrap, kafka_client_config, [topic], 1, 20)
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap, **kafka_client_config})
    for fut in admin.delete_records([TopicPartition(topic, 0, 12)]).values():
        fut.result(timeout=30)
    opts = _opts(kafka_bootstrap, kafka_client_config, [topic])
    with caplog.at_level(logging.WARNING, logger="router.source.fetch"):
        rows = _rows(opts, [Range(topic, 0, 3, 20)])
    assert [r["offset"] for r in rows] == list(range(12, 20))
    assert any("no longer available" in m and "[3, 12)" in m for m in caplog.messages)


def test_range_past_the_end_stops_at_end_of_partition(kafka_bootstrap, kafka_client_config, uid):
    topic = f"fetch-{uid}-short"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    produce(kafka_bootstrap, kafka_client_config, [topic], 1, 5)
    rows = _rows(_opts(kafka_bootstrap, kafka_client_config, [topic]), [Range(topic, 0, 0, 500)])
    assert [r["offset"] for r in rows] == [0, 1, 2, 3, 4]


def test_unreachable_broker_fails_with_a_bounded_clear_error():
    with socket_closed_port() as port:
        opts = KafkaSourceOptions(f"127.0.0.1:{port}", topics=("x",), poll_timeout=0.2, max_idle_polls=3)
        started = time.monotonic()
        with pytest.raises(ReadStalledError) as info:
            list(read_ranges(opts.to_json(), [Range("x", 0, 0, 10)]))
    assert info.value.topic == "x" and info.value.partition == 0 and info.value.transient
    assert time.monotonic() - started < 10


class socket_closed_port:
    """A port nothing listens on."""

    def __enter__(self) -> int:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]

    def __exit__(self, *exc) -> None:
        return None


def test_reading_the_head_of_a_backlog_leaves_the_tail_inside_librdkafka(kafka_bootstrap, kafka_client_config, uid,
                                                                        monkeypatch):
    """A fetch brings each partition's records past the range along; only what the ranges need may
    become Python messages (a fixed 10,000 per consume() call turned the whole tail into objects)."""
    import router.source.fetch as fetch

    topics = [f"tail-{uid}-{i}" for i in range(4)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 3)
    produce(kafka_bootstrap, kafka_client_config, topics, 3, 400)
    returned = []
    plain = fetch._next_messages

    def counting(*args):
        messages = plain(*args)
        returned.append(len(messages))
        return messages

    monkeypatch.setattr(fetch, "_next_messages", counting)
    opts = _opts(kafka_bootstrap, kafka_client_config, topics)
    ranges = [Range(t, p, 0, 100) for t in topics for p in range(3)]
    rows = _rows(opts, ranges)
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == \
        sorted((r.topic, r.partition, o) for r in ranges for o in range(100))
    assert sum(returned) < 2 * len(rows), returned  # the 300-record tails stayed in librdkafka

    returned.clear()  # and the next range of the same partitions starts where the last stopped
    rows = _rows(opts, [Range(t, p, 100, 400) for t in topics for p in range(3)])
    assert len(rows) == 12 * 300 and {r["offset"] for r in rows} == set(range(100, 400))


def test_a_task_holding_too_many_messages_turns_every_partition_into_batches(kafka_bootstrap, kafka_client_config, uid,
                                                                         monkeypatch):
    import router.source.fetch as fetch

    topics = [f"held-{uid}-{i}" for i in range(3)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    produce(kafka_bootstrap, kafka_client_config, topics, 2, 30)
    held = []
    flush = fetch._BatchBuilder.flush

    def counting(self, cur):
        held.append(len(cur.messages))
        return flush(self, cur)

    monkeypatch.setattr(fetch, "HELD_ROWS", 8)
    monkeypatch.setattr(fetch, "CONSUME_CHUNK", 5)  # a partition's range arrives over several calls
    monkeypatch.setattr(fetch, "MIN_CONSUME_CHUNK", 1)
    monkeypatch.setattr(fetch._BatchBuilder, "flush", counting)
    ranges = [Range(t, p, 2, 29) for t in topics for p in range(2)]
    rows = _rows(_opts(kafka_bootstrap, kafka_client_config, topics), ranges)
    assert sorted((r["topic"], r["partition"], r["offset"]) for r in rows) == \
        sorted((r.topic, r.partition, o) for r in ranges for o in range(2, 29))
    assert sum(held) == len(rows) == 6 * 27
    assert len(held) > len(ranges)  # partitions were cut before their end, each part a batch of its own


def test_coalesce_joins_small_batches_in_order():
    small = [pa.RecordBatch.from_pydict({"offset": list(range(i * 3, i * 3 + 3))}) for i in range(7)]
    joined = list(coalesce(iter(small), rows=8))
    assert [b.num_rows for b in joined] == [9, 9, 3]
    assert [o for b in joined for o in b.column("offset").to_pylist()] == list(range(21))
    assert list(coalesce(iter([]))) == []


def test_a_reused_consumer_learns_each_topic_once(kafka_bootstrap, kafka_client_config, uid):
    """Metadata is asked for before partitions of topics the consumer has not seen are assigned
    (without it a reused consumer's first fetch of a new topic stalled ~0.7 s)."""
    import router.source.fetch as fetch

    topics = [f"learn-{uid}-{i}" for i in range(3)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 1)
    produce(kafka_bootstrap, kafka_client_config, topics, 1, 5)
    opts = _opts(kafka_bootstrap, kafka_client_config, topics)
    fetch.drop_consumer(opts.to_json())
    for i, topic in enumerate(topics):
        assert [r["offset"] for r in _rows(opts, [Range(topic, 0, 0, 5)])] == list(range(5))
        assert set(topics[: i + 1]) <= fetch._KNOWN_TOPICS[opts.to_json()]
    fetch.drop_consumer(opts.to_json())
    assert opts.to_json() not in fetch._KNOWN_TOPICS
