"""How a route reads a record's value: registry framing (the default) or one of the unframed formats.

Real Kafka estates carry topics without the registry's 5-byte framing: services
that write plain JSON, Kafka Connect's JsonConverter (with or without its
embedded schema), Debezium through that converter. A route says which it reads:

    registry      magic byte + schema id / GUID, or the schema-id header (the default)
    raw           no decode: the key and value bytes become binary columns
    json          unframed JSON objects; columns declared by a JSON Schema file or a
                  registry subject (its latest or pinned version), else inferred
    connect_json  Kafka Connect's JsonConverter with schemas.enable=true: each value is
                  {"schema": ..., "payload": ...} and the embedded Connect schema gives the columns

Inferred json may keep drifting parts as Iceberg ``variant`` columns instead of
inferring columns from them (registry/json_variant.py): the whole value in one
column (``variant_column``), or named top-level fields (``variant``) beside the
inferred rest.

The value is a shared type: built on the driver from the config (a schema file
is read there, its text travels with the format), decoded by the executors.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

__all__ = ["ValueFormat", "REGISTRY", "RAW", "JSON", "CONNECT_JSON", "FORMAT_KINDS", "JSON_NUMBERS",
           "REGISTRY_FORMAT"]

REGISTRY, RAW, JSON, CONNECT_JSON = "registry", "raw", "json", "connect_json"
FORMAT_KINDS = (REGISTRY, RAW, JSON, CONNECT_JSON)
#: how inferred JSON types a number: long when integral (double otherwise), or always double
JSON_NUMBERS = ("long", "double")


@dataclass(frozen=True)
class ValueFormat:
    kind: str = REGISTRY
    schema_text: str | None = None  # json: a declared JSON Schema (the file's text)
    schema_source: str | None = None  # json: where the declared schema came from (a path), for messages
    subject: str | None = None  # json: a registry subject whose schema decodes unframed payloads
    version: int | str = "latest"  # json + subject: "latest" (TTL-cached, follows new versions) or a version
    numbers: str = "long"  # inferred json: JSON_NUMBERS
    variant: tuple[str, ...] = ()  # json: top-level fields stored as variant columns (the rest inferred)
    variant_column: str | None = None  # json: the whole value stored as one variant column of this name

    @property
    def has_variant(self) -> bool:
        return bool(self.variant) or self.variant_column is not None

    @property
    def framed(self) -> bool:
        return self.kind == REGISTRY

    @property
    def inferred(self) -> bool:
        return (self.kind == JSON and self.schema_text is None and self.subject is None
                and self.variant_column is None)

    @property
    def declared_id(self) -> str:
        """The schema reference of a declared schema file: its content, so an edited file is a new schema."""
        return "json-file:" + hashlib.sha256((self.schema_text or "").encode()).hexdigest()[:16]

    def describe(self) -> str:
        if self.kind != JSON:
            return self.kind
        if self.schema_text is not None:
            return f"json (schema {self.schema_source or 'file'})"
        if self.subject is not None:
            return f"json (subject {self.subject} version {self.version})"
        if self.variant_column is not None:
            return f"json (the whole value as variant column {self.variant_column})"
        kept = f", variant {', '.join(self.variant)}" if self.variant else ""
        return f"json (inferred, numbers as {self.numbers}{kept})"


REGISTRY_FORMAT = ValueFormat()
