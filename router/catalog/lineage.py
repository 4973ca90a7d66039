"""Row lineage of rows that move to another data file (compaction, small-file merges) on a v3 table.

A v3 table gives each row a ``_row_id`` and a ``_last_updated_sequence_number``.
A row first written leaves both null in its file: readers take its data file's
``first_row_id`` plus its position, and the file's data sequence number. A
rewrite moves rows to new files at new positions under a new sequence number,
so it must write the values the rows had (the spec's "Row Lineage": an existing
non-null value is copied; a row the rewrite does not modify keeps its sequence
number). These functions compute them per batch read, and attach them to the
batches the rewrite writes as the two reserved columns (field ids 2147483540 and
2147483539), which router/catalog/datafiles.py writes with their field ids.
A file of a table upgraded from v2 whose snapshot assigned no row ids yet has no
``first_row_id``: its rows' ``_row_id`` stays null, as the spec reads it.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyiceberg.conversions import to_bytes
from pyiceberg.types import LongType

from router.catalog.file_stats import BOUNDS, StatColumn
from router.catalog.format_v3 import LAST_UPDATED, LAST_UPDATED_FIELD, ROW_ID, ROW_ID_FIELD

FIELD_ID = b"PARQUET:field_id"
LINEAGE_FIELDS = (pa.field(ROW_ID, pa.int64(), nullable=True, metadata={FIELD_ID: str(ROW_ID_FIELD).encode()}),
                  pa.field(LAST_UPDATED, pa.int64(), nullable=True,
                           metadata={FIELD_ID: str(LAST_UPDATED_FIELD).encode()}))
LINEAGE_NAMES = (ROW_ID, LAST_UPDATED)


def _long(value) -> bytes:
    return to_bytes(LongType(), value)


#: Parquet column path -> statistics of the lineage columns (counts and bounds, as for a long column).
LINEAGE_STAT_COLUMNS = {name: StatColumn(fid, BOUNDS, LongType(), name, "INT64", None, _long, _long)
                        for name, fid in ((ROW_ID, ROW_ID_FIELD), (LAST_UPDATED, LAST_UPDATED_FIELD))}


def tracks_lineage(metadata) -> bool:
    """Whether rewrites of this table carry row lineage (format v3 and later)."""
    return int(metadata.format_version) >= 3


def stored_lineage_columns(arrow_schema: pa.Schema) -> dict[int, str]:
    """field id -> column name of the lineage columns a data file stores (a rewrite wrote them)."""
    out = {}
    for f in arrow_schema:
        if f.metadata and f.metadata.get(FIELD_ID) in (str(ROW_ID_FIELD).encode(), str(LAST_UPDATED_FIELD).encode()):
            out[int(f.metadata[FIELD_ID])] = f.name
    return out


def lineage_of(batch: pa.RecordBatch, start: int, first_row_id: int | None, data_sequence: int,
               stored: dict[int, str]) -> tuple[pa.Array, pa.Array]:
    """(_row_id, _last_updated_sequence_number) of the rows of `batch`, the rows at positions
    start.. of their file: the stored values where the file has them, else inherited."""
    n = batch.num_rows
    if first_row_id is not None:
        inherited = pa.array(np.arange(start, start + n, dtype=np.int64) + first_row_id, pa.int64())
    else:
        inherited = pa.nulls(n, pa.int64())
    row_ids = _stored_or(batch, stored.get(ROW_ID_FIELD), inherited)
    sequences = _stored_or(batch, stored.get(LAST_UPDATED_FIELD), pa.array(np.full(n, data_sequence, np.int64)))
    return row_ids, sequences


def _stored_or(batch: pa.RecordBatch, name: str | None, inherited: pa.Array) -> pa.Array:
    if name is None:
        return inherited
    stored = batch.column(batch.schema.get_field_index(name)).cast(pa.int64())
    return pc.coalesce(stored, inherited)


def with_lineage(batch: pa.RecordBatch, row_ids: pa.Array, sequences: pa.Array) -> pa.RecordBatch:
    """`batch` (already the table's rows) with the two lineage columns appended."""
    return pa.RecordBatch.from_arrays([*batch.columns, row_ids, sequences],
                                      schema=pa.schema([*batch.schema, *LINEAGE_FIELDS], metadata=batch.schema.metadata))


def split_lineage(rows: pa.Table) -> tuple[pa.Table, pa.Table | None]:
    """(the table's columns, the lineage columns or None) of rows a rewrite hands to the file writer."""
    if ROW_ID not in rows.column_names:
        return rows, None
    lineage = rows.select(list(LINEAGE_NAMES))
    return rows.drop_columns(list(LINEAGE_NAMES)), lineage


def attach_lineage(data: pa.Table, lineage: pa.Table) -> pa.Table:
    """The file's table with the lineage columns and their reserved field ids."""
    columns = [*data.columns, *(lineage.column(n).cast(pa.int64()) for n in LINEAGE_NAMES)]
    return pa.Table.from_arrays(columns, schema=pa.schema([*data.schema, *LINEAGE_FIELDS], metadata=data.schema.metadata))
