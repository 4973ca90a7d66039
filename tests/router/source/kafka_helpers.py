"""Producing known records and creating topics for the source tests."""

from __future__ import annotations

import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

#: Recent timestamps: records older than the topic retention (7 days) are deleted by the broker.
BASE_TS_MS = (int(time.time()) - 3600) * 1000


def create_topics(bootstrap: str, config: dict, names: list[str], partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **config})
    futures = admin.create_topics([NewTopic(n, partitions, 1) for n in names], operation_timeout=30)
    for fut in futures.values():
        fut.result(timeout=30)


def expected_record(topic: str, partition: int, seq: int) -> dict:
    """The record number ``seq`` of a partition: derived, so tests can check every field."""
    return {
        "key": f"{topic}:{partition}:{seq}".encode(),
        "value": f"value-{topic}-{partition}-{seq}".encode() * 3,
        "timestamp_ms": BASE_TS_MS + seq * 1000 + partition,
        "headers": [("seq", str(seq).encode()), ("src", topic.encode())] if seq % 2 == 0 else None,
    }


def produce(bootstrap: str, config: dict, topics: list[str], partitions: int, per_partition: int, first_seq: int = 0) -> int:
    """Produce ``per_partition`` records with sequence numbers from ``first_seq`` into each partition."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": "5", "acks": "all", "enable.idempotence": "true", **config})
    n = 0
    for topic in topics:
        for partition in range(partitions):
            for seq in range(first_seq, first_seq + per_partition):
                rec = expected_record(topic, partition, seq)
                producer.produce(
                    topic, value=rec["value"], key=rec["key"], partition=partition,
                    timestamp=rec["timestamp_ms"], headers=rec["headers"],
                )
                n += 1
                if n % 10000 == 0:
                    producer.poll(0)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} records not delivered"
    return n
