"""The kafka and console transports of the openlineage-python client, as the `lineage` section
configures them: the same events arrive on a real broker's topic and in the log."""

from __future__ import annotations

import json
import logging

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic

from router.config import parse_config
from router.lineage.emitter import JobLineage, Sender
from tests.router.lineage.schema import validate_event
from tests.router.lineage.test_events import BASE


@pytest.mark.slow
def test_the_kafka_transport_puts_the_events_on_a_topic(kafka_bootstrap, unique_name, tmp_path):
    topic = unique_name("lineage")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})  # kept: its futures need it alive
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)
    config = parse_config({**BASE, "catalog": {"name": "c", "properties": {"uri": f"sqlite:///{tmp_path}/c.db"}},
                           "lineage": {"transport": {"type": "kafka", "topic": topic, "flush": True,
                                                     "config": {"bootstrap.servers": kafka_bootstrap}}}})
    run = JobLineage(config)
    run.start()
    run.finish()
    assert run.sender.sent == 2 and run.sender.failed == 0
    consumer = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": topic, "auto.offset.reset": "earliest",
                         "receive.message.max.bytes": 1_000_000_000})
    consumer.subscribe([topic])
    events = []
    try:
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                events.append(json.loads(message.value()))
            if len(events) == 2:
                break
    finally:
        consumer.close()
    assert [e["eventType"] for e in events] == ["START", "COMPLETE"]
    for event in events:
        validate_event(event)


def test_the_console_transport_logs_the_events(caplog, tmp_path):
    config = parse_config({**BASE, "catalog": {"name": "c", "properties": {"uri": f"sqlite:///{tmp_path}/c.db"}},
                           "lineage": {"transport": {"type": "console"}}})
    with caplog.at_level(logging.INFO):
        run = JobLineage(config, Sender(config))
        run.start()
        run.finish()
    assert run.sender.sent == 2 and run.sender.failed == 0
    logged = [json.loads(r.getMessage()) for r in caplog.records if r.getMessage().startswith("{")]
    assert [e["eventType"] for e in logged] == ["START", "COMPLETE"]
