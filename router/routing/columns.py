"""The values routes look at, as whole columns: header values and (nested) decoded fields."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from router.arrays import one_chunk


def header_values(headers: pa.Array, name: str) -> list[str | None]:
    """The (last) value of header `name` per row, as text; None when absent or not UTF-8."""
    out: list[str | None] = []
    for entry in headers.to_pylist():
        value = None
        for h in entry or ():
            if h["key"] == name and h["value"] is not None:
                try:
                    value = h["value"].decode("utf-8")
                except UnicodeDecodeError:
                    value = None
        out.append(value)
    return out


def field_column(batch: pa.RecordBatch | pa.Table, path: str) -> pa.Array | None:
    """The column at a dotted path (`customer.id`), None when the writer schema lacks it."""
    column: Any = batch
    for part in path.split("."):
        names = column.schema.names if hasattr(column, "schema") else [column.type.field(i).name for i in range(column.type.num_fields)]
        if part not in names:
            return None
        column = column.column(part) if hasattr(column, "schema") else pc.struct_field(column, part)
    return one_chunk(column)
