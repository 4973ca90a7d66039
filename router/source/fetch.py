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

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from router.source.exceptions import BrokerError, ReadStalledError
from router.source.offsets import Range
from router.source.options import KafkaSourceOptions
from router.source.schema import kafka_arrow_schema

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
#: Accepted messages a task holds as Python objects before every partition's are turned into batches.
HELD_ROWS = 4 * BATCH_ROWS
#: Messages asked for per consume() call: no more than the ranges still need per unfinished partition
#: on average, within [MIN_CONSUME_CHUNK, CONSUME_CHUNK]. A fetch brings a partition's records past
#: `until` too (up to max.partition.fetch.bytes; the local broker sends the whole tail), and they become
#: Python objects only when one call reaches past the end: pausing the partition drops the rest
#: inside librdkafka. Reading the first quarter of a backlog took 4x the Message objects with a
#: fixed 10,000 (scripts/bench_source.py --tail).
CONSUME_CHUNK = 10000
MIN_CONSUME_CHUNK = 100

_CONSUMERS: dict[str, Consumer] = {}
_KNOWN_TOPICS: dict[str, set[str]] = {}  # per cached consumer: topics it has metadata for
_LOCK = threading.Lock()


def consumer_config(options: KafkaSourceOptions) -> dict[str, str]:
    options = options.resolved()
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


def close_consumers() -> None:
    """Close every consumer this process keeps: one left open retries its broker for as long as the
    process lives, logging each refused connection once the broker is gone."""
    with _LOCK:
        keys = list(_CONSUMERS)
    for key in keys:
        drop_consumer(key)


def drop_consumer(options_json: str) -> None:
    with _LOCK:
        consumer = _CONSUMERS.pop(options_json, None)
        _KNOWN_TOPICS.pop(options_json, None)
    if consumer is not None:
        try:
            consumer.close()
        except (KafkaException, RuntimeError):
            pass


@dataclass
class _Cursor:
    """Progress of one range inside a task, and the messages accepted but not yet turned into a batch."""

    range: Range
    seen_first: bool = False
    done: bool = False
    accepted: int = 0

    def __post_init__(self) -> None:
        self.from_offset = self.range.from_offset
        self.until = self.range.until
        self.last = self.range.until - 1
        self.messages: list = []
        self.offsets: list[np.ndarray] = []


def _check_start(r: Range, offset: int) -> None:
    if offset > r.from_offset:
        log.warning(
            "%s/%s: offsets [%d, %d) are no longer available (retention or compaction); reading from %d",
            r.topic, r.partition, r.from_offset, offset, offset,
        )


class _BatchBuilder:
    """Turns one partition's accepted messages into an Arrow batch.

    A batch never mixes partitions: topic and partition are constants, the
    offsets were read once when the messages were accepted, and the rows come
    out in the runs the executor groups by (router/executor/partition.py).
    """

    def __init__(self, include_headers: bool = True, null_empty_headers: bool = True) -> None:
        self.schema = kafka_arrow_schema(include_headers)
        self.include_headers = include_headers
        self.no_headers = None if null_empty_headers else []

    def flush(self, cur: _Cursor) -> pa.RecordBatch:
        msgs, offsets = cur.messages, cur.offsets
        cur.messages, cur.offsets = [], []
        n, s = len(msgs), self.schema
        stamps = list(map(Message.timestamp, msgs))
        ts_type = pa.array([t for t, _ in stamps], pa.int32())
        millis = pa.array([ms for _, ms in stamps], pa.int64())
        available = pc.not_equal(ts_type, 0)
        micros = pc.if_else(available, pc.multiply(millis, 1000), None).cast(s.field("timestamp").type)
        columns = [
            pa.array(list(map(Message.key, msgs)), s.field("key").type),
            pa.array(list(map(Message.value, msgs)), s.field("value").type),
            pa.array([cur.range.topic] * n, s.field("topic").type),
            pa.array(np.full(n, cur.range.partition, dtype=np.int32), s.field("partition").type),
            pa.array(np.concatenate(offsets) if len(offsets) > 1 else offsets[0], s.field("offset").type),
            micros,
            # confluent-kafka's (0 n/a, 1 create, 2 append) -> Kafka's (-1, 0, 1)
            pc.subtract(ts_type, 1),
        ]
        if self.include_headers:
            no_headers = self.no_headers
            columns.append(pa.array([h or no_headers for h in map(Message.headers, msgs)], s.field("headers").type))
        return pa.RecordBatch.from_arrays(columns, schema=s)


def coalesce(batches: Iterable[pa.RecordBatch], rows: int = BATCH_ROWS) -> Iterator[pa.RecordBatch]:
    """Join consecutive small batches into batches of about ``rows`` (for consumers that pay per batch)."""
    held: list[pa.RecordBatch] = []
    count = 0
    for batch in batches:
        held.append(batch)
        count += batch.num_rows
        if count >= rows:
            yield held[0] if len(held) == 1 else pa.concat_batches(held)
            held, count = [], 0
    if held:
        yield held[0] if len(held) == 1 else pa.concat_batches(held)


def read_ranges(options_json: str, ranges: Iterable[Range]) -> Iterator[pa.RecordBatch]:
    """Yield every record of ``ranges`` as Arrow batches with the Kafka source schema."""
    options = KafkaSourceOptions.from_json(options_json)
    cursors = {(r.topic, r.partition): _Cursor(r) for r in ranges if r.count > 0}
    if not cursors:
        return
    consumer = cached_consumer(options_json, options)
    try:
        _learn_topics(consumer, options_json, options, {t for t, _ in cursors})
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


