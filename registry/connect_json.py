"""Kafka Connect JsonConverter records with the schema embedded (``schemas.enable=true``) -> Arrow.

Each value is ``{"schema": <Connect schema>, "payload": <value>}``. Records are
grouped by their schema (the serialized schema is the group's reference, so a
producer that changes its schema starts a new group and evolution sees it as a
new writer schema); each group's payload is converted by a converter compiled
once per schema: base64 text to bytes and decimals, Connect's Date / Time /
Timestamp integers to dates, times and instants, maps given as objects or as
[key, value] pairs. A value that is not an envelope, has no payload or does not
fit its schema is a failure with its reason; the other records still decode.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import json
import re
import threading
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from cachetools import LRUCache

from evolution.arrow import iceberg_to_arrow
from evolution.connect import (
    CONNECT_DATE, CONNECT_DECIMAL, CONNECT_TIME, CONNECT_TIMESTAMP, connect_to_iceberg,
)
from registry.arrow_lists import not_json
from registry.artifacts import SchemaArtifacts
from registry.connect_columns import finish, raw_type, unscaled as _unscaled
from registry.exceptions import UnsupportedSchemaType
from registry.ndjson import read_lines

try:
    import orjson

    _loads = orjson.loads

    def _key(schema: Any) -> bytes:
        return orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)

    orjson_dumps = orjson.dumps
except ImportError:  # pragma: no cover - orjson is optional
    _loads = json.loads

    def _key(schema: Any) -> bytes:
        return json.dumps(schema, sort_keys=True, separators=(",", ":")).encode()

    def orjson_dumps(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

__all__ = ["CONNECT", "decode_connect_json", "connect_artifacts"]

CONNECT = "CONNECT"
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
EPOCH_DATE = dt.date(1970, 1, 1)

Conv = Callable[[Any], Any]
Failure = tuple[int, str, str]

_cache: LRUCache = LRUCache(maxsize=1024)
_lock = threading.Lock()


def _check(kind: type | tuple[type, ...], what: str) -> Conv:
    def conv(v: Any) -> Any:
        if not isinstance(v, kind) or isinstance(v, bool) and kind is not bool:
            raise TypeError(f"expected {what}, got {v!r}")
        return v
    return conv


def _converter(node: dict, path: str) -> Conv:
    """payload value -> the Python value pyarrow builds the column from (TypeError/ValueError: no fit)."""
    kind, name = node.get("type"), node.get("name")
    required = not node.get("optional", False)
    inner = _inner(node, kind, name, path)

    def conv(v: Any) -> Any:
        if v is None:
            if required:
                raise ValueError(f"{path} is required but null")
            return None
        return inner(v)
    return conv


def _inner(node: dict, kind: str, name: str | None, path: str) -> Conv:
    if name == CONNECT_DECIMAL:
        scale = int((node.get("parameters") or {}).get("scale", 0))
        return lambda v: _unscaled(v, scale)
    if name == CONNECT_DATE:
        return lambda v: EPOCH_DATE + dt.timedelta(days=_check(int, "days")(v))
    if name == CONNECT_TIME:
        return lambda v: (dt.datetime.min + dt.timedelta(milliseconds=_check(int, "milliseconds")(v))).time()
    if name == CONNECT_TIMESTAMP:
        return lambda v: EPOCH + dt.timedelta(milliseconds=_check(int, "milliseconds")(v))
    if kind in ("int8", "int16", "int32", "int64"):
        return _check(int, "an integer")
    if kind in ("float32", "float64"):
        return lambda v: float(_check((int, float), "a number")(v))
    if kind == "boolean":
        return _check(bool, "a boolean")
    if kind == "string":
        return _check(str, "a string")
    if kind == "bytes":
        return lambda v: base64.b64decode(_check(str, "base64 text")(v), validate=True)
    if kind == "array":
        item = _converter(node.get("items") or {}, f"{path}[]")
        return lambda v: [item(x) for x in _check(list, "an array")(v)]
    if kind == "map":
        key, value = _converter(node.get("keys") or {}, f"{path}.keys"), _converter(node.get("values") or {}, f"{path}.values")

        def conv_map(v: Any) -> Any:
            pairs = v.items() if isinstance(v, dict) else _check(list, "a map")(v)
            return [(key(k), value(x)) for k, x in pairs]
        return conv_map
    if kind == "struct":
        fields = [(f["field"], _converter(f, f"{path}.{f['field']}")) for f in node.get("fields") or []]

        def conv_struct(v: Any) -> Any:
            v = _check(dict, "an object")(v)
            return {name: c(v.get(name)) for name, c in fields}
        return conv_struct
    raise TypeError(f"{path}: unknown Connect type {kind!r}")


class ConnectDecoder:
    """Payloads of one Connect schema -> a batch of the schema's Arrow shape."""

    def __init__(self, schema: dict, arrow: pa.Schema) -> None:
        self.wrapped = not (schema.get("type") == "struct" and schema.get("name") not in
                            (CONNECT_DATE, CONNECT_TIME, CONNECT_TIMESTAMP, CONNECT_DECIMAL))
        root = _converter(schema, "payload")
        self.convert = (lambda v: {"value": root(v)}) if self.wrapped else root
        self.struct = pa.struct(list(arrow))
        self.arrow = arrow
        self.schema = schema
        self.raw = None if self.wrapped else raw_type(schema)  # the payload's JSON shape, for the column-wise path

    def rows(self, payloads: list[Any]) -> tuple[pa.RecordBatch, list[int], list[tuple[int, str]]]:
        """(batch of the payloads that fit, their positions, [(position, reason)])."""
        rows, ok, bad = [], [], []
        for i, payload in enumerate(payloads):
            try:
                rows.append(self.convert(payload))
                ok.append(i)
            except (TypeError, ValueError, decimal.InvalidOperation) as exc:
                bad.append((i, f"payload does not fit its Connect schema: {exc}"))
        try:
            array = pa.array(rows, type=self.struct)
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            keep = []
            for i, row in zip(ok, rows):
                try:
                    pa.array([row], type=self.struct)
                    keep.append((i, row))
                except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError) as exc:
                    bad.append((i, f"payload does not fit its Connect schema: {exc}"))
            ok, rows = [i for i, _ in keep], [r for _, r in keep]
            array = pa.array(rows, type=self.struct)
        return pa.RecordBatch.from_struct_array(array).cast(self.arrow), ok, sorted(bad)

    def columns(self, payloads: pa.Array) -> pa.RecordBatch | None:
        """The payloads' JSON text read column-wise (pyarrow's JSON reader with the schema's JSON shape,
        then Connect's logical types converted per column); None when the schema or the values need
        the per-record path (maps, a root that is not a struct, a required value missing, a type that
        does not fit)."""
        if self.raw is None:
            return None
        if not len(payloads):
            return None
        try:  # pretty-printed payloads keep their line breaks
            table = read_lines(payloads, pj.ParseOptions(explicit_schema=pa.schema(list(self.raw)),
                                                         unexpected_field_behavior="ignore"))
            array = pa.StructArray.from_arrays([c.combine_chunks() for c in table.columns], fields=list(self.raw))
            converted = finish(array, self.schema, self.struct)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, ValueError, TypeError):
            return None
        return pa.RecordBatch.from_struct_array(converted) if converted is not None else None

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list[tuple[int, str]]]:
        payloads = [_loads(v[skip:])["payload"] if v is not None else None for v in framed.to_pylist()]
        batch, ok, bad = self.rows(payloads)
        return batch, np.asarray(ok, dtype=np.int64), bad


