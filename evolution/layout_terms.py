"""Layout terms as the configuration writes them: ``day(ts)``, ``bucket(16, id)``, ``id desc nulls last``.

Why a module of its own: the configuration is validated with these parsers when it is
loaded, and loading a configuration must stay light (`icerouter --help`, usage errors):
pyiceberg's transforms only, never ``pyiceberg.table``. Planning layouts against tables
is evolution/layout.py.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from pyiceberg.transforms import (
    BucketTransform, DayTransform, HourTransform, IdentityTransform, MonthTransform, Transform, TruncateTransform,
    YearTransform,
)

__all__ = ["TRANSFORM_NAMES", "Layout", "PartitionTerm", "SortTerm", "parse_partition_term", "parse_sort_term",
           "partition_field_name", "transform_term"]

TRANSFORM_NAMES = ("identity", "year", "month", "day", "hour", "bucket", "truncate")
_WIDTH = ("bucket", "truncate")
_TERM = re.compile(r"\s*(?:(\w+)\s*\(\s*(?:(\d+)\s*,\s*)?([\w.]+)\s*\)|([\w.]+))\s*")
_SORT = re.compile(r"(?P<term>.*?)(?:\s+(?P<dir>asc|desc))?(?:\s+nulls\s+(?P<nulls>first|last))?\s*", re.I)


@dataclass(frozen=True)
class PartitionTerm:
    """One partition field as the configuration names it: ``transform(width, column)``."""

    transform: str
    column: str
    width: int | None = None

    def to_transform(self) -> Transform:
        return _TRANSFORMS[self.transform](self.width)

    def __str__(self) -> str:
        width = f"{self.width}, " if self.width is not None else ""
        return f"{self.transform}({width}{self.column})"


@dataclass(frozen=True)
class SortTerm:
    """One sort field: a partition-style term (or a bare column), a direction and where nulls go."""

    term: PartitionTerm
    descending: bool = False
    nulls_first: bool | None = None  # None: Iceberg's default for the direction

    @property
    def first(self) -> bool:
        """Nulls go first: as the term says, else first for ascending and last for descending."""
        return (not self.descending) if self.nulls_first is None else self.nulls_first

    @property
    def direction(self) -> Any:
        from pyiceberg.table.sorting import SortDirection  # pyiceberg.table is heavy: not at config load

        return SortDirection.DESC if self.descending else SortDirection.ASC

    @property
    def null_order(self) -> Any:
        from pyiceberg.table.sorting import NullOrder

        return NullOrder.NULLS_FIRST if self.first else NullOrder.NULLS_LAST

    def __str__(self) -> str:
        term = self.term.column if self.term.transform == "identity" else str(self.term)
        return f"{term} {'desc' if self.descending else 'asc'} nulls {'first' if self.first else 'last'}"


_TRANSFORMS = {
    "identity": lambda w: IdentityTransform(),
    "year": lambda w: YearTransform(),
    "month": lambda w: MonthTransform(),
    "day": lambda w: DayTransform(),
    "hour": lambda w: HourTransform(),
    "bucket": lambda w: BucketTransform(w),
    "truncate": lambda w: TruncateTransform(w),
}


def parse_partition_term(text: str, bare_column: bool = False) -> PartitionTerm:
    """``day(ts)``, ``bucket(16, id)``; a bare ``id`` (identity) only where `bare_column` (sort terms).

    Raises ValueError with a message fit for a configuration error."""
    m = _TERM.fullmatch(str(text))
    if m and m.group(4) is not None and bare_column:
        return PartitionTerm("identity", m.group(4))
    if not m or m.group(1) not in _TRANSFORMS:
        bare = "<column> or " if bare_column else ""
        raise ValueError(f"{text!r} is not one of {bare}{', '.join(TRANSFORM_NAMES)}(<column>)")
    name, width, column = m.group(1), m.group(2), m.group(3)
    if name in _WIDTH and width is None:
        raise ValueError(f"{text!r} needs a width, e.g. {name}(16, {column})")
    if name not in _WIDTH and width is not None:
        raise ValueError(f"{text!r}: {name} takes no width")
    if width is not None and int(width) <= 0:
        raise ValueError(f"{text!r}: the width must be positive")
    return PartitionTerm(name, column, int(width) if width is not None else None)


def parse_sort_term(text: str) -> SortTerm:
    """``id``, ``ts desc``, ``day(ts) asc nulls last``, ``bucket(16, id) desc nulls first``."""
    m = _SORT.fullmatch(str(text).strip())
    if not m or not m.group("term").strip():
        raise ValueError(f"{text!r} is not a sort term (<column or transform(column)> [asc|desc] "
                         "[nulls first|nulls last])")
    term = parse_partition_term(m.group("term"), bare_column=True)
    nulls = m.group("nulls")
    return SortTerm(term, (m.group("dir") or "asc").lower() == "desc",
                    None if nulls is None else nulls.lower() == "first")


def partition_field_name(term: PartitionTerm) -> str:
    """The name icerouter gives a partition field: the column for identity, else ``<column>_<transform>``."""
    column = term.column.replace(".", "_")
    return column if term.transform == "identity" else f"{column}_{term.transform}"


def transform_term(transform: Transform, column: str) -> PartitionTerm | None:
    """The term of a table's transform on `column` (None for one the configuration cannot name: void)."""
    for name in TRANSFORM_NAMES:
        if name in _WIDTH:
            width = getattr(transform, "num_buckets", None) if name == "bucket" else getattr(transform, "width", None)
            if width is not None and _TRANSFORMS[name](width) == transform:
                return PartitionTerm(name, column, width)
        elif _TRANSFORMS[name](None) == transform:
            return PartitionTerm(name, column)
    return None


@dataclass(frozen=True)
class Layout:
    """The layout the configuration asks of a table (route over ``tables``); None: not managed."""

    partition_by: tuple[str, ...] | None = None
    sort_by: tuple[str, ...] | None = None
