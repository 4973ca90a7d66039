"""Decode a batch of values that carry no registry framing, by the route's format (registry/formats.py).

The result has the shape ``decode_values`` gives framed values: every input row
is in one group or one failure, nulls are ``tombstone`` failures the router
treats as it treats framed ones (a raw route keeps them: its rows are the bytes).
"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pyarrow as pa
from cachetools import LRUCache
from pyiceberg.schema import Schema
from pyiceberg.types import BinaryType, NestedField

from evolution.arrow import iceberg_to_arrow
from registry.artifacts import JSON as JSON_TYPE
from registry.artifacts import SchemaArtifacts, build_artifacts
from registry.client import CachedRegistry
from registry.connect_json import decode_connect_json
from registry.decode import DecodedGroup, DecodeFailure, DecodeResult, _merge, _registry_failure
from registry.exceptions import RegistryError, UnsupportedSchemaType
from registry.formats import CONNECT_JSON, JSON, RAW, ValueFormat
from registry.json_infer import infer_json
from registry.json_variant import decode_variant
from registry.wire import TOMBSTONE, as_binary_array

__all__ = ["decode_unframed", "RAW_ARTIFACTS", "RAW_KEY", "RAW_VALUE"]

RAW_KEY, RAW_VALUE = "key", "value"
_RAW_SCHEMA = Schema(NestedField(1, RAW_KEY, BinaryType(), required=False),
                     NestedField(2, RAW_VALUE, BinaryType(), required=False))


class _RawDecoder:
    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list]:
        values = framed.cast(pa.large_binary())
        batch = pa.record_batch([pa.nulls(len(values), pa.large_binary()), values], names=[RAW_KEY, RAW_VALUE])
        return batch, np.arange(len(values), dtype=np.int64), []


RAW_ARTIFACTS = SchemaArtifacts("raw", "RAW", '{"raw":["key","value"]}', None, _RAW_SCHEMA,
                                iceberg_to_arrow(_RAW_SCHEMA), _RawDecoder(), False)

_declared: LRUCache = LRUCache(maxsize=256)
_declared_lock = threading.Lock()


def _declared_artifacts(fmt: ValueFormat) -> SchemaArtifacts:
    ref = fmt.declared_id
    with _declared_lock:
        hit = _declared.get(ref)
    if hit is None:
        hit = build_artifacts(ref, JSON_TYPE, fmt.schema_text or "")
        with _declared_lock:
            _declared[ref] = hit
    return hit


def _tombstones(arr: pa.Array, result: DecodeResult) -> np.ndarray:
    nulls = np.asarray(arr.is_null().to_numpy(zero_copy_only=False), dtype=bool)
    result.failures.extend(DecodeFailure(int(i), None, TOMBSTONE, "null value", False) for i in np.flatnonzero(nulls))
    return np.flatnonzero(~nulls)


def decode_unframed(registry: CachedRegistry | None, fmt: ValueFormat, values: Any,
                    keys: Any = None) -> DecodeResult:
    """Values (and, for raw, keys) of one topic's rows -> per-schema groups and failures."""
    arr = as_binary_array(values)
    result = DecodeResult()
    if fmt.kind == RAW:
        key = as_binary_array(keys).cast(pa.large_binary()) if keys is not None else pa.nulls(len(arr), pa.large_binary())
        batch = pa.record_batch([key, arr.cast(pa.large_binary())], schema=RAW_ARTIFACTS.arrow_schema)
        result.groups.append(DecodedGroup("raw", RAW_ARTIFACTS, batch, np.arange(len(arr), dtype=np.int64)))
        return result
    present = _tombstones(arr, result)
    rows = arr if len(present) == len(arr) else arr.take(pa.array(present, pa.int64()))
    if fmt.kind == CONNECT_JSON or fmt.inferred or fmt.has_variant:
        if fmt.kind == CONNECT_JSON:
            found, bad = decode_connect_json(rows)
        elif fmt.has_variant:
            found, bad = decode_variant(rows, fmt)
        else:
            found, bad = infer_json(rows, fmt.numbers)
        for art, batch, positions in found:
            result.groups.append(DecodedGroup(art.schema_id, art, batch, present[positions]))
        result.failures.extend(DecodeFailure(int(present[p]), None, cls, reason, False) for p, cls, reason in bad)
    elif fmt.kind == JSON:
        ref: Any = fmt.declared_id
        try:
            if fmt.subject is not None:
                reg = registry.version(fmt.subject, fmt.version)
                ref = reg.schema_id
                art = registry.artifacts(ref)
                if art.schema_type != JSON_TYPE:
                    raise UnsupportedSchemaType(f"subject {fmt.subject} holds a {art.schema_type} schema; "
                                                "format json reads JSON Schema subjects", schema_id=ref,
                                                schema_type=art.schema_type)
            else:
                art = _declared_artifacts(fmt)
        except RegistryError as exc:
            cls, transient = _registry_failure(exc)
            result.failures.extend(DecodeFailure(int(i), None, cls, str(exc), transient, exc) for i in present)
            result.failures.sort(key=lambda f: f.index)
            return result
        batch, ok, bad = art.decoder.decode(rows, 0)
        result.groups.append(DecodedGroup(ref, art, batch, present[np.asarray(ok, dtype=np.int64)]))
        result.failures.extend(DecodeFailure(int(present[p]), ref, "decode_error", reason, False) for p, reason in bad)
    else:
        raise ValueError(f"decode_unframed: {fmt.kind!r} is framed, use decode_values")
    result.groups = _merge(result.groups)
    result.failures.sort(key=lambda f: f.index)
    return result