def connect_artifacts(schema: Any) -> SchemaArtifacts:
    """Artifacts of one embedded Connect schema, cached by its serialized form."""
    key = _key(schema)
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    ref = "connect:" + hashlib.sha256(key).hexdigest()[:16]
    try:
        iceberg = connect_to_iceberg(schema)
        arrow = iceberg_to_arrow(iceberg)
        decoder = ConnectDecoder(schema, arrow)
    except Exception as exc:  # not a Connect schema we can map
        raise UnsupportedSchemaType(f"{type(exc).__name__}: {exc}", schema_id=ref, schema_type=CONNECT) from None
    art = SchemaArtifacts(ref, CONNECT, key.decode(), schema, iceberg, arrow, decoder, False)
    with _lock:
        _cache[key] = art
    return art


_PAYLOAD_KEY = re.compile(rb'\s*,\s*"payload"\s*:\s*')


def _schema_prefix(value: bytes) -> bytes | None:
    """The bytes a record starts with up to its payload's value (``{"schema": {...}, "payload": ``),
    when the schema comes first (as the JsonConverter writes it); None otherwise."""
    head = re.match(rb'\{\s*"schema"\s*:\s*', value)
    if head is None:
        return None
    try:
        text = value.decode("utf-8")
        _, end = _RAW_DECODER.raw_decode(text, len(head.group(0).decode()))
    except (ValueError, UnicodeDecodeError):
        return None
    prefix = text[:end].encode()
    tail = _PAYLOAD_KEY.match(value, len(prefix))
    return value[:tail.end()] if tail is not None and len(text) == len(value) else None


_RAW_DECODER = json.JSONDecoder()
MAX_PREFIXES = 16  # schema texts learned per batch (a producer that reorders its schema's keys stays correct)


