"""Errors raised by the Kafka streaming source.

Every error carries structured attributes and a ``transient`` class attribute so
callers can decide between retrying, failing the query or dead-lettering.
All errors pickle with their attributes (evolution/picklable.py) because they
cross the Spark driver/worker boundary.
"""

from __future__ import annotations

from evolution.picklable import PicklableError


class SourceError(PicklableError):
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
        super().__init__(message, topic=topic, partition=partition, offset=offset)

    def __str__(self) -> str:
        where = []
        if self.topic is not None:
            where.append(f"topic={self.topic}")
        if self.partition is not None:
            where.append(f"partition={self.partition}")
        if self.offset is not None:
            where.append(f"offset={self.offset}")
        return f"{self.message} ({', '.join(where)})" if where else self.message


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