def _learn_topics(consumer: Consumer, options_json: str, options: KafkaSourceOptions, topics: set[str]) -> None:
    """Ask for the cluster's metadata before assigning partitions of topics this consumer has not seen.

    A reused consumer assigned partitions of a topic it has no metadata for
    fetched nothing for ~0.7 s (measured on 78 partitions of 26 new topics:
    0.86-1.03 s against 0.31 s for a fresh consumer or one that asked first; the
    request took 1-2 ms). Catching up in turns gives each batch new topics. A
    failed request is only a missed shortcut: the read goes on and reports the
    broker itself if it stays unreachable.
    """
    with _LOCK:
        known = _KNOWN_TOPICS.setdefault(options_json, set())
        if topics <= known:
            return
    try:
        metadata = consumer.list_topics(timeout=options.poll_timeout)
    except KafkaException:
        return
    with _LOCK:
        known.update(t for t, meta in metadata.topics.items() if meta.error is None)


def _next_messages(consumer: Consumer, timeout: float, chunk: int = CONSUME_CHUNK) -> list:
    """What is already fetched (up to ``chunk``), else wait for the first message only.

    ``consume(n, timeout)`` blocks until ``n`` messages or the timeout, which
    would cost a full timeout at the tail of every task.
    """
    messages = consumer.consume(chunk, 0)
    if messages:
        return messages
    msg = consumer.poll(timeout)
    return [msg] if msg is not None else []


def _runs(messages: list) -> Iterator[tuple[str, int, int, int]]:
    """(topic, partition, start, stop) of each stretch of consecutive messages from one partition."""
    topics = np.array(list(map(Message.topic, messages)), dtype=object)
    partitions = np.fromiter(map(Message.partition, messages), dtype=np.int64, count=len(messages))
    cuts = np.flatnonzero((topics[1:] != topics[:-1]) | (partitions[1:] != partitions[:-1])) + 1
    bounds = [0, *cuts.tolist(), len(messages)]
    for a, b in zip(bounds, bounds[1:]):
        yield topics[a], int(partitions[a]), a, b


def _consume(
    consumer: Consumer, options: KafkaSourceOptions, cursors: dict[tuple[str, int], _Cursor], paused: list
) -> Iterator[pa.RecordBatch]:
    """Read until every cursor is done; yields one partition's records per batch.

    Messages are handled in stretches of one partition (a fetch answers per
    partition, so a consume() call returns few of them): the offsets of a
    stretch are read at once and compared with the range as an array, and no
    Python code runs per message except the column builders at flush.
    """
    builder = _BatchBuilder(options.include_headers, options.null_empty_headers)
    pending = len(cursors)
    remaining = sum(c.range.count for c in cursors.values())  # records the unfinished ranges may still hold
    held = 0  # accepted messages not yet in a batch
    idle = 0
    while pending:
        chunk = max(MIN_CONSUME_CHUNK, min(CONSUME_CHUNK, remaining // pending))
        messages = _next_messages(consumer, options.poll_timeout, chunk)
        errors = list(map(Message.error, messages))
        if not any(errors):  # KafkaError is always true; its == does not take None
            pieces: list = [(0, len(messages))]
        else:  # end-of-partition events and broker errors are handled one by one, in order
            pieces, at = [], 0
            for i, err in enumerate(errors):
                if err is not None:
                    pieces += [(at, i), i]
                    at = i + 1
            pieces.append((at, len(messages)))
        progressed = False
        finished: list[_Cursor] = []
        for piece in pieces:
            if isinstance(piece, int):  # an event or an error
                msg = messages[piece]
                cur = cursors.get((msg.topic(), msg.partition()))
                if cur is None or cur.done:
                    continue
                err = msg.error()
                if err.code() == KafkaError._PARTITION_EOF:
                    # end of partition before `until`: the rest were markers or compacted
                    progressed = cur.done = True
                    finished.append(cur)
                elif err.fatal() or not err.retriable():
                    raise BrokerError(f"broker error: {err.str()}", topic=msg.topic(), partition=msg.partition())
                else:
                    log.warning("retriable Kafka error on %s/%s: %s", msg.topic(), msg.partition(), err.str())
                continue
            a, b = piece
            if a == b:
                continue
            stretch = messages[a:b]
            offsets = np.fromiter(map(Message.offset, stretch), dtype=np.int64, count=b - a)
            for topic, partition, lo, hi in _runs(stretch):
                cur = cursors.get((topic, partition))
                if cur is None or cur.done:
                    continue
                progressed = True
                offs = offsets[lo:hi]
                if not cur.seen_first:
                    cur.seen_first = True
                    _check_start(cur.range, int(offs[0]))
                keep = (offs >= cur.from_offset) & (offs < cur.until)
                kept = int(np.count_nonzero(keep))
                if kept == hi - lo:
                    cur.messages.extend(stretch[lo:hi])
                    cur.offsets.append(offs)
                elif kept:
                    picked = np.flatnonzero(keep)
                    cur.messages.extend(stretch[lo + i] for i in picked.tolist())
                    cur.offsets.append(offs[picked])
                cur.accepted += kept
                remaining -= kept
                held += kept
                if int(offs.max()) >= cur.last:
                    cur.done = True
                    finished.append(cur)
        for cur in finished:
            pending -= 1
            remaining -= cur.range.count - cur.accepted
        if held >= HELD_ROWS or finished:
            # finished partitions go out at once; the others when the task holds too many messages
            for cur in (cursors.values() if held >= HELD_ROWS else finished):
                if cur.messages:
                    held -= len(cur.messages)
                    yield builder.flush(cur)
        if not progressed:
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
        # stop fetching partitions that are finished (and drop what librdkafka holds of them)
        if finished and pending:
            tps = [TopicPartition(c.range.topic, c.range.partition) for c in finished]
            consumer.pause(tps)
            paused.extend(tps)
