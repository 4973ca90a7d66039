"""Errors raised by the registry package.

Each error carries structured attributes (schema id, subject, topic, partition,
offset...) and a ``transient`` class attribute so the caller can choose between
retrying (registry down), failing, or dead-lettering the record (bad bytes,
unknown schema). Errors cross Spark worker boundaries, so all of them pickle
with their attributes (evolution/picklable.py).
"""
from __future__ import annotations

from evolution.picklable import PicklableError

__all__ = [
    "RegistryError", "RegistryUnavailable", "SchemaNotFound", "UnsupportedSchemaType",
    "WireFormatError", "DecodeError", "RegistryConfigError",
]


class RegistryError(PicklableError):
    """Base class for registry, wire-format and decoding failures."""

    transient: bool = False


class RegistryConfigError(RegistryError, ValueError):
    """The registry configuration is invalid (unknown key, bad value)."""

    def __init__(self, reason: str, *, key: str | None = None) -> None:
        where = f" ({key})" if key else ""
        super().__init__(f"invalid registry config{where}: {reason}", reason=reason, key=key)


class RegistryUnavailable(RegistryError):
    """The registry could not be reached or answered 5xx after all retries."""

    transient = True

    def __init__(self, reason: str, *, url: str | None = None, schema_id: int | str | None = None,
                 subject: str | None = None, attempts: int = 0,
                 status: int | None = None) -> None:
        what = f"schema {schema_id}" if schema_id is not None else f"subject {subject!r}"
        super().__init__(
            f"registry unavailable while fetching {what} after {attempts} attempt(s): {reason}",
            reason=reason, url=url, schema_id=schema_id, subject=subject,
            attempts=attempts, status=status)


class SchemaNotFound(RegistryError):
    """The registry answered 404 for a schema id, GUID or subject: not retryable."""

    def __init__(self, *, schema_id: int | str | None = None, subject: str | None = None,
                 status: int | None = 404, reason: str = "not found") -> None:
        what = f"schema id {schema_id}" if schema_id is not None else f"subject {subject!r}"
        super().__init__(f"{what}: {reason}", schema_id=schema_id, subject=subject,
                         status=status, reason=reason)


class UnsupportedSchemaType(RegistryError):
    """The schema type (e.g. PROTOBUF) or shape cannot be decoded to Arrow."""

    def __init__(self, reason: str, *, schema_id: int | str | None = None,
                 schema_type: str | None = None) -> None:
        super().__init__(f"schema {schema_id} ({schema_type}): {reason}",
                         reason=reason, schema_id=schema_id, schema_type=schema_type)


class WireFormatError(RegistryError):
    """A value is not framed as the registry wire format (magic byte, id length)."""

    def __init__(self, reason: str, *, index: int | None = None, topic: str | None = None,
                 partition: int | None = None, offset: int | None = None) -> None:
        super().__init__(f"wire format error: {reason}", reason=reason, index=index,
                         topic=topic, partition=partition, offset=offset)


class DecodeError(RegistryError):
    """A framed payload could not be decoded with its writer schema."""

    def __init__(self, reason: str, *, schema_id: int | str | None = None,
                 topic: str | None = None, partition: int | None = None,
                 offset: int | None = None, index: int | None = None) -> None:
        where = "" if topic is None else f" at {topic}[{partition}]@{offset}"
        super().__init__(f"cannot decode with schema {schema_id}{where}: {reason}",
                         reason=reason, schema_id=schema_id, topic=topic,
                         partition=partition, offset=offset, index=index)
