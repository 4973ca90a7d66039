"""Unframed JSON kept as Iceberg ``variant`` columns, for topics whose shape drifts too much to evolve.

Inferring columns (registry/json_infer.py) suits JSON whose shape settles: a new
key is a new column, a key changing type meets the ``type_change`` policy. Some
topics never settle (free-form attributes, payloads of many event kinds): every
batch adds columns, and a key that is a number today and an object tomorrow
dead-letters. A route's format says which parts are kept as they are instead
(registry/formats.py):

* ``variant_column``: the whole value becomes one variant column; any JSON value
  is taken (an object, an array, a string, a number...), nothing is inferred, the
  table's schema never changes.
* ``variant``: those top-level fields become variant columns, the rest of the
  object is inferred as today. A field missing from a record is a null variant
  column; a JSON null is a variant holding null. Nothing is ever added under a
  variant column (it is a leaf to evolution/plan.py), and a field that arrives as
  a string in one record and an object in the next is one column.

The value is encoded by registry/variant_encode.py; the artifacts carry a schema
whose variant fields are ``evolution.variant_type.VariantType`` so evolution,
``plan`` and ``check`` see the same columns the job writes.
"""
from __future__ import annotations

import hashlib
import json
import threading
from typing import Any, Iterator

import numpy as np
import pyarrow as pa
from cachetools import LRUCache
from pyiceberg.schema import Schema
from pyiceberg.types import NestedField

from evolution.arrow import iceberg_to_arrow
from evolution.variant_type import VariantType
from registry.arrow_lists import not_json
from registry.artifacts import JSON as JSON_TYPE
from registry.artifacts import SchemaArtifacts
from registry.formats import ValueFormat
from registry.json_infer import infer_json
from registry.variant_encode import VariantEncodeError, encode_variant, variant_array

try:
    import orjson

    _loads, _dumps = orjson.loads, orjson.dumps
except ImportError:  # pragma: no cover - orjson is optional
    _loads = json.loads

    def _dumps(v: Any) -> bytes:
        return json.dumps(v, separators=(",", ":")).encode()

__all__ = ["decode_variant", "variant_artifacts"]

Failure = tuple[int, str, str]  # (position, error class, reason)
_MISSING = object()

_artifacts: LRUCache = LRUCache(maxsize=1024)
_lock = threading.Lock()


class _Prebuilt:
    """The decoder slot of variant artifacts: their batches are built by :func:`decode_variant`."""

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list]:
        raise NotImplementedError("variant JSON is decoded by registry.json_variant.decode_variant")


def variant_artifacts(base: SchemaArtifacts | None, names: tuple[str, ...]) -> SchemaArtifacts:
    """``base``'s columns (None: none) followed by one optional variant column per name, cached."""
    key = (base.schema_id if base is not None else None, names)
    with _lock:
        hit = _artifacts.get(key)
    if hit is not None:
        return hit
    fields = list(base.iceberg_schema.fields) if base is not None else []
    next_id = base.iceberg_schema.highest_field_id if base is not None else 0
    fields += [NestedField(next_id + 1 + i, name, VariantType(), required=False) for i, name in enumerate(names)]
    schema = Schema(*fields)
    text = json.dumps({"inferred": base.schema_str if base is not None else None, "variant": list(names)},
                      separators=(",", ":"))
    ref = "json-variant:" + hashlib.sha256(text.encode()).hexdigest()[:16]
    art = SchemaArtifacts(ref, JSON_TYPE, text, None, schema, iceberg_to_arrow(schema), _Prebuilt(), False)
    with _lock:
        _artifacts[key] = art
    return art


def _documents(values: list[bytes], bad: list[Failure]) -> Iterator[tuple[int, Any]]:
    """(position, parsed JSON) of each value; a value that is not JSON goes to `bad` instead."""
    for pos, value in enumerate(values):
        try:
            yield pos, _loads(value)
        except (ValueError, TypeError) as exc:
            bad.append((pos, *not_json(value, exc)))


