"""A column of JSON values read as one block of lines (registry/ndjson.py): the block pyarrow's JSON
reader gets from the inferred JSON and Kafka Connect decoders, and the check that each row is
exactly its own value."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.json as pj
import pytest

from registry.json_infer import infer_json
from registry.ndjson import ends_as_objects, joined_lines, read_lines


def lines(values: pa.Array) -> tuple[bytes, int]:
    data, longest = joined_lines(values)
    return data.to_pybytes(), longest


def test_values_are_joined_in_order_with_the_longest_length():
    assert lines(pa.array([b'{"a": 1}', b'{"b": [1, 2]}', b"{}"], pa.binary())) == (
        b'{"a": 1}\n{"b": [1, 2]}\n{}', 13)
    assert lines(pa.array(['{"a": 1}'], pa.large_string())) == (b'{"a": 1}', 8)
    assert lines(pa.array([], pa.binary())) == (b"", 0)


def test_a_slice_joins_its_own_values_only():
    values = pa.array([b'{"a": 0}', b'{"a": 1}', b'{"a": 2}', b'{"a": 3}'], pa.binary()).slice(1, 2)
    assert lines(values) == (b'{"a": 1}\n{"a": 2}', 8)


def test_pretty_printed_values_read_as_one_row_each():
    pretty = pa.array([b'{\n  "a": 1,\r\n  "b": "x"\n}\n', b'{"a": 2}'], pa.binary())
    assert read_lines(pretty).to_pylist() == [{"a": 1, "b": "x"}, {"a": 2, "b": None}]


def test_a_line_break_inside_a_string_is_refused_not_blanked():
    with pytest.raises(pa.ArrowInvalid):
        read_lines(pa.array([b'{"a": "x\ny"}'], pa.binary()))


@pytest.mark.parametrize("values", [
    [b'{"a":1', b'}{"a":3}'],               # two broken values that join into two good objects
    [b'{"a":1', b'}', b'{"a":2}'],
    [b'{"k":"}', b'{", "z":1}{}'],          # a string left open at a value's end
    [b'{"a": 1}', b""],
    [b'{"a": 1}{"a": 2}', b'{"a": 3}'],     # two objects in one value
    [b'{"a":[{}', b'],"b":1}', b'{}{}'],    # a value that closes another's array, and two objects in one
])
def test_values_that_are_not_one_object_each_are_refused(values):
    with pytest.raises(pa.ArrowInvalid):
        read_lines(pa.array(values, pa.binary()))


def test_broken_values_that_join_into_good_objects_fail_on_their_own():
    """Before the check, the first case landed as two rows {a: 1} and {a: 3}."""
    groups, bad = infer_json(pa.array([b'{"a":1', b'}{"a":3}', b'{"a": 5}'], pa.binary()))
    assert [(batch.to_pylist(), positions.tolist()) for _, batch, positions in groups] == [([{"a": 5}], [2])]
    assert [position for position, *_ in bad] == [0, 1]


def test_ends_as_objects_looks_past_whitespace_at_both_ends_and_at_a_slice_only():
    column = pa.array([b'{"a": 0}', b' \n{"a": 1} \r\n', b'[1]', b'{"a": 3}\t'], pa.binary())
    assert ends_as_objects(column.slice(0, 2)) and ends_as_objects(column.slice(3, 1))
    assert not ends_as_objects(column) and not ends_as_objects(column.slice(2, 1))
    assert ends_as_objects(column.cast(pa.large_binary()).slice(0, 2))
    assert not ends_as_objects(pa.array([b"   "], pa.binary()))
    assert ends_as_objects(pa.array([], pa.binary()))


def test_values_with_trailing_line_breaks_or_long_blank_tails_end_as_objects():
    lines = pa.array([b'{"a": %d}\n' % i for i in range(1000)], pa.binary())
    assert ends_as_objects(lines) and read_lines(lines).column("a").to_pylist() == list(range(1000))
    assert ends_as_objects(pa.array([b'{"a": 1}' + b" " * 10, b'{"a": 2}\r\n'], pa.binary()))
    assert not ends_as_objects(pa.array([b'{"a": 1}' + b" " * 10 + b"x", b'{"a": 2}\n'], pa.binary()))
    assert not ends_as_objects(pa.array([b'{"a": 1}\n', b"  \n"], pa.binary()))
    assert not ends_as_objects(pa.array([b'{"a": 1}\n', b"1\n"], pa.binary()))
    assert not ends_as_objects(pa.array([b'{"a": 1}', b'],"b":1}'], pa.binary()))  # starts with no "{"
    assert ends_as_objects(pa.array([b" " * 10 + b'{"a": 1}', b'\n{"a": 2}'], pa.binary()))
    assert not ends_as_objects(pa.array([b" " * 10 + b'x{"a": 1}', b'\n{"a": 2}'], pa.binary()))
    assert ends_as_objects(pa.array(['{"a": 1}', ' {"é": 2}'], pa.large_string()))


def test_an_explicit_schema_reads_its_fields_and_ignores_others_when_asked():
    values = pa.array([b'{"a": 1, "b": "x"}', b'{"a": 2}'], pa.binary())
    parse = pj.ParseOptions(explicit_schema=pa.schema([("a", pa.int32())]), unexpected_field_behavior="ignore")
    table = read_lines(values, parse)
    assert table.schema == pa.schema([("a", pa.int32())]) and table.column("a").to_pylist() == [1, 2]
