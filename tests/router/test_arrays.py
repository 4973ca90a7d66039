import pyarrow as pa

from router.arrays import one_chunk


def test_one_chunk_shares_a_single_chunk_and_combines_several():
    chunk = pa.array([b"x" * 300] * 100)
    single = one_chunk(pa.chunked_array([chunk]))
    assert single.buffers()[2].address == chunk.buffers()[2].address  # no copy
    several = one_chunk(pa.chunked_array([chunk, pa.array([b"y"])]))
    assert isinstance(several, pa.Array) and several.to_pylist() == [b"x" * 300] * 100 + [b"y"]
    assert one_chunk(chunk) is chunk
    assert one_chunk(pa.chunked_array([], pa.binary())).to_pylist() == []
