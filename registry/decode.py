"""Decode a batch of Kafka values (or keys) into Arrow record batches per schema.

The result keeps every input row accounted for: each row is either in one
``DecodedGroup`` (its position in ``indices``) or in ``failures`` with an
error class the router maps to ignore / dead-letter / retry:

    tombstone             null value
    null_key              null key in avro key mode
    wire_format           not framed as registry wire format
    schema_not_found      registry answered 404 for the id / GUID
    registry_unavailable  registry unreachable after retries (transient)
    registry_error        other registry answer (401, 422...)
    unsupported_schema    schema type or shape we cannot decode (e.g. a recursive type)
    decode_error          payload does not decode with its writer schema
    invalid_utf8          key mode "string" and bytes are not UTF-8
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np
import pyarrow as pa

from registry.artifacts import PROTOBUF, SchemaArtifacts, protobuf_message_artifacts
from registry.client import CachedRegistry
from registry.exceptions import (
    DecodeError, RegistryError, RegistryUnavailable, SchemaNotFound, UnsupportedSchemaType,
    WireFormatError,
)
from registry.protobuf_decode import split_messages
from registry.wire import (
    KEY_SCHEMA_ID_HEADER, TOMBSTONE, VALUE_SCHEMA_ID_HEADER, SchemaRef, as_binary_array,
    split_frames, take_rows,
)

__all__ = ["DecodedGroup", "DecodeFailure", "DecodeResult", "decode_values", "decode_keys",
           "ERROR_CLASSES", "KEY_COLUMN"]

ERROR_CLASSES = ("tombstone", "null_key", "wire_format", "schema_not_found",
                 "registry_unavailable", "registry_error", "unsupported_schema",
                 "decode_error", "invalid_utf8")
KEY_COLUMN = "key"

# registry exception -> failure class, most specific first
_REGISTRY_ERROR_CLASSES: tuple[tuple[type[RegistryError], str], ...] = (
    (SchemaNotFound, "schema_not_found"),
    (RegistryUnavailable, "registry_unavailable"),
    (UnsupportedSchemaType, "unsupported_schema"),
    (RegistryError, "registry_error"),
)


@dataclass(frozen=True)
class DecodedGroup:
    """Rows of one writer schema, decoded; ``indices`` are input row positions."""

    schema_id: SchemaRef | None
    artifacts: SchemaArtifacts | None
    batch: pa.RecordBatch
    indices: np.ndarray


@dataclass(frozen=True)
class DecodeFailure:
    index: int
    schema_id: SchemaRef | None
    error_class: str
    reason: str
    transient: bool = False
    error: RegistryError | None = field(default=None, compare=False, repr=False)  # the registry's own error

    def to_exception(self, *, topic: str | None = None, partition: int | None = None,
                     offset: int | None = None) -> RegistryError:
        """The matching exception, for callers that raise instead of dead-lettering."""
        if self.error is not None:
            return self.error
        if self.error_class == "wire_format" or self.error_class == "tombstone":
            return WireFormatError(self.reason, index=self.index, topic=topic,
                                   partition=partition, offset=offset)
        if self.error_class == "registry_unavailable":
            return RegistryUnavailable(self.reason, schema_id=self.schema_id)
        if self.error_class == "schema_not_found":
            return SchemaNotFound(schema_id=self.schema_id, reason=self.reason)
        return DecodeError(f"{self.error_class}: {self.reason}", schema_id=self.schema_id,
                           topic=topic, partition=partition, offset=offset, index=self.index)


@dataclass
class DecodeResult:
    groups: list[DecodedGroup] = field(default_factory=list)
    failures: list[DecodeFailure] = field(default_factory=list)

    @property
    def decoded_rows(self) -> int:
        return sum(g.batch.num_rows for g in self.groups)


def _registry_failure(exc: RegistryError) -> tuple[str, bool]:
    for cls, name in _REGISTRY_ERROR_CLASSES:
        if isinstance(exc, cls):
            return name, bool(exc.transient)
    return "registry_error", bool(exc.transient)  # pragma: no cover


def _merge(groups: list[DecodedGroup]) -> list[DecodedGroup]:
    """One group per schema reference (header- and prefix-framed rows may split one)."""
    by_ref: dict[Any, list[DecodedGroup]] = {}
    for g in groups:
        by_ref.setdefault(g.schema_id, []).append(g)
    out = []
    for ref, parts in by_ref.items():
        parts = [p for p in parts if p.batch.num_rows] or parts[:1]
        if len(parts) == 1:
            out.append(parts[0])
            continue
        table = pa.Table.from_batches([p.batch for p in parts]).combine_chunks()
        batch = table.to_batches()[0] if table.num_rows else parts[0].batch
        out.append(DecodedGroup(ref, parts[0].artifacts, batch,
                                np.concatenate([p.indices for p in parts])))
    return out


def decode_values(registry: CachedRegistry, values: Any, *,
                  headers: Sequence[Any] | None = None,
                  header_key: str = VALUE_SCHEMA_ID_HEADER) -> DecodeResult:
    """Decode framed values (BinaryArray or list of bytes/None) into per-schema batches."""
    arr = as_binary_array(values)
    framed = split_frames(arr, headers, header_key)
    result = DecodeResult()
    for f in framed.failures:
        result.failures.append(DecodeFailure(f.index, None, f.error_class, f.reason, False))
    groups: list[DecodedGroup] = []
    for group in framed.groups:
        try:
            art = registry.artifacts(group.ref)
        except RegistryError as exc:
            cls, transient = _registry_failure(exc)
            result.failures.extend(DecodeFailure(int(i), group.ref, cls, str(exc), transient, exc)
                                   for i in group.indices)
            continue
        rows = take_rows(arr, group.indices)
        if art.schema_type == PROTOBUF:
            groups += _protobuf_groups(group.ref, art, rows, group.indices, group.skip, result)
            continue
        batch, positions, bad = art.decoder.decode(rows, group.skip)
        groups.append(DecodedGroup(group.ref, art, batch, group.indices[positions]))
        result.failures.extend(DecodeFailure(int(group.indices[pos]), group.ref, "decode_error",
                                             reason, False) for pos, reason in bad)
    result.groups = _merge(groups)
    result.failures.sort(key=lambda f: f.index)
    return result


def _protobuf_groups(ref: SchemaRef, art: SchemaArtifacts, rows: pa.Array, indices: np.ndarray,
                     skip: int, result: DecodeResult) -> list[DecodedGroup]:
    """Rows of one Protobuf schema, decoded per message their message indexes name.

    One message per schema id and batch (the table decisions are taken per schema id):
    rows naming another message than the batch's first are dead-lettered with the reason."""
    def fail(positions: Any, cls: str, reason: str) -> None:
        result.failures.extend(DecodeFailure(int(indices[p]), ref, cls, reason, False) for p in positions)

    by_message, bad = split_messages(rows, skip)
    for pos, reason in bad:
        fail([pos], "decode_error", reason)
    out: list[DecodedGroup] = []
    for idx, positions in sorted(by_message.items(), key=lambda kv: kv[1][0]):
        try:
            message_art = protobuf_message_artifacts(art, idx)
        except DecodeError as exc:
            fail(positions, "decode_error", exc.reason)
            continue
        except UnsupportedSchemaType as exc:
            fail(positions, "unsupported_schema", str(exc))
            continue
        if out:
            fail(positions, "decode_error", f"message {message_art.parsed.descriptor.full_name} "
                 f"{list(idx)} in a batch whose schema {ref} records use {out[0].artifacts.parsed.descriptor.full_name}"
                 " (one message per schema id and batch)")
            continue
        pos_arr = np.asarray(positions, dtype=np.int64)
        batch, ok, bad_rows = message_art.decoder.decode(take_rows(rows, pos_arr), skip)
        out.append(DecodedGroup(ref, message_art, batch, indices[pos_arr[ok]]))
        result.failures.extend(DecodeFailure(int(indices[pos_arr[p]]), ref, "decode_error", reason, False)
                               for p, reason in bad_rows)
    return out


