"""Driver side: which topic-partitions match the subscription and where their offsets are.

Uses one AdminClient per stream reader and the bulk ListOffsets API, so a
trigger over hundreds of partitions costs a few round trips, not one per
partition.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Callable

from confluent_kafka import IsolationLevel, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from evolution.backoff import backoff_delay
from router.source.exceptions import BrokerError
from router.source.offsets import Offsets, normalize, tp_key
from router.source.options import KafkaSourceOptions

log = logging.getLogger(__name__)

#: Consumer-only librdkafka settings that an AdminClient would warn about.
CONSUMER_ONLY_PREFIXES = (
    "group.", "enable.auto", "enable.partition.eof", "auto.", "fetch.", "isolation.level",
    "max.partition.fetch.bytes", "queued.", "session.timeout", "heartbeat.", "max.poll",
    "partition.assignment", "check.crcs", "consume.", "coordinator.",
)

ISOLATION = {"read_committed": IsolationLevel.READ_COMMITTED, "read_uncommitted": IsolationLevel.READ_UNCOMMITTED}

RETRIES = 3
REQUEST_TIMEOUT = 30.0


#: librdkafka's syslog level for the metadata client unless `client_config` sets one: warnings
#: and errors only (at the default, closing a client logs its housekeeping at info level).
ADMIN_LOG_LEVEL = "4"


def admin_config(options: KafkaSourceOptions) -> dict[str, str]:
    conf = {"log_level": ADMIN_LOG_LEVEL}
    conf.update({k: v for k, v in options.client_config.items() if not k.startswith(CONSUMER_ONLY_PREFIXES)})
    conf["bootstrap.servers"] = options.bootstrap
    return conf


def _retry(what: str, call: Callable):
    for attempt in range(1, RETRIES + 1):
        try:
            return call()
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            retriable = getattr(err, "retriable", lambda: True)()
            if attempt == RETRIES or not retriable:
                raise BrokerError(f"{what} failed after {attempt} attempt(s): {exc}") from None
            log.warning("%s failed (attempt %d): %s; retrying", what, attempt, exc)
            time.sleep(backoff_delay(attempt - 1, 0.2, math.inf, jitter=False))


class BrokerMetadata:
    """Lazily connected metadata client; never pickled (created on first use)."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options = options.resolved()
        self._admin: AdminClient | None = None
        level = options.client_config.get("isolation.level", "read_committed")
        self.isolation = ISOLATION.get(level, IsolationLevel.READ_COMMITTED)

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(admin_config(self.options))
        return self._admin

    def __getstate__(self):
        return {"options": self.options, "_admin": None, "isolation": self.isolation}

    def partitions(self) -> list[tuple[str, int]]:
        """Healthy (topic, partition) pairs of every topic matching the subscription."""
        md = _retry("list topics", lambda: self.admin.list_topics(timeout=REQUEST_TIMEOUT))
        out = []
        for name, topic in md.topics.items():
            if not self.options.matches(name):
                continue
            if topic.error is not None:
                log.info("topic %s not ready yet: %s", name, topic.error)
                continue
            out.extend((name, p) for p in topic.partitions)
        return sorted(out)

    def offsets(self, tps: list[tuple[str, int]], spec: str) -> Offsets:
        """``spec`` is "earliest" or "latest"; partitions that fail to answer are left out."""
        if not tps:
            return {}
        make = OffsetSpec.earliest if spec == "earliest" else OffsetSpec.latest
        request = {TopicPartition(t, p): make() for t, p in tps}

        def call():
            futures = self.admin.list_offsets(
                request, isolation_level=self.isolation, request_timeout=REQUEST_TIMEOUT
            )
            result = {}
            for tp, fut in futures.items():
                result[tp_key(tp.topic, tp.partition)] = fut.result().offset
            return result

        return normalize(_retry(f"list {spec} offsets", call))

    def latest(self) -> Offsets:
        return self.offsets(self.partitions(), "latest")

    def close(self) -> None:
        self._admin = None
