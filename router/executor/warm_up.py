"""Python workers warmed while the job starts.

A task's first run in a fresh Python worker imports the write path (pyiceberg, pyarrow, the
registry, confluent-kafka: seconds of CPU). Spark keeps its Python workers between tasks
(`spark.python.worker.reuse`), but a pool per kind of task: the workers of an RDD job are not the
ones a Python data source's reads get. So the warm-up is a read of this data source, one partition
per task slot, each importing the write path; run while the Kafka source registers and plans the
first batch, it leaves workers the first batch's tasks reuse (router/driver/session.py).
Its planning processes import this module alone (pyspark's data source classes).
"""

from __future__ import annotations

from typing import Iterator

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

NAME = "icerouter-warm-up"
SCHEMA = "slot int"


class WarmUpSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return WarmUpReader(int(self.options.get("slots", "1")))


class WarmUpReader(DataSourceReader):
    def __init__(self, slots: int) -> None:
        self.slots = max(1, slots)

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(self.slots)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        import router.executor.tasks  # noqa: F401
        import router.source.fetch  # noqa: F401

        yield (partition.value,)
