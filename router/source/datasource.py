"""The "icerouter-kafka" Python streaming Data Source over confluent-kafka.

The driver-side reader plans offsets (admission control, Trigger.AvailableNow,
packing); everything a task needs travels in its InputPartition, and tasks
yield Arrow batches with the schema of Spark's JVM Kafka source.

Spark starts a Python process of its own for each planning step of a start (the
source's schema, then the planner that lives as long as the query), and each one
imports this module first: it imports only what planning needs, the broker client
when the planner first asks the broker and the fetch path (pyarrow, numpy) in the
tasks (tests/test_import_graph.py pins it).
"""

from __future__ import annotations

import logging
import os
import time
from typing import TYPE_CHECKING, Iterator, Sequence

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from router.source.cadence import Cadence
from router.source.exceptions import OffsetsError, SourceOptionsError
from router.source.offsets import (
    EARLIEST, LATEST, Offsets, Range, ResumePlan, normalize, pack_ranges, plan_ranges, resume_start, tp_key,
)
from router.source.options import OPTIONS_KEY, KafkaSourceOptions
from router.source.rewind import batch_ranges, next_end, open_rewinds, split_rewinds
from router.source.schema import kafka_struct_type

if TYPE_CHECKING:
    import pyarrow as pa

    from router.source.metadata import BrokerMetadata

log = logging.getLogger(__name__)

SOURCE_NAME = "icerouter-kafka"
RESUME_KEY = "icerouter.resume"  # source option: ResumePlan.to_json(), start offsets from the tables

#: Used when neither the options nor kafka_stream() gave a task count.
DEFAULT_TARGET_TASKS = 2 * (os.cpu_count() or 1)



