"""Arrow helpers shared by the executor and the driver."""

from __future__ import annotations

import pyarrow as pa


def one_chunk(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    """The values as one Array, copying only when there are several chunks.

    ``ChunkedArray.combine_chunks()`` copies even a single chunk (pyarrow 26):
    on the write path that was a copy of every payload and every text column.
    """
    if isinstance(values, pa.ChunkedArray):
        return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    return values
