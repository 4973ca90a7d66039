"""Errors of change-stream routes (upsert / Debezium CDC).

They are configuration or schema problems found before any row is written (a
value schema that is no Debezium envelope, key columns a table cannot use):
retrying never helps, so they are terminal. Bad *records* are not exceptions:
they come back from ``extract_changes`` as dead letters with a reason.
"""

from __future__ import annotations

from router.exceptions import RouterError

__all__ = ["ChangeStreamError", "EnvelopeError", "KeyColumnsError"]


class ChangeStreamError(RouterError):
    """A change-stream route cannot work as configured."""


class EnvelopeError(ChangeStreamError):
    """A value schema read in ``cdc: debezium`` mode is not a Debezium envelope."""


class KeyColumnsError(ChangeStreamError):
    """The key columns of a change-stream route cannot be determined or used."""
