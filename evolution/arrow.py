"""Iceberg schema -> Arrow schema: the exact shape decoded batches are cast to.

Built on pyiceberg's ``schema_to_pyarrow`` (without field-id metadata, so the
result depends only on names and types, not on which table ids a schema got):
string -> ``large_string``, binary -> ``large_binary``, list -> ``large_list``
(pyiceberg's own choice, and what polars emits, so no offset rewrite is needed),
timestamptz -> ``timestamp('us', tz='UTC')``, timestamp -> ``timestamp('us')``,
time -> ``time64('us')``, decimal -> ``decimal128(p, s)``, fixed ->
``fixed_size_binary(n)``. Results are cached per schema (structural key).
"""
from __future__ import annotations

from functools import lru_cache

import pyarrow as pa
from pyiceberg.io.pyarrow import schema_to_pyarrow
from pyiceberg.schema import Schema

from evolution.variant_type import install

__all__ = ["iceberg_to_arrow"]


install()  # a schema with a variant column converts (evolution/variant_type.py)


@lru_cache(maxsize=1024)
def _cached(schema_json: str) -> pa.Schema:
    return schema_to_pyarrow(Schema.model_validate_json(schema_json), include_field_ids=False)


def iceberg_to_arrow(schema: Schema) -> pa.Schema:
    """Arrow schema for an Iceberg schema; equal schemas give the identical object."""
    return _cached(schema.model_dump_json())
