"""A column of JSON values joined as newline-delimited JSON (registry/ndjson.py): the block pyarrow's
JSON reader gets from the inferred JSON and Kafka Connect decoders."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.json as pj

from registry.ndjson import has_line_breaks, joined_lines


def lines(values: pa.Array) -> tuple[bytes, int]:
    data, longest = joined_lines(values)
    return data.to_pybytes(), longest


def test_values_are_joined_in_order_with_the_longest_length():
    assert lines(pa.array([b'{"a": 1}', b'{"b": [1, 2]}', b"{}"], pa.binary())) == (
        b'{"a": 1}\n{"b": [1, 2]}\n{}', 13)
    assert lines(pa.array(['{"a": 1}'], pa.large_string())) == (b'{"a": 1}', 8)
    assert lines(pa.array([], pa.binary())) == (b"", 0)


def test_line_breaks_between_tokens_are_blanked_so_each_value_stays_one_line():
    pretty = pa.array([b'{\n  "a": 1,\r\n  "b": "x"\n}', b'{"a": 2}'], pa.binary())
    assert has_line_breaks(pretty)
    data, _ = joined_lines(pretty)
    assert data.to_pybytes() == b'{   "a": 1,    "b": "x" }\n{"a": 2}'
    table = pj.read_json(pa.BufferReader(data))
    assert table.to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]


def test_a_slice_joins_its_own_values_only():
    values = pa.array([b'{"a": 0}', b'{"a": 1}', b'{"a": 2}', b'{"a": 3}'], pa.binary()).slice(1, 2)
    assert lines(values) == (b'{"a": 1}\n{"a": 2}', 8)


def test_no_line_break_is_found_in_compact_json():
    assert not has_line_breaks(pa.array([b'{"a": "x y"}', b"[1,2]"], pa.binary()))
    assert not has_line_breaks(pa.array([b""], pa.binary()))


def test_a_slice_is_scanned_for_line_breaks_alone():
    """A topic's rows are a slice of the task's whole column: the others' bytes are not its own."""
    column = pa.array([b'{\n"a": 1}', b'{"a": 2}', b'{"a": 3}', b'{"a":\r4}'], pa.binary())
    assert [has_line_breaks(column.slice(i, 1)) for i in range(4)] == [True, False, False, True]
    assert not has_line_breaks(column.slice(1, 2)) and not has_line_breaks(column.cast(pa.large_binary()).slice(1, 2))
    assert has_line_breaks(column.slice(2, 2))
