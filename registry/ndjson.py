"""A column of JSON values read by pyarrow's JSON reader as one block of lines, column-wise.

Why: the readers of unframed JSON (registry/json_infer.py) and of Kafka Connect payloads
(registry/connect_json.py) hand a whole batch to ``pyarrow.json.read_json``. Arrow kernels join the
values with newlines in one copy, and the reader is told that values may hold line breaks of their
own (pretty-printed JSON), so nothing is scanned or rewritten per record.

Each row must be exactly its own value: the reader parses the block as a stream of documents, and
``{"a":1`` followed by ``}{"a":2}`` would read as two good rows from two broken values. So the
block is read only when every value starts with ``{`` and ends with ``}`` (whitespace aside) and the
reader returns one row per value. Then no document can span two values: after a value's closing
``}`` a document still open would need a ``,`` or a closer where the next value opens with ``{``,
and a string still open would meet the joining line break, which JSON forbids inside a string. So
each value holds one document or more, and as many rows as values means one each. Any other batch
raises ArrowInvalid and takes its decoder's record-by-record path.
"""
from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

__all__ = ["joined_lines", "ends_as_objects", "read_lines", "READ_BLOCK_BYTES"]

_NEWLINE = pa.scalar(b"\n", pa.large_binary())
_OPEN, _CLOSE = ord("{"), ord("}")
_WHITESPACE = b" \t\n\r"
_BLANKS = np.frombuffer(_WHITESPACE, dtype=np.uint8)
_STEPS_BACK = 4  # whitespace a value may begin or end with before the rest are checked one by one

#: the reader's block: 4 MiB parsed ~1.5x faster than one block of the whole batch (80 MB: cache);
#: types of later blocks are unified with earlier ones. A block must hold the longest record.
READ_BLOCK_BYTES = 4 << 20


def _bounds(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the values' offsets into their data buffer, that buffer's bytes)."""
    _, offsets, data = values.buffers()[:3]
    wide = pa.types.is_large_binary(values.type) or pa.types.is_large_string(values.type)
    starts = np.frombuffer(offsets, dtype=np.int64 if wide else np.int32)[values.offset:values.offset + len(values) + 1]
    return starts, (np.frombuffer(data, dtype=np.uint8) if data is not None else np.empty(0, np.uint8))


def ends_as_objects(values: pa.Array) -> bool:
    """True when every value (none null) starts with ``{`` and ends with ``}``, whitespace aside."""
    if not len(values):
        return True
    starts, data = _bounds(values)
    firsts, lasts = starts[:-1], starts[1:] - 1
    if np.any(lasts < firsts):  # an empty value
        return False
    return (_all_hold(data, firsts.copy(), lasts, 1, _OPEN, starts)
            and _all_hold(data, lasts.copy(), firsts, -1, _CLOSE, starts))


def _all_hold(data: np.ndarray, at: np.ndarray, limits: np.ndarray, step: int, char: int, starts: np.ndarray) -> bool:
    """Every value holds `char` at `at` once whitespace is stepped over (`step` +1 from its first byte,
    -1 from its last; never past `limits`, its other end): a few column-wise steps, then one by one."""
    odd = np.flatnonzero(data[at] != char)
    for _ in range(_STEPS_BACK):  # a producer's trailing line break, pretty-printed JSON's indent
        if not len(odd):
            return True
        blank = np.isin(data[at[odd]], _BLANKS) & (at[odd] != limits[odd])
        if not blank.any():
            return False  # a value whose edge is neither the brace nor whitespace
        at[odd[blank]] += step
        odd = odd[data[at[odd]] != char]
    edge = slice(0, 1) if step > 0 else slice(-1, None)
    return all(data[starts[i]:starts[i + 1]].tobytes().strip(_WHITESPACE)[edge] == bytes([char]) for i in odd)


def joined_lines(values: pa.Array) -> tuple[pa.Buffer, int]:
    """(the values, which must hold no nulls, joined by newlines; the longest value's length in bytes)."""
    texts = values if values.type == pa.large_binary() else values.cast(pa.large_binary())
    if not len(texts):
        return pa.py_buffer(b""), 0
    joined = pc.binary_join(pa.LargeListArray.from_arrays(pa.array([0, len(texts)], pa.int64()), texts), _NEWLINE)
    _, offsets, data = joined.buffers()  # the one value's bytes, without the copy a scalar would make
    end = int(np.frombuffer(offsets, dtype=np.int64)[1])
    return data.slice(0, end), pc.max(pc.binary_length(texts)).as_py() or 0


def read_lines(values: pa.Array, parse: pj.ParseOptions | None = None) -> pa.Table:
    """The values (no nulls) as one table, a row for each (ArrowInvalid: some value is not one JSON object).

    ``parse`` may set an explicit schema and what to do with other fields; line breaks inside values
    are always allowed."""
    if not ends_as_objects(values):
        raise pa.ArrowInvalid("a value does not start and end as a JSON object")
    data, longest = joined_lines(values)
    parse = parse or pj.ParseOptions()
    options = pj.ParseOptions(explicit_schema=parse.explicit_schema, newlines_in_values=True,
                              unexpected_field_behavior=parse.unexpected_field_behavior)
    read = pj.ReadOptions(block_size=max(READ_BLOCK_BYTES, 2 * longest + 2), use_threads=False)
    table = pj.read_json(pa.BufferReader(data), read_options=read, parse_options=options)
    if table.num_rows != len(values):  # an empty value or two objects in one
        raise pa.ArrowInvalid(f"{table.num_rows} rows from {len(values)} values")
    return table
