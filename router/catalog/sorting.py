"""Rows ordered by a table's sort order before they go into a data file.

Why here (shared): the executors' appends, small-file merges and compaction all write
data files, and a file that claims the table's ``sort_order_id`` must be sorted by it
as a whole, whichever path wrote it. Engines use that claim (and the tighter column
statistics sorting gives) to skip files and row groups.

Each sort field becomes two keys: "is null" (descending puts nulls first) and the
value after the field's transform (``day(ts)`` sorts by day, ties stay in input order:
Arrow's sort is stable), so nulls go first or last per field as the order says.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.io.pyarrow import _get_field_from_arrow_table
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import NullOrder, SortDirection, SortOrder
from pyiceberg.transforms import IdentityTransform

__all__ = ["sort_rows", "sort_indices"]


def sort_indices(data: pa.Table, schema: Schema, order: SortOrder) -> pa.Array | None:
    """The row order ``order`` gives ``data`` (whose columns are named as the table's); None: keep it."""
    if order.is_unsorted or data.num_rows < 2:
        return None
    keys: dict[str, pa.Array] = {}
    sort_keys = []
    for i, f in enumerate(order.fields):
        column = _get_field_from_arrow_table(data, schema.find_column_name(f.source_id))
        if not isinstance(f.transform, IdentityTransform):
            column = f.transform.pyarrow_transform(schema.find_field(f.source_id).field_type)(column)
        keys[f"n{i}"] = pc.is_null(column, nan_is_null=False)
        sort_keys.append((f"n{i}", "descending" if f.null_order == NullOrder.NULLS_FIRST else "ascending"))
        keys[f"v{i}"] = column
        sort_keys.append((f"v{i}", "descending" if f.direction == SortDirection.DESC else "ascending"))
    return pc.sort_indices(pa.table(keys), sort_keys=sort_keys)


def sort_rows(data: pa.Table, schema: Schema, order: SortOrder) -> pa.Table:
    """``data`` in the order ``order`` gives it (unchanged for an unsorted order)."""
    indices = sort_indices(data, schema, order)
    return data if indices is None else data.take(indices)
