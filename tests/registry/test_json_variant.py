"""Unframed JSON kept as variant columns (registry/json_variant.py) through ``decode_unframed``, the
function the job and `icerouter plan` both decode with: the whole value, or named fields beside the
inferred rest; what is refused; a missing field against a JSON null."""

from __future__ import annotations

import orjson
import pyarrow as pa
from pyiceberg.types import LongType, StringType

from evolution.variant_type import VariantType
from registry.formats import ValueFormat
from registry.unframed import decode_unframed
from tests.registry.variant_decoder import decode_variant

WHOLE = ValueFormat("json", variant_column="doc")
FIELDS = ValueFormat("json", variant=("payload", "attrs"))


def values(*docs) -> pa.Array:
    return pa.array([d if d is None or isinstance(d, bytes) else orjson.dumps(d) for d in docs], pa.binary())


def variants(batch: pa.RecordBatch, column: str) -> list:
    out = []
    for v in batch.column(column).to_pylist():
        out.append("<missing>" if v is None else decode_variant(v["metadata"], v["value"]))
    return out


def test_the_whole_value_is_one_variant_column_whatever_its_shape():
    docs = [{"a": 1}, [1, "x"], "text", 42, {"a": {"deep": [None, 1.5]}}]
    result = decode_unframed(None, WHOLE, values(*docs, b"{not json", None))
    [group] = result.groups
    assert [(f.name, type(f.field_type)) for f in group.artifacts.iceberg_schema.fields] == [("doc", VariantType)]
    assert group.indices.tolist() == [0, 1, 2, 3, 4]
    assert variants(group.batch, "doc") == docs
    assert [(f.index, f.error_class) for f in result.failures] == [(5, "decode_error"), (6, "tombstone")]


def test_named_fields_are_variants_beside_the_inferred_rest():
    docs = [{"id": 1, "payload": {"x": 1}, "attrs": ["a"]},
            {"id": 2, "payload": "now a string", "attrs": None},
            {"id": 3, "payload": [1, {"y": True}]}]
    result = decode_unframed(None, FIELDS, values(*docs))
    [group] = result.groups  # the payload's drift does not split the batch: it is one variant column
    schema = group.artifacts.iceberg_schema
    assert [(f.name, type(f.field_type)) for f in schema.fields] == [
        ("id", LongType), ("payload", VariantType), ("attrs", VariantType)]
    assert group.batch.column("id").to_pylist() == [1, 2, 3]
    assert variants(group.batch, "payload") == [{"x": 1}, "now a string", [1, {"y": True}]]
    assert variants(group.batch, "attrs") == [["a"], None, "<missing>"]  # JSON null is a variant null
    assert not result.failures


def test_named_fields_refuse_what_is_not_an_object_and_keep_the_rest_typed():
    result = decode_unframed(None, FIELDS, values({"id": 1, "payload": 1}, [1], {"id": "x", "payload": 2}))
    assert [(f.index, f.reason) for f in result.failures] == [(1, "a JSON array where an object was expected")]
    kinds = sorted((g.indices.tolist(), type(g.artifacts.iceberg_schema.find_field("id").field_type).__name__)
                   for g in result.groups)
    assert kinds == [([0], LongType.__name__), ([2], StringType.__name__)]  # the rest is inferred as before


def test_integers_beyond_64_bits_arrive_as_doubles():
    """orjson parses them as floats, as the inferred columns read them: the variant holds a double."""
    result = decode_unframed(None, FIELDS, values(b'{"id": 1, "payload": 123456789012345678901234567890}'))
    [group] = result.groups
    assert variants(group.batch, "payload") == [1.2345678901234568e29]


def test_records_without_any_other_field_still_land():
    result = decode_unframed(None, FIELDS, values({"payload": {"a": 1}}))
    [group] = result.groups
    assert [f.name for f in group.artifacts.iceberg_schema.fields] == ["payload", "attrs"]
    assert variants(group.batch, "payload") == [{"a": 1}]
