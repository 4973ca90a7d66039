"""JSON Schema framed payloads -> Arrow.

Payloads are parsed with orjson when installed (else json), validated with
the ``jsonschema`` package when installed, and converted to the target Arrow
shape by a converter compiled per schema: ISO strings become
dates/times/timestamps, base64 text becomes bytes, free-form objects stay JSON
text, a value of a multi-type field fills the branch named by its JSON type.
A payload that does not parse, fails validation, misses a required field or
has a value of the wrong type becomes a failure entry; the rest still decode.
"""
from __future__ import annotations

import base64
import datetime as dt
import decimal
import json
from typing import Any, Callable

import numpy as np
import pyarrow as pa

try:
    import orjson

    _loads = orjson.loads
except ImportError:  # pragma: no cover - orjson is optional
    _loads = json.loads

try:
    from jsonschema.validators import validator_for
except ImportError:  # pragma: no cover - validation is skipped without jsonschema
    validator_for = None


def _dumps(v: Any) -> str:
    return json.dumps(v, separators=(",", ":"), sort_keys=True)

__all__ = ["JsonDecoder", "compile_json_converter"]

Conv = Callable[[Any], Any]


def _timestamp(tz: bool) -> Conv:
    def conv(v: Any) -> Any:
        if isinstance(v, str):
            d = dt.datetime.fromisoformat(v)
            if tz:
                return d.astimezone(dt.timezone.utc) if d.tzinfo else d.replace(tzinfo=dt.timezone.utc)
            return d.replace(tzinfo=None) if d.tzinfo else d
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return int(v)
        raise TypeError(f"expected an ISO timestamp, got {v!r}")
    return conv


def _date(v: Any) -> Any:
    if isinstance(v, str):
        return dt.date.fromisoformat(v)
    raise TypeError(f"expected an ISO date, got {v!r}")


def _time(v: Any) -> Any:
    if isinstance(v, str):
        return dt.time.fromisoformat(v)
    raise TypeError(f"expected an ISO time, got {v!r}")


def _decimal(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise TypeError(f"expected a decimal, got {v!r}")
    return decimal.Decimal(str(v))


def _check(kind: type | tuple, label: str) -> Conv:
    def conv(v: Any) -> Any:
        if isinstance(v, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
            raise TypeError(f"expected {label}, got {v!r}")
        if not isinstance(v, kind):
            raise TypeError(f"expected {label}, got {v!r}")
        return v
    return conv


def _JSON_TYPE_NAMES(v: Any) -> tuple[str, ...]:
    if isinstance(v, bool):
        return ("boolean",)
    if isinstance(v, int):
        return ("integer", "number")
    if isinstance(v, float):
        return ("number",)
    if isinstance(v, str):
        return ("string",)
    if isinstance(v, list):
        return ("array",)
    return ()


def _string(v: Any) -> Any:
    """Strings as-is; free-form objects/arrays are kept as their JSON text."""
    if isinstance(v, str):
        return v
    if isinstance(v, (dict, list)):
        return _dumps(v)
    raise TypeError(f"expected a string, got {v!r}")


def _base64(v: Any) -> Any:
    if isinstance(v, str):
        return base64.b64decode(v, validate=True)
    raise TypeError(f"expected base64 text, got {v!r}")


def _nullable(field: pa.Field, conv: Conv) -> Conv:
    name = field.name

    def wrapped(v: Any) -> Any:
        if v is None:
            if not field.nullable:
                raise ValueError(f"required field {name!r} is missing or null")
            return None
        return conv(v)
    return wrapped


def compile_json_converter(t: pa.DataType) -> Conv:
    """Converter from parsed JSON to values ``pa.array`` accepts for ``t``."""
    if pa.types.is_struct(t):
        fields = [(t.field(i).name, _nullable(t.field(i), compile_json_converter(t.field(i).type)))
                  for i in range(t.num_fields)]
        branches = {name: conv for name, conv in fields}

        def struct(v: Any) -> Any:
            if not isinstance(v, dict):
                # a struct of alternatives (anyOf / several types): one branch is set
                for name in _JSON_TYPE_NAMES(v):
                    if name in branches:
                        return {n: (branches[n](v) if n == name else None) for n, _ in fields}
                raise TypeError(f"expected an object, got {v!r}")
            return {name: conv(v.get(name)) for name, conv in fields}
        return struct
    if pa.types.is_map(t):
        val = compile_json_converter(t.item_type)
        return lambda v: [(k, None if x is None else val(x)) for k, x in _check(dict, "an object")(v).items()]
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        item = compile_json_converter(t.value_type)
        return lambda v: [None if x is None else item(x) for x in _check(list, "an array")(v)]
    if pa.types.is_timestamp(t):
        return _timestamp(t.tz is not None)
    if pa.types.is_date(t):
        return _date
    if pa.types.is_time(t):
        return _time
    if pa.types.is_decimal(t):
        return _decimal
    if pa.types.is_boolean(t):
        return _check(bool, "a boolean")
    if pa.types.is_integer(t):
        return _check(int, "an integer")
    if pa.types.is_floating(t):
        return lambda v: float(_check((int, float), "a number")(v))
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return _string
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return _base64
    return lambda v: v


class JsonDecoder:
    """Parses and converts JSON payloads; bad rows become failures."""

    def __init__(self, arrow_schema: pa.Schema, schema: dict | None = None) -> None:
        self.arrow_schema = arrow_schema
        self.struct_type = pa.struct(list(arrow_schema))
        convert = compile_json_converter(self.struct_type)
        is_object = isinstance(schema, dict) and bool(schema.get("properties"))
        if schema is not None and not is_object:
            root = arrow_schema.names[0]
            self.convert = lambda v: convert({root: v})
        else:
            self.convert = convert
        self.validator = None
        if schema is not None and validator_for is not None:
            cls = validator_for(schema)
            self.validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def _parse(self, payload: bytes) -> dict:
        value = _loads(payload)
        if self.validator is not None:
            error = next(iter(self.validator.iter_errors(value)), None)
            if error is not None:
                where = "/".join(map(str, error.absolute_path)) or "<root>"
                raise ValueError(f"schema validation failed at {where}: {error.message}")
        return self.convert(value)

    def _batch(self, rows: list[dict]) -> pa.RecordBatch:
        arr = pa.array(rows, type=self.struct_type)
        return pa.RecordBatch.from_struct_array(arr).cast(self.arrow_schema)

    def decode(self, framed: pa.Array, skip: int = 0
               ) -> tuple[pa.RecordBatch, np.ndarray, list[tuple[int, str]]]:
        """(batch of good rows, their positions, [(position, reason)])."""
        rows, ok, bad = [], [], []
        for pos, value in enumerate(framed.to_pylist()):
            try:
                rows.append(self._parse(value[skip:]))
                ok.append(pos)
            except Exception as exc:  # parse or validation failure of one payload
                bad.append((pos, f"{type(exc).__name__}: {exc}"[:500]))
        try:
            return self._batch(rows), np.asarray(ok, dtype=np.int64), bad
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            pass
        keep, keep_ok = [], []
        for pos, row in zip(ok, rows):
            try:
                self._batch([row])
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                bad.append((pos, f"arrow conversion: {exc}"[:500]))
                continue
            keep.append(row)
            keep_ok.append(pos)
        return self._batch(keep), np.asarray(keep_ok, dtype=np.int64), sorted(bad)
