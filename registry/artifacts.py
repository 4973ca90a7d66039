"""Everything derived from one registered schema, built once per schema id.

Parsing the schema, mapping it to Iceberg and Arrow and choosing a decoder
costs milliseconds; payloads arrive by the million. ``build_artifacts`` is
pure (no registry access) so the client can cache its result per id.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Protocol

import fastavro
import numpy as np
import pyarrow as pa
from pyiceberg.schema import Schema

from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_to_iceberg, parse_avro
from evolution.jsonschema import jsonschema_to_iceberg
from evolution.protobuf import protobuf_to_iceberg
from registry.avro_columnar import ColumnarDecoder, columnar_supported
from registry.avro_records import RecordDecoder
from registry.avro_refs import inline_references
from registry.exceptions import UnsupportedSchemaType
from registry.json_records import JsonDecoder
from registry.protobuf_decode import ProtobufDecoder
from registry.protobuf_schema import ProtobufFile, load_protobuf

__all__ = ["SchemaArtifacts", "Decoder", "build_artifacts", "protobuf_message_artifacts",
           "ProtobufMessage", "AVRO", "JSON", "PROTOBUF"]

AVRO, JSON, PROTOBUF = "AVRO", "JSON", "PROTOBUF"


class Decoder(Protocol):
    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, Any,
                                                           list[tuple[int, str]]]:
        """(good rows as a batch, their positions in ``framed``, [(position, reason)]).

        Each value of ``framed`` starts with a ``skip``-byte wire prefix."""


@dataclass(frozen=True)
class SchemaArtifacts:
    schema_id: int | str
    schema_type: str
    schema_str: str
    parsed: Any
    iceberg_schema: Schema
    arrow_schema: pa.Schema
    decoder: Decoder
    columnar: bool = False


class _RecordsAdapter:
    """Gives the per-record decoder the batch-level decoder signature."""

    def __init__(self, inner: RecordDecoder) -> None:
        self.inner = inner

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list]:
        batch, ok, bad = self.inner.decode(framed, skip)
        return batch, np.asarray(ok, dtype=np.int64), bad


@dataclass(frozen=True)
class ProtobufMessage:
    """``SchemaArtifacts.parsed`` of a Protobuf schema: the file, the message the artifacts
    describe, and the artifacts of the file's other messages (built when a record names one)."""

    file: ProtobufFile
    indexes: tuple[int, ...]
    descriptor: Any
    variants: dict = field(default_factory=dict, compare=False, repr=False)


def build_artifacts(schema_id: int | str, schema_type: str | None, schema_str: str,
                    references: list | None = None,
                    *, columnar: bool = True) -> SchemaArtifacts:
    """Parse ``schema_str`` and derive the Iceberg/Arrow shapes and the decoder.

    ``references``: schema texts of the Avro schemas this one references; for Protobuf
    (import name, schema text) pairs. A Protobuf schema's artifacts describe the file's first
    message (message index ``[0]``, what plan and check read); ``protobuf_message_artifacts``
    gives those of the message a record names.
    ``columnar=False`` forces the per-record path (used by benchmarks/tests).
    """
    kind = (schema_type or AVRO).upper()
    if kind == AVRO:
        return _avro(schema_id, schema_str, references, columnar)
    if kind == JSON:
        return _json(schema_id, schema_str)
    if kind == PROTOBUF:
        file = load_protobuf(schema_str, [tuple(r) for r in references or ()], schema_id=schema_id)
        return _protobuf(schema_id, schema_str, file, (0,), {}, columnar)
    raise UnsupportedSchemaType("only AVRO, JSON and PROTOBUF schemas are decoded", schema_id=schema_id,
                                schema_type=kind)


def _protobuf(schema_id: int | str, schema_str: str, file: ProtobufFile, indexes: tuple[int, ...],
              variants: dict, columnar: bool) -> SchemaArtifacts:
    desc = file.message(indexes)  # DecodeError when the indexes name no message
    try:
        iceberg = protobuf_to_iceberg(desc)
        arrow = iceberg_to_arrow(iceberg)
        decoder = ProtobufDecoder(file, indexes, arrow, columnar)
    except Exception as exc:  # recursive or unmappable message: terminal for this id
        raise UnsupportedSchemaType(f"{type(exc).__name__}: {exc}", schema_id=schema_id,
                                    schema_type=PROTOBUF) from None
    art = SchemaArtifacts(schema_id, PROTOBUF, schema_str, ProtobufMessage(file, indexes, desc, variants),
                          iceberg, arrow, decoder, columnar)
    variants[indexes] = art
    return art


def protobuf_message_artifacts(art: SchemaArtifacts, indexes: tuple[int, ...]) -> SchemaArtifacts:
    """The artifacts of the message ``indexes`` names in ``art``'s Protobuf file (cached).

    Raises DecodeError (no such message) or UnsupportedSchemaType (e.g. a recursive message)."""
    parsed: ProtobufMessage = art.parsed
    hit = parsed.variants.get(indexes)
    if hit is not None:
        return hit
    return _protobuf(art.schema_id, art.schema_str, parsed.file, indexes, parsed.variants, art.columnar)


def _avro(schema_id: int | str, schema_str: str, references: list[str] | None,
          columnar: bool) -> SchemaArtifacts:
    try:
        raw = parse_avro(schema_str)
        expanded = raw if not references else inline_references(raw, references)
        parsed = fastavro.parse_schema(expanded)
        iceberg = avro_to_iceberg(expanded)
        arrow = iceberg_to_arrow(iceberg)
    except UnsupportedSchemaType:
        raise
    except Exception as exc:  # invalid or unmappable schema: terminal for this id
        raise UnsupportedSchemaType(f"{type(exc).__name__}: {exc}", schema_id=schema_id,
                                    schema_type=AVRO) from None
    records = RecordDecoder(parsed, expanded, arrow)
    if columnar and columnar_supported(expanded):
        decoder: Decoder = ColumnarDecoder(expanded, arrow, records)
        return SchemaArtifacts(schema_id, AVRO, schema_str, parsed, iceberg, arrow, decoder, True)
    return SchemaArtifacts(schema_id, AVRO, schema_str, parsed, iceberg, arrow,
                           _RecordsAdapter(records), False)


def _json(schema_id: int | str, schema_str: str) -> SchemaArtifacts:
    try:
        parsed = json.loads(schema_str)
        iceberg = jsonschema_to_iceberg(parsed)
        arrow = iceberg_to_arrow(iceberg)
    except Exception as exc:
        raise UnsupportedSchemaType(f"{type(exc).__name__}: {exc}", schema_id=schema_id,
                                    schema_type=JSON) from None
    return SchemaArtifacts(schema_id, JSON, schema_str, parsed, iceberg, arrow,
                           JsonDecoder(arrow, parsed), False)
