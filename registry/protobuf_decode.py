"""Framed Protobuf values -> Arrow, per message of a registered schema.

Every value is ``<wire prefix><message indexes><protobuf payload>``. ``split_messages``
reads the message indexes of a batch (the common ``[0]`` is one byte) and groups the
rows by the message they name; ``ProtobufDecoder`` decodes the rows of one message:
each payload is parsed by protobuf's upb parser (a truncated or malformed payload fails
alone, with protobuf's reason), then the parsed messages are turned into Arrow column
by column (registry/protobuf_arrow.py). Should the column-wise step fail, the
per-record path takes the rows one by one and fails only the rows that do not convert.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from registry.exceptions import DecodeError
from registry.protobuf_arrow import StructBuilder, record_converter
from registry.protobuf_schema import ProtobufFile, read_message_indexes

__all__ = ["ProtobufDecoder", "split_messages"]

REASON_LIMIT = 500


def _indexes(value: bytes, skip: int) -> tuple[tuple[int, ...], int]:
    if len(value) > skip and value[skip] == 0:
        return (0,), skip + 1
    return read_message_indexes(value, skip)


def split_messages(framed: pa.Array, skip: int
                   ) -> tuple[dict[tuple[int, ...], list[int]], list[tuple[int, str]]]:
    """Row positions per message-index list, and [(position, reason)] of unreadable lists."""
    groups: dict[tuple[int, ...], list[int]] = {}
    bad: list[tuple[int, str]] = []
    for pos, value in enumerate(framed.to_pylist()):
        try:
            idx, _ = _indexes(value, skip)
        except DecodeError as exc:
            bad.append((pos, exc.reason))
            continue
        groups.setdefault(idx, []).append(pos)
    return groups, bad


class ProtobufDecoder:
    """Decodes payloads of one message of one registered schema."""

    def __init__(self, file: ProtobufFile, indexes: tuple[int, ...], arrow_schema: pa.Schema,
                 columnar: bool = True) -> None:
        self.file = file
        self.indexes = tuple(indexes)
        self.descriptor = file.message(self.indexes)
        self.cls = file.message_class(self.descriptor)
        self.arrow_schema = arrow_schema
        self.struct_type = pa.struct(list(arrow_schema))
        self.columnar = columnar
        self.builder = StructBuilder(self.descriptor, self.struct_type)
        self.to_record = record_converter(self.descriptor)
        self.stats = {"columnar_errors": 0, "per_record_rows": 0}

    def parse(self, framed: pa.Array, skip: int) -> tuple[list, list[int], list[tuple[int, str]]]:
        """(parsed messages, their positions, [(position, reason)])."""
        parse = self.cls.FromString
        want = self.indexes
        msgs, ok, bad = [], [], []
        for pos, value in enumerate(framed.to_pylist()):
            try:
                if len(value) > skip and value[skip] == 0 and want == (0,):
                    start = skip + 1
                else:
                    idx, start = read_message_indexes(value, skip)
                    if idx != want:
                        raise DecodeError(f"message index {list(idx)} is not {self.descriptor.full_name} "
                                          f"{list(want)}")
                msgs.append(parse(memoryview(value)[start:]))
                ok.append(pos)
            except DecodeError as exc:
                bad.append((pos, exc.reason[:REASON_LIMIT]))
            except Exception as exc:  # protobuf's DecodeError and friends: this payload only
                bad.append((pos, f"{type(exc).__name__}: {exc}"[:REASON_LIMIT]))
        return msgs, ok, bad

    def batch_of(self, msgs: list) -> pa.RecordBatch:
        """Column-wise: every message of ``msgs`` in one batch."""
        return pa.RecordBatch.from_arrays(self.builder.arrays(msgs), schema=self.arrow_schema)

    def records_of(self, msgs: list) -> pa.RecordBatch:
        """Per record: one dict a message, then one Arrow conversion."""
        arr = pa.array([self.to_record(m) for m in msgs], type=self.struct_type)
        return pa.RecordBatch.from_struct_array(arr).cast(self.arrow_schema)

    def decode(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray,
                                                          list[tuple[int, str]]]:
        """(batch of good rows, their positions in ``framed``, [(position, reason)])."""
        msgs, ok, bad = self.parse(framed, skip)
        if self.columnar:
            try:
                return self.batch_of(msgs), np.asarray(ok, dtype=np.int64), bad
            except (pa.ArrowException, ValueError, TypeError, OverflowError):
                self.stats["columnar_errors"] += 1
        self.stats["per_record_rows"] += len(msgs)
        try:
            return self.records_of(msgs), np.asarray(ok, dtype=np.int64), bad
        except (pa.ArrowException, ValueError, TypeError, OverflowError):
            pass
        keep, keep_ok = [], []
        for pos, m in zip(ok, msgs):
            try:
                self.records_of([m])
            except (pa.ArrowException, ValueError, TypeError, OverflowError) as exc:
                bad.append((pos, f"arrow conversion: {exc}"[:REASON_LIMIT]))
                continue
            keep.append(m)
            keep_ok.append(pos)
        return self.records_of(keep), np.asarray(keep_ok, dtype=np.int64), sorted(bad)

    def decode_one(self, value: bytes, skip: int = 5) -> dict:
        """Per-record decode of one framed value to a Python dict (tests, tools)."""
        batch, _, bad = self.decode_records(pa.array([value], pa.binary()), skip)
        if bad:
            raise DecodeError(bad[0][1])
        return batch.to_pylist()[0]

    def decode_records(self, framed: pa.Array, skip: int) -> tuple[pa.RecordBatch, np.ndarray, list]:
        """The per-record path for a whole batch (the reference the column-wise path is tested against)."""
        msgs, ok, bad = self.parse(framed, skip)
        return self.records_of(msgs), np.asarray(ok, dtype=np.int64), bad
