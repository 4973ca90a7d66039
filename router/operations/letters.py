"""Reading the dead-letter table: a selection of letters, and their counts by reason, table, topic.

Why here: `icerouter status` counts the letters by reason and `icerouter dlq list / summary`
shows them; both read the table through pyiceberg, which applies the table's position deletes
(a letter removed is gone for both).
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import NoSuchTableError

from router.catalog import load_table

#: the letter columns `dlq list` shows (the record's bytes stay in the table)
LIST_COLUMNS = ("topic", "partition", "offset", "error_class", "reason", "table_name", "route", "schema_id",
                "failed_at")


@dataclass(frozen=True)
class Selection:
    """Which letters: every given criterion must hold (none given: all of them).
    `reason` is the letter's error class (`unmatched`, `evolution_violation`, ...), as in metrics."""

    reason: str | None = None
    table: str | None = None
    topic: str | None = None
    since: dt.datetime | None = None  # failed_at >= since
    until: dt.datetime | None = None  # failed_at < until
    job: str | None = None  # letters the job of this name wrote (jobs may share a dead-letter table)

    def describe(self) -> str:
        parts = [f"{k}={v}" for k, v in (("reason", self.reason), ("table", self.table), ("topic", self.topic),
                                         ("since", self.since), ("until", self.until)) if v is not None]
        return ", ".join(parts) or "all"


def select_mask(letters: pa.Table, selection: Selection) -> pa.Array:
    """Boolean mask of the rows of `letters` the selection takes."""
    mask = pa.array([True] * letters.num_rows, pa.bool_())
    for column, wanted in (("error_class", selection.reason), ("table_name", selection.table),
                           ("topic", selection.topic), ("job", selection.job)):
        if wanted is not None:
            mask = pc.and_(mask, pc.fill_null(pc.equal(letters.column(column), wanted), False))
    failed_at = letters.column("failed_at") if "failed_at" in letters.column_names else None
    if selection.since is not None:
        mask = pc.and_(mask, pc.fill_null(pc.greater_equal(failed_at, pa.scalar(selection.since, failed_at.type)),
                                          False))
    if selection.until is not None:
        mask = pc.and_(mask, pc.fill_null(pc.less(failed_at, pa.scalar(selection.until, failed_at.type)), False))
    return mask


def read_letters(catalog, table: str, selection: Selection = Selection(),
                 columns: tuple[str, ...] | None = None) -> pa.Table:
    """The selected letters (all columns unless `columns`); an empty table when there is no dead-letter table."""
    try:
        dlq = load_table(catalog, table, refresh=True)
    except NoSuchTableError:
        from router.catalog.dead_letter_table import DLQ_ARROW_SCHEMA

        schema = DLQ_ARROW_SCHEMA if columns is None else pa.schema([DLQ_ARROW_SCHEMA.field(c) for c in columns])
        return schema.empty_table()
    needed = None if columns is None else tuple(dict.fromkeys(
        (*columns, "error_class", "table_name", "topic", "failed_at", "job")))
    scan = dlq.scan() if needed is None else dlq.scan(selected_fields=needed)
    letters = scan.to_arrow()
    letters = letters.filter(select_mask(letters, selection))
    return letters if columns is None else letters.select(list(columns))


def summarize(letters: pa.Table) -> dict:
    """{"total", "by_reason", "by_table", "by_topic", "first", "last"} of a set of letters."""
    def counts(column: str) -> dict:
        values = letters.column(column).to_pylist() if letters.num_rows else []
        return dict(sorted(Counter("" if v is None else v for v in values).items()))

    failed = letters.column("failed_at") if letters.num_rows else None
    return {"total": letters.num_rows, "by_reason": counts("error_class"), "by_table": counts("table_name"),
            "by_topic": counts("topic"),
            "first": None if failed is None else pc.min(failed).as_py().isoformat(),
            "last": None if failed is None else pc.max(failed).as_py().isoformat()}
