"""The pyiceberg 0.12 shim for Iceberg's variant type (evolution/variant_type.py): parsing and
serialising schemas, Arrow conversion both ways, the statistics plan, and evolution treating a variant
as a leaf. A pyiceberg upgrade that moves any patched name fails here first."""

from __future__ import annotations

import json

import pyarrow as pa
import pyiceberg
import pytest
from pyiceberg.io.pyarrow import (
    compute_statistics_plan, parquet_path_to_id_mapping, pyarrow_to_schema, schema_to_pyarrow,
)
from pyiceberg.schema import Schema
from pyiceberg.types import ListType, LongType, NestedField

from evolution.layout import usable_partition_terms, usable_sort_terms
from evolution.plan import plan_evolution
from evolution.policy import EvolutionPolicy
from evolution.variant_type import PYICEBERG_TESTED, VARIANT_ARROW, VariantType, install

install()  # what importing router.catalog or evolution.arrow does

SCHEMA_JSON = {"type": "struct", "schema-id": 0, "fields": [
    {"id": 1, "name": "id", "type": "long", "required": False},
    {"id": 2, "name": "doc", "type": "variant", "required": False},
    {"id": 3, "name": "many", "type": {"type": "list", "element-id": 4, "element": "variant",
                                       "element-required": False}, "required": False}]}


def test_written_for_this_pyiceberg():
    assert pyiceberg.__version__ == PYICEBERG_TESTED


def test_schema_with_variant_parses_and_serialises():
    schema = Schema.model_validate_json(json.dumps(SCHEMA_JSON))
    assert isinstance(schema.find_field("doc").field_type, VariantType)
    assert isinstance(schema.find_field("many").field_type.element_type, VariantType)
    assert json.loads(schema.model_dump_json())["fields"] == SCHEMA_JSON["fields"]
    assert str(VariantType()) == "variant" and VariantType().minimum_format_version() == 3


def test_arrow_conversion_both_ways():
    schema = Schema.model_validate_json(json.dumps(SCHEMA_JSON))
    arrow = schema_to_pyarrow(schema)
    assert arrow.field("doc").type == VARIANT_ARROW
    assert pyarrow_to_schema(arrow) == schema  # a data file's schema: the group has an id, its leaves none
    plain = schema_to_pyarrow(schema, include_field_ids=False)
    assert pyarrow_to_schema(plain, name_mapping=schema.name_mapping) == schema  # a batch's, mapped by name


def test_a_struct_of_metadata_and_value_with_ids_stays_a_struct():
    ids = lambda i: {b"PARQUET:field_id": str(i)}  # noqa: E731
    struct = pa.struct([pa.field("metadata", pa.binary(), False, ids(2)),
                        pa.field("value", pa.binary(), False, ids(3))])
    schema = pyarrow_to_schema(pa.schema([pa.field("s", struct, metadata=ids(1))]))
    assert schema.find_field("s").field_type.is_struct


def test_statistics_plan_counts_sizes_only():
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "doc", VariantType()))
    paths = parquet_path_to_id_mapping(schema)
    assert paths == {"id": 1, "doc.metadata": 2, "doc.value": 2}
    plan = compute_statistics_plan(schema, {})
    assert plan[2].mode.type.value == "none" and plan[1].mode.type.value != "none"


@pytest.mark.parametrize("incoming, change", [(VariantType(), None), (LongType(), "type_change")])
def test_evolution_treats_variant_as_a_leaf(incoming, change):
    current = Schema(NestedField(1, "doc", VariantType()))
    plan = plan_evolution(current, [Schema(NestedField(1, "doc", incoming))], EvolutionPolicy(), table="t")
    assert plan.changes == ()
    assert [v.kind for v in plan.violations] == ([change] if change else [])


def test_a_new_variant_column_is_added_whole():
    current = Schema(NestedField(1, "id", LongType()))
    incoming = Schema(NestedField(1, "id", LongType()), NestedField(2, "attrs", ListType(3, VariantType())))
    plan = plan_evolution(current, [incoming], EvolutionPolicy(), table="t")
    assert [c.describe() for c in plan.changes] == ["+ attrs: optional list<variant>"]


def test_a_variant_column_is_never_a_partition_or_sort_term():
    """pyiceberg's identity transform takes any primitive; the spec partitions and sorts by no variant."""
    schema = Schema(NestedField(1, "id", LongType()), NestedField(2, "doc", VariantType()))
    notes: list[str] = []
    assert [t.column for t in usable_partition_terms(schema, ["identity(doc)", "bucket(4, id)"], notes)] == ["id"]
    assert [t.term.column for t in usable_sort_terms(schema, ["doc", "id"], notes)] == ["id"]
    assert all("a variant column cannot be" in n for n in notes) and len(notes) == 2
