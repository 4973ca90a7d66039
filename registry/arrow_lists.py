"""A list column rebuilt around new values: one place for the offsets arithmetic Arrow leaves to callers.

Decoders (registry/json_infer.py, registry/connect_columns.py) and the executor's alignment to a
table's schema (router/executor/align.py) convert a list's flattened values and must put them back
under the same offsets, as a list or a large list, keeping the list's own nulls.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["with_values", "not_json"]


def with_values(array: pa.Array, values: pa.Array, target: pa.DataType) -> pa.Array:
    """`array`'s lists (list or large list) around `values` (its flattened values, converted), typed `target`."""
    offsets = array.offsets
    if offsets[0].as_py():  # a slice: flatten() starts at its first value
        offsets = pc.subtract(offsets, offsets[0])
    cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
    return cls.from_arrays(offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32()), values,
                           type=target, mask=array.is_null() if array.null_count else None)


def not_json(value: bytes, exc: Exception) -> tuple[str, str]:
    """(error class, reason) of a value a JSON parser refused: not UTF-8, or not JSON."""
    try:
        value.decode("utf-8")
    except UnicodeDecodeError:
        return "invalid_utf8", "value is not valid UTF-8"
    return "decode_error", f"invalid JSON: {str(exc).splitlines()[0][:200]}"
