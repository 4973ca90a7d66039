"""Shape a decoded Arrow batch like the table it is written to.

The decoded batch has the writer schema's shape; the table may have more
columns (from other topics or older versions), wider types (int -> long) and
renamed fields. Columns are matched by name (optionally case-insensitively) at
every depth, missing ones become nulls, types are cast to the table's. Casts
are only ever widenings here: the evolution plan refused everything else.
"""

from __future__ import annotations

import decimal

import pyarrow as pa
import pyarrow.compute as pc

from registry.arrow_lists import with_values
from router.arrays import one_chunk


def _find(names: list[str], wanted: str, case_sensitive: bool) -> int:
    if case_sensitive:
        return names.index(wanted) if wanted in names else -1
    lowered = [n.lower() for n in names]
    return lowered.index(wanted.lower()) if wanted.lower() in lowered else -1


def _filler(dtype: pa.DataType):
    """A placeholder value for a required field under a null parent (never visible to readers)."""
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return ""
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return b""
    if pa.types.is_fixed_size_binary(dtype):
        return b"\x00" * dtype.byte_width
    if pa.types.is_boolean(dtype):
        return False
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return []
    return 0


def null_array(dtype: pa.DataType, length: int, nullable: bool = True) -> pa.Array:
    """All-null column; required children of a null struct get placeholders so Parquet accepts them."""
    if pa.types.is_struct(dtype):
        children = [null_array(dtype.field(i).type, length, dtype.field(i).nullable) for i in range(dtype.num_fields)]
        mask = pa.array([True] * length) if nullable else None
        return pa.StructArray.from_arrays(children, fields=list(dtype), mask=mask)
    if nullable:
        return pa.nulls(length, dtype)
    if pa.types.is_decimal(dtype):
        return pa.array([decimal.Decimal(0)] * length, dtype)
    if pa.types.is_temporal(dtype) or pa.types.is_floating(dtype):
        base = pa.int32() if pa.types.is_date32(dtype) or dtype == pa.time32("ms") else pa.int64()
        return pa.array([0] * length, base).cast(dtype)
    return pa.array([_filler(dtype)] * length, dtype)


def align_array(array: pa.Array, target: pa.DataType, case_sensitive: bool = True) -> pa.Array:
    array = one_chunk(array)
    source = array.type
    if source == target:
        return array
    if pa.types.is_struct(target) and pa.types.is_struct(source):
        names = [source.field(i).name for i in range(source.num_fields)]
        children = []
        for i in range(target.num_fields):
            tf = target.field(i)
            j = _find(names, tf.name, case_sensitive)
            if j < 0:
                children.append(null_array(tf.type, len(array), tf.nullable))
            else:
                children.append(align_array(array.field(j), tf.type, case_sensitive))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if (pa.types.is_list(target) or pa.types.is_large_list(target)) and (
            pa.types.is_list(source) or pa.types.is_large_list(source)):
        return with_values(array, align_array(array.flatten(), target.value_type, case_sensitive), target)
    if pa.types.is_map(target) and pa.types.is_map(source):
        keys = align_array(array.keys, target.key_type, case_sensitive)
        items = align_array(array.items, target.item_type, case_sensitive)
        return pa.MapArray.from_arrays(array.offsets, keys, items, type=target,
                                       mask=array.is_null() if array.null_count else None)
    return pc.cast(array, target)


def align_table(batch: pa.Table | pa.RecordBatch, target: pa.Schema, case_sensitive: bool = True) -> pa.Table:
    """A table with exactly the target schema's columns (in order), values taken from `batch` by name."""
    names = list(batch.schema.names)
    columns = []
    for field in target:
        j = _find(names, field.name, case_sensitive)
        if j < 0:
            columns.append(null_array(field.type, batch.num_rows, True))
        else:
            columns.append(align_array(batch.column(j), field.type, case_sensitive))
    return pa.Table.from_arrays(columns, schema=target)
