"""Errors raised by the router.

Every error carries the coordinates a human needs to act on it (table, topic,
partition, offset, route) and says whether retrying can help (`transient`), so
the dispatcher can decide between retry, fail and dead-letter. They travel from
Spark executors to the driver, so they must stay picklable: all state lives in
keyword attributes that `__reduce__` replays.
"""

from __future__ import annotations

from typing import Any


class RouterError(Exception):
    """Base class of every router error."""

    transient: bool = False
    exit_code: int = 1

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context = {k: v for k, v in context.items() if v is not None}
        for key, value in self.context.items():
            setattr(self, key, value)

    def __reduce__(self):  # keep attributes across pickling (Spark workers)
        return (_rebuild, (type(self), self.message, self.context))

    def __str__(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.context.items())
        return f"{self.message} ({where})" if where else self.message


def _rebuild(cls, message, context):
    return cls(message, **context)


class ConfigError(RouterError):
    """The configuration file or a command-line argument is invalid."""

    exit_code = 2


class ServiceUnavailable(RouterError):
    """A service `plan` or `check` needs (schema registry, Iceberg catalog) could not be reached,
    timed out or refused us: nothing was decided, which a CI gate must tell apart from "blocked"."""

    transient = True
    exit_code = 3

    def __str__(self) -> str:  # the message already names the service and its (masked) URL
        return self.message


class RouteError(RouterError):
    """A record cannot be routed: no rule matched, or a template value is not allowed."""


class TableNameError(RouteError):
    """A rendered table name is invalid or outside the allowed namespaces."""


class CommitError(RouterError):
    """A table commit failed after every retry."""

    transient = True


class TableQuarantined(RouterError):
    """A table failed repeatedly; its records go to the dead-letter queue."""


class SourceError(RouterError):
    """Kafka could not be read."""

    transient = True


class MaintenanceError(RouterError):
    """A maintenance step failed for one table."""


class CompactionConflict(MaintenanceError):
    """A concurrent commit removed files the compaction meant to replace; nothing was changed."""

    transient = True


class UnsupportedLocation(MaintenanceError):
    """A table location orphan removal cannot list (no pyarrow filesystem, or split across file systems)."""

