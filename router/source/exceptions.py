"""Errors raised by the Kafka streaming source.

Every error carries structured attributes and a ``transient`` class attribute so
callers can decide between retrying, failing the query or dead-lettering.
All errors pickle with their attributes because they cross the Spark
driver/worker boundary.
"""

from __future__ import annotations


class SourceError(Exception):
    """Base class of every error raised by ``router.source``."""

    transient: bool = False

    def __init__(
        self,
        message: str,
        *,
        topic: str | None = None,
        partition: int | None = None,
        offset: int | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.topic = topic
        self.partition = partition
        self.offset = offset

    def __reduce__(self):
        return (_rebuild, (type(self), self.message, self.topic, self.partition, self.offset))

    def __str__(self) -> str:
        where = []
        if self.topic is not None:
            where.append(f"topic={self.topic}")
        if self.partition is not None:
            where.append(f"partition={self.partition}")
        if self.offset is not None:
            where.append(f"offset={self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


def _rebuild(cls, message, topic, partition, offset):
    return cls(message, topic=topic, partition=partition, offset=offset)


class SourceOptionsError(SourceError):
    """The source options are invalid; fixing the configuration is the only cure."""

    transient = False


class OffsetsError(SourceError):
    """An offsets document (checkpoint or starting offsets) cannot be understood."""

    transient = False


class BrokerError(SourceError):
    """The broker failed or did not answer in time; retrying later may succeed."""

    transient = True


class ReadStalledError(BrokerError):
    """A range could not be completed: no progress after the bounded number of polls."""

    transient = True
