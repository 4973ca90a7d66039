"""Everything derived from one registered schema, built once per schema id.

Parsing the schema, mapping it to Iceberg and Arrow and choosing a decoder
costs milliseconds; payloads arrive by the million. ``build_artifacts`` is
pure (no registry access) so the client can cache its result per id.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

import fastavro
import numpy as np
import pyarrow as pa
from pyiceberg.schema import Schema

from evolution.arrow import iceberg_to_arrow
from evolution.avro import avro_to_iceberg, parse_avro
from evolution.jsonschema import jsonschema_to_iceberg
from registry.avro_columnar import ColumnarDecoder, columnar_supported
from registry.avro_records import RecordDecoder
from registry.avro_refs import inline_references
from registry.exceptions import UnsupportedSchemaType
from registry.json_records import JsonDecoder

__all__ = ["SchemaArtifacts", "Decoder", "build_artifacts", "AVRO", "JSON", "PROTOBUF"]

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


def build_artifacts(schema_id: int | str, schema_type: str | None, schema_str: str,
                    references: list[str] | None = None,
                    *, columnar: bool = True) -> SchemaArtifacts:
    """Parse ``schema_str`` and derive the Iceberg/Arrow shapes and the decoder.

    ``references``: schema texts of the Avro schemas this one references.
    ``columnar=False`` forces the per-record path (used by benchmarks/tests).
    """
    kind = (schema_type or AVRO).upper()
    if kind == AVRO:
        return _avro(schema_id, schema_str, references, columnar)
    if kind == JSON:
        return _json(schema_id, schema_str)
    raise UnsupportedSchemaType("only AVRO and JSON schemas are decoded", schema_id=schema_id,
                                schema_type=kind)


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