def decode_keys(registry: CachedRegistry | None, keys: Any,
                mode: Literal["avro", "string", "bytes"] = "bytes", *,
                headers: Sequence[Any] | None = None) -> DecodeResult:
    """Decode message keys: registry Avro/JSON, UTF-8 strings, or raw bytes.

    In ``string`` / ``bytes`` mode the result has one group (schema_id None) with
    a single ``key`` column; null keys stay null there. In ``avro`` mode null
    keys are ``null_key`` failures and the rest decode like values.
    """
    arr = as_binary_array(keys)
    if mode == "avro":
        if registry is None:
            raise ValueError("avro key mode needs a registry")
        res = decode_values(registry, arr, headers=headers, header_key=KEY_SCHEMA_ID_HEADER)
        res.failures = [DecodeFailure(f.index, f.schema_id, "null_key", "null key", False)
                        if f.error_class == TOMBSTONE else f for f in res.failures]
        return res
    indices = np.arange(len(arr), dtype=np.int64)
    if mode == "bytes":
        col = arr.cast(pa.large_binary())
        return DecodeResult([DecodedGroup(None, None, pa.record_batch([col], names=[KEY_COLUMN]),
                                          indices)])
    if mode != "string":
        raise ValueError(f"unknown key mode {mode!r}; use 'avro', 'string' or 'bytes'")
    try:
        arr.cast(pa.large_string())
        ok_mask = np.ones(len(arr), dtype=bool)
    except pa.ArrowInvalid:
        ok_mask = np.array([v is None or _is_utf8(v) for v in arr.to_pylist()], dtype=bool)
    good = indices[ok_mask]
    col = arr.take(pa.array(good)).cast(pa.large_string())
    failures = [DecodeFailure(int(i), None, "invalid_utf8", "key is not valid UTF-8", False)
                for i in indices[~ok_mask]]
    return DecodeResult([DecodedGroup(None, None, pa.record_batch([col], names=[KEY_COLUMN]),
                                      good)], failures)


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
