"""Errors raised by the evolution package.

Every error carries structured attributes (schema name, path, table, column...)
and a ``transient`` class attribute: schema problems never heal by retrying, so
callers dead-letter or fail instead of looping. All errors pickle with their
attributes (they cross Spark worker boundaries): see evolution/picklable.py.
"""
from __future__ import annotations

from typing import Any

from evolution.picklable import PicklableError


class EvolutionError(PicklableError):
    """Base class: a schema could not be mapped, planned or applied."""

    transient: bool = False


class UnsupportedSchemaError(EvolutionError):
    """A source schema cannot be represented in Iceberg (recursion, unknown type...)."""

    def __init__(self, reason: str, *, schema_name: str | None = None,
                 path: tuple[str, ...] | str = ()) -> None:
        path_t = tuple(path.split(".")) if isinstance(path, str) and path else tuple(path)
        where = ".".join(path_t) or "<root>"
        name = f" {schema_name!r}" if schema_name else ""
        super().__init__(f"unsupported schema{name} at {where}: {reason}",
                         reason=reason, schema_name=schema_name, path=path_t)


class PolicyConfigError(EvolutionError):
    """An evolution policy spec has an unknown key, unknown mode or illegal combination."""

    def __init__(self, reason: str, *, key: str | None = None, value: Any = None,
                 topic: str | None = None) -> None:
        where = f" (topic pattern {topic!r})" if topic else ""
        super().__init__(f"invalid evolution policy{where}: {reason}",
                         reason=reason, key=key, value=value, topic=topic)


class EvolutionViolation(EvolutionError):
    """A plan is blocked by a violation whose policy says fail (``freeze``)."""

    def __init__(self, reason: str, *, table: str | None = None, column: str | None = None,
                 kind: str | None = None) -> None:
        where = f"{table}." if table else ""
        col = f" column {where}{column}" if column else (f" table {table}" if table else "")
        super().__init__(f"schema change refused for{col}: {reason}",
                         reason=reason, table=table, column=column, kind=kind)


class ApplyError(EvolutionError):
    """Applying a plan to a table failed (e.g. the table changed under us)."""

    transient = True

    def __init__(self, reason: str, *, table: str | None = None, column: str | None = None) -> None:
        super().__init__(f"could not apply schema plan to {table or '<table>'}: {reason}",
                         reason=reason, table=table, column=column)
