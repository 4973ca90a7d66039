"""Errors raised by the router, and the one answer to "is this error transient?".

Every error carries the coordinates a human needs to act on it (table, topic,
partition, offset, route) and says whether retrying can help (`transient`), so
the dispatcher can decide between retry, fail and dead-letter. They travel from
Spark executors to the driver, so they must stay picklable: all state lives in
keyword attributes, which evolution/picklable.py keeps through pickling.

`is_transient` decides from that attribute (ours, registry/'s, evolution/'s and
router/source/'s errors all carry one), walking the cause chain, and knows the
connection errors of the libraries we call from one table. Spark hands the
driver only the text of an exception raised in a task, so a task marks a
transient error on its way out (`crossing_process_boundary`) and the driver
reads that mark back.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Callable, Iterator

from evolution.picklable import PicklableError


class RouterError(PicklableError):
    """Base class of every router error."""

    transient: bool = False
    exit_code: int = 1

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message, **{k: v for k, v in context.items() if v is not None})
        self.context = self.attrs

    def __str__(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.context.items())
        return f"{self.message} ({where})" if where else self.message


class ConfigError(RouterError):
    """The configuration file or a command-line argument is invalid."""

    exit_code = 2


class SchemaFileError(ConfigError):
    """A schema file that is not a schema (binary, not UTF-8): `plan` and `check` call it blocked."""

    exit_code = 1  # refused like a blocked change: the job could never take it


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


class MaintenanceError(RouterError):
    """A maintenance step failed for one table."""


class CompactionConflict(MaintenanceError):
    """A concurrent commit removed files the compaction meant to replace; nothing was changed."""

    transient = True


class UnsupportedLocation(MaintenanceError):
    """A table location orphan removal cannot list (no pyarrow filesystem, or split across file systems)."""


class RowLevelError(RouterError):
    """A row-level change (position deletes, a row delta, locating keys) this table cannot take."""


class TransientError(RouterError):
    """A transient error leaving a Spark task, marked so the driver can tell from the text alone."""

    transient = True


TRANSIENT_MARK = "[icerouter:transient]"
KAFKA_TRANSPORT_ERRORS = frozenset({"_TRANSPORT", "_ALL_BROKERS_DOWN", "_TIMED_OUT"})


def _kafka_transport(exc: BaseException) -> bool:
    error = exc.args[0] if exc.args else None
    return callable(getattr(error, "name", None)) and error.name() in KAFKA_TRANSPORT_ERRORS


def _marked(exc: BaseException) -> bool:
    return TRANSIENT_MARK in str(exc)


# Errors of other libraries, by class (module.qualname, matched along the MRO, so nothing is imported here).
THIRD_PARTY_TRANSIENT: dict[str, Callable[[BaseException], bool]] = {
    "builtins.ConnectionError": lambda exc: True,  # refused / reset sockets (HTTP catalogs, registry)
    "builtins.TimeoutError": lambda exc: True,
    "requests.exceptions.ConnectionError": lambda exc: True,  # REST catalog transport
    "requests.exceptions.Timeout": lambda exc: True,
    "sqlalchemy.exc.OperationalError": lambda exc: True,  # SQL catalog: server down, database locked
    "sqlalchemy.exc.InterfaceError": lambda exc: True,  # SQL catalog: connection closed under us
    "psycopg2.OperationalError": lambda exc: True,
    "sqlite3.OperationalError": lambda exc: True,
    "cimpl.KafkaException": _kafka_transport,  # confluent-kafka: brokers unreachable
    "confluent_kafka.cimpl.KafkaException": _kafka_transport,
    "pyspark.errors.exceptions.base.PySparkException": _marked,  # a task's error, as text
    "py4j.protocol.Py4JJavaError": _marked,
}


def is_transient(exc: BaseException | None) -> bool:
    """True when retrying later may succeed: from the first error along the cause chain that knows."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        verdict = getattr(type(exc), "transient", None)
        if isinstance(verdict, bool):
            return verdict
        for cls in type(exc).__mro__:
            rule = THIRD_PARTY_TRANSIENT.get(f"{cls.__module__}.{cls.__qualname__}")
            if rule is not None:
                return rule(exc)
        exc = exc.__cause__ or exc.__context__
    return False


@contextmanager
def crossing_process_boundary() -> Iterator[None]:
    """Around the work of a Spark task: a transient error leaves it marked (see module docstring)."""
    try:
        yield
    except TransientError:
        raise
    except Exception as exc:
        if is_transient(exc):
            raise TransientError(f"{TRANSIENT_MARK} {type(exc).__name__}: {exc}") from exc
        raise
