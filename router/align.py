"""Shape a decoded Arrow batch like the table it is written to.

The decoded batch has the writer schema's shape; the table may have more
columns (from other topics or older versions), wider types (int -> long) and
renamed fields. Columns are matched by name (optionally case-insensitively) at
every depth, missing ones become nulls, types are cast to the table's. Casts
are only ever widenings here: the evolution plan refused everything else.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc


def _find(names: list[str], wanted: str, case_sensitive: bool) -> int:
    if case_sensitive:
        return names.index(wanted) if wanted in names else -1
    lowered = [n.lower() for n in names]
    return lowered.index(wanted.lower()) if wanted.lower() in lowered else -1


def align_array(array: pa.Array, target: pa.DataType, case_sensitive: bool = True) -> pa.Array:
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
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
                children.append(pa.nulls(len(array), tf.type))
            else:
                children.append(align_array(array.field(j), tf.type, case_sensitive))
        return pa.StructArray.from_arrays(children, fields=list(target), mask=array.is_null())
    if (pa.types.is_list(target) or pa.types.is_large_list(target)) and (
            pa.types.is_list(source) or pa.types.is_large_list(source)):
        values = align_array(array.flatten(), target.value_type, case_sensitive)
        offsets = array.offsets
        if offsets[0].as_py():
            offsets = pc.subtract(offsets, offsets[0])
        cls = pa.LargeListArray if pa.types.is_large_list(target) else pa.ListArray
        return cls.from_arrays(offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32()), values,
                               type=target, mask=array.is_null() if array.null_count else None)
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
            columns.append(pa.nulls(batch.num_rows, field.type))
        else:
            columns.append(align_array(batch.column(j), field.type, case_sensitive))
    return pa.Table.from_arrays(columns, schema=target)
