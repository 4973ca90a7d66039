"""The job's offsets in a Kafka consumer group, where Kafka's own tools look for lag.

Why: kafka-consumer-groups, Burrow, kafka-lag-exporter and Control Center read a group's
committed offsets; the job keeps its offsets in the tables (router/progress.py), which those
tools cannot see. After each batch the driver commits, per partition, the offset below which
every record the job read is in its tables or a dead letter: the dead-letter table's settled
offset (router/catalog/commit.py), the same `icerouter status` reports as the job's read position.
As a Kafka consumer commits its position, it is the next offset to fetch: the source's end offset
for the batch, past a trailing transaction marker or compacted gap (a caught-up partition shows
lag 0), not the last record + 1. With fan-out several tables read one partition; the committed
offset is the lowest any of them still needs, and a table that was routed nothing from the
partition needs nothing below what the job has settled.

For monitoring only: the job never reads the group back, so the tables stay the source of
truth. The commit runs in a background thread after the batch, and a failure (brokers down,
a group with active members of its own) is logged and counted, never fails a batch. Offsets
only move forward in a run: a backfill reading older ranges does not pull the group back (while
it runs the group shows the read position; `icerouter status` and the partition lag metric also
count what the backfill has still to read), and the first commit of a run starts from the
dead-letter table's settled offsets, read by commit order (router/catalog/progress_views.py).
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Mapping

from router.config import RouterConfig
from router.progress import next_offsets
from router.source.offsets import split_key

log = logging.getLogger("icerouter.consumer_group")

#: seconds the brokers may take to answer one commit
COMMIT_TIMEOUT = 10.0


class GroupCommitter:
    """Accumulates the job's settled offsets and commits them to `job.group_id` (one commit in flight)."""

    def __init__(self, config: RouterConfig, on_outcome: Callable[[bool], None] | None = None,
                 timeout: float = COMMIT_TIMEOUT) -> None:
        self.config = config
        self.timeout = timeout  # seconds the brokers may take to answer one commit
        self.group = config.job.group_id
        self.on_outcome = on_outcome
        self.offsets: dict[str, int] = {}  # "topic/partition" -> next offset, what the next commit sends
        self.committed: dict[str, int] = {}  # what the brokers last accepted
        self.failures = 0
        self._floor_read = False
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="icerouter-group")
        self._pending: Future | None = None
        self._admin = None

    def advance(self, read: Mapping[str, list]) -> None:
        """Take a finished batch's read ranges ({"topic/partition": [min, max]}): settled now."""
        with self._lock:
            self.offsets = next_offsets(self.offsets, read)

    def submit(self) -> Future | None:
        """Commit the offsets in the background; None when a commit is still running (the next
        batch's commit carries these offsets too)."""
        if self._pending is not None and not self._pending.done():
            return None
        self._pending = self._pool.submit(self.commit)
        return self._pending

    def _settled_floor(self) -> dict[str, int]:
        """The dead-letter table's settled offsets: where the group stands before this run's batches."""
        if not self.config.dlq.table:
            return {}
        from pyiceberg.exceptions import NoSuchTableError

        from router.catalog import get_catalog
        from router.catalog.progress_views import settled_offsets

        try:  # a handle of its own: the process's cached handles are committed in place by the batches
            table = get_catalog(self.config.catalog).load_table(self.config.dlq.table)
        except NoSuchTableError:
            return {}
        return settled_offsets(table, self.config.job.name) or {}

    def commit(self) -> bool:
        """One commit of the current offsets; True when the brokers accepted it."""
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
        from confluent_kafka.admin import AdminClient

        from router.source.metadata import admin_config
        from router.source.options import source_options

        try:
            if not self._floor_read:
                floor = self._settled_floor()
                with self._lock:
                    self.offsets = {k: max(v, self.offsets.get(k, 0)) for k, v in floor.items()} | {
                        k: v for k, v in self.offsets.items() if k not in floor}
                self._floor_read = True
            with self._lock:
                offsets = {k: v for k, v in self.offsets.items() if self.committed.get(k) != v}
            if not offsets:
                return True
            if self._admin is None:
                self._admin = AdminClient(admin_config(source_options(self.config)))
            partitions = [TopicPartition(*split_key(key), offset) for key, offset in sorted(offsets.items())]
            futures = self._admin.alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(self.group, partitions)], request_timeout=self.timeout)
            for future in futures.values():
                result = future.result(self.timeout)
                errors = [tp for tp in result.topic_partitions if tp.error is not None]
                if errors:
                    raise RuntimeError(f"{errors[0].topic}/{errors[0].partition}: {errors[0].error}")
            self.committed.update(offsets)
            self._outcome(True)
            return True
        except Exception as exc:  # monitoring only: never a reason to fail or slow down a batch
            self.failures += 1
            log.warning("could not commit offsets to consumer group %s (%d failures so far): %s", self.group,
                        self.failures, str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__)
            self._outcome(False)
            return False

    def _outcome(self, ok: bool) -> None:
        if self.on_outcome is not None:
            try:
                self.on_outcome(ok)
            except Exception:  # a metrics hook must not turn a commit into a failure
                pass

    def close(self, wait: float = COMMIT_TIMEOUT) -> None:
        """At the job's end: let a running commit finish (at most `wait` seconds), commit what it
        did not carry (the last batches' offsets), then stop the thread."""
        pending = self._pending
        if pending is not None:
            try:
                pending.result(wait)
            except Exception:
                pass
        with self._lock:
            behind = any(self.committed.get(k) != v for k, v in self.offsets.items())
        if behind:
            self.commit()
        self._pool.shutdown(wait=False)
        self._admin = None  # its client reconnects to the brokers for as long as it lives