def _whole(values: list[bytes], column: str) -> tuple[list, list[Failure]]:
    metadata, data, ok, bad = [], [], [], []
    for pos, doc in _documents(values, bad):
        try:
            m, d = encode_variant(doc)
        except VariantEncodeError as exc:
            bad.append((pos, "decode_error", f"cannot encode as variant: {exc}"))
            continue
        metadata.append(m)
        data.append(d)
        ok.append(pos)
    if not ok:
        return [], bad
    art = variant_artifacts(None, (column,))
    column_array = pa.StructArray.from_arrays(
        [pa.array(metadata, pa.large_binary()), pa.array(data, pa.large_binary())],
        fields=list(art.arrow_schema.field(0).type))
    batch = pa.RecordBatch.from_arrays([column_array], schema=art.arrow_schema)
    return [(art, batch, np.asarray(ok, dtype=np.int64))], bad


def _split_fields(values: list[bytes], names: tuple[str, ...]
                  ) -> tuple[list[int], list[bytes], list[list[Any]], list[Failure]]:
    """Positions of the objects, each object's rest as JSON, the named fields' values (or _MISSING)."""
    ok, rests, kept, bad = [], [], [], []
    for pos, doc in _documents(values, bad):
        if not isinstance(doc, dict):
            kind = {list: "array", str: "string", bool: "boolean", int: "number",
                    float: "number"}.get(type(doc), "null")
            bad.append((pos, "decode_error", f"a JSON {kind} where an object was expected"))
            continue
        kept.append([doc.pop(name, _MISSING) for name in names])
        rests.append(_dumps(doc))
        ok.append(pos)
    return ok, rests, kept, bad


def _fields(values: list[bytes], names: tuple[str, ...], numbers: str) -> tuple[list, list[Failure]]:
    ok, rests, kept, bad = _split_fields(values, names)
    if not ok:
        return [], bad
    groups, failed = infer_json(pa.array(rests, pa.binary()), numbers)
    bad.extend((ok[p], cls, reason) for p, cls, reason in failed)
    out = []
    for base, batch, positions in groups:
        try:
            columns = [variant_array((kept[p][i] for p in positions), (kept[p][i] is not _MISSING for p in positions))
                       for i in range(len(names))]
        except VariantEncodeError:  # rare: find the records a variant cannot hold, keep the others
            good = []
            for p in positions:
                try:
                    for v in kept[p]:
                        if v is not _MISSING:
                            encode_variant(v)
                    good.append(p)
                except VariantEncodeError as exc:
                    bad.append((ok[p], "decode_error", f"cannot encode as variant: {exc}"))
            if not good:
                continue
            keep = np.flatnonzero(np.isin(positions, good))
            batch, positions = batch.take(pa.array(keep, pa.int64())), positions[keep]
            columns = [variant_array((kept[p][i] for p in positions), (kept[p][i] is not _MISSING for p in positions))
                       for i in range(len(names))]
        art = variant_artifacts(base, names)
        arrays = batch.columns if batch.num_columns else []
        combined = pa.RecordBatch.from_arrays([*arrays, *columns], schema=art.arrow_schema)
        out.append((art, combined, np.asarray([ok[p] for p in positions], dtype=np.int64)))
    return out, bad


Group = tuple[SchemaArtifacts, pa.RecordBatch, np.ndarray]


def decode_variant(values: pa.Array, fmt: ValueFormat) -> tuple[list[Group], list[Failure]]:
    """([(artifacts, batch, positions)], [(position, error class, reason)]) for unframed JSON values without
    nulls (the caller takes tombstones out), by the format's variant settings."""
    pylist = values.to_pylist()
    if fmt.variant_column is not None:
        found, bad = _whole(pylist, fmt.variant_column)
    else:
        found, bad = _fields(pylist, fmt.variant, fmt.numbers)
    bad.sort()
    return found, bad
