"""An upsert table's sequence_by across batches: the stored row's value decides.

Within a batch the last change per key is chosen by its sequence value
(router/changes/dedup.py). Across batches a change may arrive after a newer one
was committed: fan-in of several CDC topics into one table, or a repartitioned
topic. So each row keeps its sequence value (router/decisions.py
`with_sequence_column`), and at commit, on the snapshot the commit builds on
(a lost swap looks again, so the verdict is never stale), a key whose live row
holds a higher sequence value than the batch's last change keeps its row: the
row is not deleted, and the batch's image of that key, already written to a
new data file of this commit, is deleted by position in the same snapshot
(a position delete applies to data files of its own snapshot). Equal values:
the later read wins, as within a batch. A row or change without a value
(written before sequence_by was set, a tombstone) never blocks.
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

__all__ = ["stale_keys", "rows_of_keys"]


def _read(table, path: str, columns: Sequence[str]) -> pa.Table | None:
    """`columns` of one data file, by name; None when the file predates one of them."""
    with table.io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        names = set(parquet.schema_arrow.names)
        if not set(columns) <= names:
            return None
        return parquet.read(columns=list(columns))


def _key(row: dict, key_columns: Sequence[str]) -> tuple:
    return tuple(row[c] for c in key_columns)


def stale_keys(table, located: pa.Table, key_columns: Sequence[str], column: str, touched: pa.Table,
               sequences: pa.Array) -> set[tuple]:
    """Keys (tuples of key values) whose live row holds a higher sequence value than the batch's change."""
    incoming = {_key(r, key_columns): s for r, s in zip(touched.select(list(key_columns)).to_pylist(),
                                                        sequences.to_pylist()) if s is not None}
    if not incoming or located.num_rows == 0:
        return set()
    stale: set[tuple] = set()
    paths = pc.unique(located.column("file_path")).to_pylist()
    for path in paths:
        here = located.filter(pc.equal(located.column("file_path"), path))
        stored = _read(table, path, [column])
        if stored is None:
            continue
        values = stored.column(column).take(here.column("pos")).to_pylist()
        for row, value in zip(here.select(list(key_columns)).to_pylist(), values):
            key = _key(row, key_columns)
            mine = incoming.get(key)
            if value is not None and mine is not None and _newer(value, mine):
                stale.add(key)
    return stale


def _newer(stored, incoming) -> bool:
    try:
        return stored > incoming
    except TypeError:  # values that do not compare (a column whose type changed): the batch wins
        return False


def rows_of_keys(table, data_files: Iterable, key_columns: Sequence[str], keys: set[tuple]) -> pa.Table:
    """(file_path, pos) of the rows of `keys` in the given (new) data files."""
    paths, positions = [], []
    for f in data_files:
        columns = _read(table, f.file_path, key_columns)
        if columns is None:
            continue
        for pos, row in enumerate(columns.to_pylist()):
            if _key(row, key_columns) in keys:
                paths.append(f.file_path)
                positions.append(pos)
    return pa.table({"file_path": pa.array(paths, pa.string()), "pos": pa.array(positions, pa.int64())})
