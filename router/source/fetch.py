"""Worker side: read packed offset ranges with confluent-kafka into Arrow record batches.

One consumer per options per Python worker process is cached at module level
(workers are reused across tasks); ranges are read with assign + seek and
stop at ``until``, at the end of the partition, or after a bounded number of
idle polls, so transaction markers and compaction gaps can never hang a task.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from dataclasses import dataclass
from typing import Iterable, Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from router.source.exceptions import BrokerError, ReadStalledError
from router.source.offsets import Range
from router.source.options import KafkaSourceOptions
from router.source.schema import SPARK_TIMESTAMP_TYPE, kafka_arrow_schema

log = logging.getLogger(__name__)

#: Settings the reader relies on; user settings override the rest of CONSUMER_DEFAULTS.
CONSUMER_FORCED = {
    "enable.auto.commit": "false",
    "enable.auto.offset.store": "false",
    "enable.partition.eof": "true",
    "auto.offset.reset": "earliest",
}
CONSUMER_DEFAULTS = {
    "fetch.wait.max.ms": "100",
    "queued.max.messages.kbytes": "262144",
    "fetch.max.bytes": "52428800",
    "receive.message.max.bytes": "100000000",
    "max.partition.fetch.bytes": "8388608",
}

BATCH_ROWS = 16384
CONSUME_CHUNK = 10000

_CONSUMERS: dict[str, Consumer] = {}
_LOCK = threading.Lock()


def consumer_config(options: KafkaSourceOptions) -> dict[str, str]:
    digest = hashlib.sha1(options.bootstrap.encode()).hexdigest()[:12]
    return {
        **CONSUMER_DEFAULTS,
        "group.id": f"icerouter-source-{digest}",
        **options.client_config,
        "bootstrap.servers": options.bootstrap,
        **CONSUMER_FORCED,
    }


def cached_consumer(options_json: str, options: KafkaSourceOptions) -> Consumer:
    with _LOCK:
        consumer = _CONSUMERS.get(options_json)
        if consumer is None:
            consumer = Consumer(consumer_config(options))
            _CONSUMERS[options_json] = consumer
        return consumer


def drop_consumer(options_json: str) -> None:
    with _LOCK:
        consumer = _CONSUMERS.pop(options_json, None)
    if consumer is not None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass


@dataclass
class _Cursor:
    """Progress of one range inside a task."""

    range: Range
    seen_first: bool = False
    done: bool = False
    paused: bool = False


class _BatchBuilder:
    """Column lists for one Arrow batch; flushed every BATCH_ROWS rows."""

    def __init__(self) -> None:
        self.schema = kafka_arrow_schema()
        self.reset()

    def reset(self) -> None:
        self.keys: list = []
        self.values: list = []
        self.topics: list = []
        self.partitions: list = []
        self.offsets: list = []
        self.ts: list = []
        self.ts_types: list = []
        self.headers: list = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, msg) -> None:
        ts_type, ts = msg.timestamp()
        self.keys.append(msg.key())
        self.values.append(msg.value())
        self.topics.append(msg.topic())
        self.partitions.append(msg.partition())
        self.offsets.append(msg.offset())
        self.ts.append(ts * 1000 if ts_type else None)
        self.ts_types.append(SPARK_TIMESTAMP_TYPE[ts_type])
        self.headers.append(msg.headers() or None)

    def flush(self) -> pa.RecordBatch:
        s = self.schema
        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self.keys, s.field("key").type),
                pa.array(self.values, s.field("value").type),
                pa.array(self.topics, s.field("topic").type),
                pa.array(self.partitions, s.field("partition").type),
                pa.array(self.offsets, s.field("offset").type),
                pa.array(self.ts, s.field("timestamp").type),
                pa.array(self.ts_types, s.field("timestampType").type),
                pa.array(self.headers, s.field("headers").type),
            ],
            schema=s,
        )
        self.reset()
        return batch


def read_ranges(options_json: str, ranges: Iterable[Range]) -> Iterator[pa.RecordBatch]:
    """Yield every record of ``ranges`` as Arrow batches with the Kafka source schema."""
    options = KafkaSourceOptions.from_json(options_json)
    cursors = {(r.topic, r.partition): _Cursor(r) for r in ranges if r.count > 0}
    if not cursors:
        return
    consumer = cached_consumer(options_json, options)
    try:
        consumer.assign([TopicPartition(t, p, c.range.from_offset) for (t, p), c in cursors.items()])
        paused: list[TopicPartition] = []
        yield from _consume(consumer, options, cursors, paused)
        if paused:
            consumer.resume(paused)
    except KafkaException as exc:
        drop_consumer(options_json)
        raise BrokerError(f"Kafka consumer failed: {exc}") from None
    except BaseException:
        drop_consumer(options_json)
        raise
    else:
        consumer.unassign()


def _consume(
    consumer: Consumer, options: KafkaSourceOptions, cursors: dict[tuple[str, int], _Cursor], paused: list
) -> Iterator[pa.RecordBatch]:
    builder = _BatchBuilder()
    pending = len(cursors)
    idle = 0
    while pending:
        messages = consumer.consume(CONSUME_CHUNK, options.poll_timeout)
        if not messages:
            idle += 1
            if idle >= options.max_idle_polls:
                (topic, partition), cur = next((k, c) for k, c in cursors.items() if not c.done)
                raise ReadStalledError(
                    f"no progress after {idle} polls of {options.poll_timeout}s "
                    f"reading up to offset {cur.range.until}",
                    topic=topic,
                    partition=partition,
                )
            continue
        idle = 0
        for msg in messages:
            cur = cursors.get((msg.topic(), msg.partition()))
            if cur is None or cur.done:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    # end of partition before `until`: the rest were markers or compacted
                    cur.done = True
                    pending -= 1
                    continue
                if err.fatal() or not err.retriable():
                    raise BrokerError(f"broker error: {err.str()}", topic=msg.topic(), partition=msg.partition())
                log.warning("retriable Kafka error on %s/%s: %s", msg.topic(), msg.partition(), err.str())
                continue
            offset = msg.offset()
            r = cur.range
            if not cur.seen_first:
                cur.seen_first = True
                if offset > r.from_offset:
                    log.warning(
                        "%s/%s: offsets [%d, %d) are no longer available (retention or compaction); "
                        "reading from %d",
                        r.topic, r.partition, r.from_offset, offset, offset,
                    )
            if offset < r.from_offset:
                continue
            if offset < r.until:
                builder.add(msg)
                if len(builder) >= BATCH_ROWS:
                    yield builder.flush()
            if offset >= r.until - 1:
                cur.done = True
                pending -= 1
        # stop fetching partitions that are finished
        finished = [TopicPartition(t, p) for (t, p), c in cursors.items() if c.done and not c.paused]
        if finished and pending:
            consumer.pause(finished)
            paused.extend(finished)
            for tp in finished:
                cursors[(tp.topic, tp.partition)].paused = True
    if len(builder):
        yield builder.flush()