class KafkaInputPartition(InputPartition):
    """One Spark task: the options JSON plus a packed list of (topic, partition, from, until)."""

    def __init__(self, options_json: str, ranges: tuple[tuple[str, int, int, int], ...]) -> None:
        self.options_json = options_json
        self.ranges = ranges

    def __reduce__(self):
        return (KafkaInputPartition, (self.options_json, self.ranges))

    def __repr__(self) -> str:
        return f"KafkaInputPartition({len(self.ranges)} ranges)"


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans offsets on the driver; ``read`` runs on workers and touches no reader state."""

    def __init__(self, options_json: str, resume_json: str | None = None) -> None:
        self.options_json = options_json
        self.options = KafkaSourceOptions.from_json(options_json)
        self._metadata: BrokerMetadata | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._resume = ResumePlan.from_json(resume_json)
        self._planned = 0
        self._turn: str | None = None  # catch-up in turns: the last partition whose turn is done
        self._cadence = Cadence.from_json(self.options.cadence)  # None: every table commits every batch

    def __getstate__(self):
        return {"options_json": self.options_json, "options": self.options,
                "_metadata": None, "_target": self._target, "_latest": None,
                "_resume": ResumePlan(), "_planned": 0, "_turn": None,
                "_cadence": Cadence.from_json(self.options.cadence)}

    @property
    def metadata(self) -> BrokerMetadata:
        if self._metadata is None:
            from router.source.metadata import BrokerMetadata  # deferred: the schema step never asks the broker

            self._metadata = BrokerMetadata(self.options)
        return self._metadata

    # -- offsets -----------------------------------------------------------------
    def initialOffset(self) -> dict:
        """No checkpoint: the configured start, except where the tables say how far they got."""
        return normalize({**self._configured_start(), **self._resume.resume})

    def _configured_start(self) -> dict:
        tps = self.metadata.partitions()
        start = self.options.starting_offsets
        if start == "latest":
            return self.metadata.offsets(tps, "latest")
        earliest = self.metadata.offsets(tps, "earliest")
        if start == "earliest":
            return earliest
        latest = self.metadata.offsets(tps, "latest")
        out = dict(earliest)
        for topic, parts in start.items():
            for partition, offset in parts.items():
                key = tp_key(topic, partition)
                if offset == LATEST:
                    out[key] = latest.get(key, 0)
                elif offset == EARLIEST:
                    out[key] = earliest.get(key, 0)
                elif offset >= 0:
                    out[key] = offset
                else:
                    raise OffsetsError(f"invalid starting offset {offset}", topic=topic, partition=partition)
        return normalize(out)

    def prepareForTriggerAvailableNow(self) -> None:
        """Freeze the target: records and topics arriving later wait for the next run."""
        self._target = self.metadata.latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_records_per_trigger:
            return ReadMaxRows(self.options.max_records_per_trigger)
        return ReadAllAvailable()

    def _opened(self, start: dict) -> dict:
        """Rewind cursors to open in the first batch after a start (router/source/rewind.py)."""
        if self._planned:
            return {}
        positions, rewinds = split_rewinds(start)
        # a cursor the checkpoint holds already goes on, unless the tables now need more than it reads
        # (rolled back again, or a cursor left at its position by a backfill that fit in one batch)
        return {k: v for k, v in open_rewinds(positions, self._resume.backfill).items()
                if v < rewinds.get(k, positions[k])}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        start = normalize(start)
        now = time.time()  # before the broker answers: what arrives after is younger
        if self._target is not None:
            latest = self._target  # Trigger.AvailableNow: never beyond what existed at the start
        else:
            latest = self.metadata.latest()
            self._latest = latest
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        opened = self._opened(start)
        wanted = self._due(start, latest, opened, now)
        end, turn = next_end(start, wanted, max_rows, self.options.catch_up, self._turn, opened)
        if max_rows:
            self._turn = turn
        if self._cadence is not None:
            self._cadence.planned(split_rewinds(end)[0], latest, now)
        return end

    def _due(self, start: dict, latest: dict, opened: dict, now: float) -> dict:
        """The latest offsets, with the partitions whose tables all wait held at their position
        (router/source/cadence.py); Trigger.AvailableNow reads everything."""
        if self._cadence is None or self._target is not None:
            return latest
        positions, rewinds = split_rewinds(start)
        waiting = self._cadence.waiting(positions, latest, set(rewinds) | set(opened))
        held = self._cadence.held(waiting, now)
        path = self.options.cadence.get("waiting_file")
        if path:
            from router.jsonfile import write_json_atomic  # deferred: only a job with a cadence writes it

            write_json_atomic(path, {"at": now, "tables": {t: w.as_json(held.isdisjoint(keys))
                                                           for t, (w, keys) in sorted(waiting.items())}})
        return {key: positions[key] if key in held else offset for key, offset in latest.items()}

    def reportLatestOffset(self) -> dict | None:
        return self._latest

    # -- planning and reading ----------------------------------------------------------
    def plan(self, start: dict, end: dict) -> list[Range]:
        """The ranges of a batch; the tables' offsets may move its start (router/driver/resume.py)."""
        start = normalize(start)
        opened = self._opened(start)
        begin, until = batch_ranges(start, normalize(end), opened)
        rewinding = set(split_rewinds(start)[1]) | set(opened)  # read again on purpose: never skipped ahead
        self._planned += 1
        return plan_ranges(resume_start(begin, until, self._resume, keep=rewinding), until)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        ranges = self.plan(start, end)
        tasks = pack_ranges(ranges, self.options.target_tasks or DEFAULT_TARGET_TASKS)
        return [KafkaInputPartition(self.options_json, tuple(r.as_tuple() for r in task)) for task in tasks]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaInputPartition)
        from router.source.fetch import coalesce, read_ranges  # deferred: tasks only (pyarrow, numpy)

        # one batch per partition read suits the executor; Spark pays per batch it receives
        return coalesce(read_ranges(partition.options_json, [Range(*r) for r in partition.ranges]))

    def commit(self, end: dict) -> None:
        """Nothing to do: offsets live in the checkpoint and in Iceberg table properties."""

    def stop(self) -> None:
        if self._metadata is not None:
            self._metadata.close()
            self._metadata = None


class KafkaDataSource(DataSource):
    """``spark.readStream.format("icerouter-kafka").option("icerouter.options", opts.to_json())``."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def _options_json(self) -> str:
        text = self.options.get(OPTIONS_KEY)
        if not text:
            raise SourceOptionsError(f"option {OPTIONS_KEY!r} is required (KafkaSourceOptions.to_json())")
        return text

    def schema(self) -> StructType:
        return kafka_struct_type(KafkaSourceOptions.from_json(self._options_json()).include_headers)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(self._options_json(), self.options.get(RESUME_KEY))