def _envelope(value: bytes, pos: int, bad: list) -> Any:
    """One record parsed whole: its doc, or None with its failure in `bad`."""
    try:
        doc = _loads(value)
    except (ValueError, TypeError) as exc:
        bad.append((pos, *not_json(value, exc)))
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("schema"), dict):
        bad.append((pos, "decode_error", "not a Kafka Connect JSON envelope: no 'schema' object "
                                         "(is the converter's schemas.enable off? use format json)"))
        return None
    if "payload" not in doc:
        bad.append((pos, "decode_error", "Kafka Connect JSON envelope without a 'payload'"))
        return None
    return doc


def _flags(mask: pa.Array) -> np.ndarray:
    return np.asarray(mask.fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)


def _payloads(values: pa.Array, at: np.ndarray, skip: int) -> pa.Array:
    """The payload texts of the rows `at` (sorted positions) that start with a `skip`-byte prefix:
    every value cut first when they are all of them (no copy of the envelopes), else the rows taken."""
    if len(at) == len(values):
        return pc.binary_slice(values, skip, -1)
    return pc.binary_slice(values.take(pa.array(at, pa.int64())), skip, -1)


def decode_connect_json(values: pa.Array) -> tuple[list[tuple[SchemaArtifacts, pa.RecordBatch, np.ndarray]],
                                                   list[Failure]]:
    """([(artifacts, batch, positions)], [(position, error class, reason)]); nulls are left to the caller.

    The schema is the same text in nearly every record of a topic: a record is parsed whole, and the
    records that start with the same bytes up to their payload are found and cut to their payload
    text by Arrow kernels, then read column-wise (``ConnectDecoder.columns``); what is left goes
    record by record. At most MAX_PREFIXES schema texts are learned per batch."""
    values = values.cast(pa.binary()) if values.type != pa.binary() else values
    valid = np.asarray(values.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    remaining = np.flatnonzero(valid)
    closed = None  # per row: the value ends with "}" (as an envelope whose payload is cut out must)
    groups: dict[bytes, tuple[Any, list[np.ndarray], list[pa.Array], list[int], list[Any]]] = {}
    bad: list[Failure] = []
    learned = 0
    while len(remaining):
        pos = int(remaining[0])
        value = values[pos].as_py()
        remaining = remaining[1:]
        doc = _envelope(value, pos, bad)
        if doc is None:
            continue
        key = _key(doc["schema"])
        entry = groups.setdefault(key, (doc["schema"], [], [], [], []))
        prefix = _schema_prefix(value) if learned < MAX_PREFIXES and value.endswith(b"}") else None
        if prefix is None:
            entry[3].append(pos)
            entry[4].append(doc["payload"])
            continue
        learned += 1
        # the kernels run over the whole column (a scan of each value's first and last bytes): taking the
        # remaining values first copied every record, schema and all, twice
        if closed is None:
            closed = _flags(pc.ends_with(values, pattern="}"))
        same = (_flags(pc.starts_with(values, pattern=prefix.decode("utf-8"))) & closed)[remaining]
        at = np.concatenate(([pos], remaining[same]))
        entry[1].append(at)
        entry[2].append(_payloads(values, at, len(prefix)))
        remaining = remaining[~same]
    out = []
    for schema, fast_at, fast_text, slow_at, slow_docs in groups.values():
        try:
            art = connect_artifacts(schema)
        except UnsupportedSchemaType as exc:
            at = [int(p) for a in fast_at for p in a] + slow_at
            bad.extend((p, "unsupported_schema", str(exc)) for p in at)
            continue
        positions = np.concatenate(fast_at + [np.asarray(slow_at, dtype=np.int64)]).astype(np.int64)
        texts = pa.concat_arrays(fast_text + [pa.array([orjson_dumps(d) for d in slow_docs], pa.binary())])
        batch = art.decoder.columns(texts)
        if batch is not None:
            out.append((art, batch, positions))
            continue
        keep, docs = [], []
        for i, text in enumerate(texts.to_pylist()):
            try:
                docs.append(_loads(text))
            except (ValueError, TypeError):  # not the payload alone after all: the record parsed whole
                doc = _envelope(values[int(positions[i])].as_py(), int(positions[i]), bad)
                if doc is None:
                    continue
                docs.append(doc["payload"])
            keep.append(i)
        positions = positions[np.asarray(keep, dtype=np.int64)]
        batch, ok, failed = art.decoder.rows(docs)
        bad.extend((int(positions[i]), "decode_error", reason) for i, reason in failed)
        out.append((art, batch, positions[np.asarray(ok, dtype=np.int64)]))
    bad.sort()
    return out, bad
