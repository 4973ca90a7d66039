"""Record retention on the local broker for the live benchmark modes (soak, freshness)."""

from __future__ import annotations

import threading
import time


class BrokerRetention:
    """Deletes the topics' records older than `seconds`, as a Kafka broker's retention.ms would.

    The local broker ignores retention.ms: it keeps every record in memory and
    rewrites its whole store to disk every few seconds, so its CPU grows with the
    records it holds (producing alone at 2,000 records/s: 0.06 -> 0.42 cores over
    136 s; with records deleted past 30 s it stays at ~0.22), and on 2 cores that
    growing load slows the job a live benchmark measures. Records are deleted only below
    the end offsets sampled at a time after which two batches have committed (the
    second was planned after the first ended, so it read past those offsets):
    nothing the job has not committed is removed.
    """

    def __init__(self, broker, topics: list[str], partitions: int, seconds: float, batches: list,
                 every: float = 10.0):
        self.broker, self.seconds = broker, seconds
        self.partitions = [(t, p) for t in topics for p in range(partitions)]
        self.batches, self.every = batches, every
        self.deletions = self.records = 0
        self.error: str | None = None  # the deleting stopped (the run goes on, the store then grows again)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._guarded_run, name="bench-broker-retention", daemon=True)

    def start(self) -> "BrokerRetention":
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(30)
        return {"seconds": self.seconds, "deletions": self.deletions, "records_deleted": self.records,
                "error": self.error}

    def _committed_after(self, t: float) -> bool:
        return sum(1 for b in list(self.batches) if b.started > t) >= 2

    def _guarded_run(self) -> None:
        try:
            self._run()
        except Exception as exc:  # noqa: BLE001 - reported in the result, never kills the benchmark
            self.error = f"{type(exc).__name__}: {exc}"

    def _run(self) -> None:
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        admin, marks, deleted = self.broker.admin(), [], {}
        latest = {TopicPartition(t, p): OffsetSpec.latest() for t, p in self.partitions}
        while not self._stop.wait(self.every):
            now = time.time()
            ends = [TopicPartition(tp.topic, tp.partition, r.offset)
                    for tp, r in ((tp, f.result()) for tp, f in admin.list_offsets(latest).items())]
            marks.append((now, ends))
            due = None
            while marks and marks[0][0] < now - self.seconds and self._committed_after(marks[0][0]):
                due = marks.pop(0)[1]
            if due is None:
                continue
            for future in admin.delete_records(due).values():
                future.result()
            self.deletions += 1
            self.records += sum(tp.offset - deleted.get((tp.topic, tp.partition), 0) for tp in due)
            deleted.update({(tp.topic, tp.partition): tp.offset for tp in due})
