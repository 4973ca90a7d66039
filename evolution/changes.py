"""Typed, frozen results of planning: changes, violations and the plan itself.

Paths always name columns as they are in the *current* table (before any
rename in the same plan); list elements are ``element``, map values ``value``.
An ``AddColumn`` path is the parent's current path plus the new name.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Union

from pyiceberg.schema import Schema
from pyiceberg.types import IcebergType

from evolution.policy import EvolutionPolicy, Mode

Path = tuple[str, ...]

__all__ = ["Path", "AddColumn", "WidenColumn", "MakeOptional", "RenameColumn", "ChangePartitionSpec",
           "ChangeSortOrder", "Change",
           "Violation", "MappedSchema", "EvolutionPlan", "BLOCKING_OUTCOMES"]

# outcomes that stop (some) records from reaching the table unchanged
BLOCKING_OUTCOMES = frozenset({Mode.FREEZE, Mode.DLQ, Mode.DISCARD_ROW})


def _dotted(path: Path) -> str:
    return ".".join(path) or "<table>"


@dataclass(frozen=True)
class AddColumn:
    path: Path
    type: IcebergType
    doc: str | None = None
    kind = "add_column"

    def describe(self) -> str:
        return f"+ {_dotted(self.path)}: optional {self.type}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": list(self.path), "type": str(self.type), "doc": self.doc}


@dataclass(frozen=True)
class WidenColumn:
    path: Path
    from_type: IcebergType
    to_type: IcebergType
    kind = "widen_column"

    def describe(self) -> str:
        return f"~ {_dotted(self.path)}: {self.from_type} -> {self.to_type}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": list(self.path), "from": str(self.from_type),
                "to": str(self.to_type)}


@dataclass(frozen=True)
class MakeOptional:
    path: Path
    kind = "make_optional"

    def describe(self) -> str:
        return f"? {_dotted(self.path)}: required -> optional"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": list(self.path)}


@dataclass(frozen=True)
class RenameColumn:
    path: Path
    new_name: str
    kind = "rename_column"

    def describe(self) -> str:
        return f"> {_dotted(self.path)} -> {self.new_name}"

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": list(self.path), "new_name": self.new_name}


@dataclass(frozen=True)
class _LayoutChange:
    """A table-wide layout setting, as configuration terms, before and after (evolution/layout.py)."""

    from_terms: tuple[str, ...]
    to_terms: tuple[str, ...]
    path: Path = ()
    kind = ""
    label = ""  # what `describe` calls the setting
    empty = ""  # ... and the setting without terms

    def describe(self) -> str:
        return (f"~ {self.label}: {', '.join(self.from_terms) or self.empty} -> "
                f"{', '.join(self.to_terms) or self.empty}")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "path": [], "from": list(self.from_terms), "to": list(self.to_terms)}


@dataclass(frozen=True)
class ChangePartitionSpec(_LayoutChange):
    """The table's partition spec: new data files are written in the new spec; files already written
    keep theirs."""

    kind = "partition_spec"
    label = "partition spec"
    empty = "unpartitioned"


@dataclass(frozen=True)
class ChangeSortOrder(_LayoutChange):
    """The table's sort order: new data files are sorted by the new one."""

    kind = "sort_order"
    label = "sort order"
    empty = "unsorted"


Change = Union[AddColumn, WidenColumn, MakeOptional, RenameColumn, ChangePartitionSpec, ChangeSortOrder]
LAYOUT_CHANGES = (ChangePartitionSpec, ChangeSortOrder)


@dataclass(frozen=True)
class Violation:
    """A change the policy does not let through, and what happens instead."""

    path: Path
    kind: str      # new_table | new_column | widen | make_optional | rename | missing_required | type_change
                   # | case_conflict | partition_change | sort_order_change
    reason: str
    outcome: Mode

    @property
    def blocking(self) -> bool:
        return self.outcome in BLOCKING_OUTCOMES

    def describe(self) -> str:
        return f"! {_dotted(self.path)}: {self.kind}: {self.reason} -> {self.outcome.value}"

    def to_dict(self) -> dict[str, Any]:
        return {"path": list(self.path), "kind": self.kind, "reason": self.reason,
                "outcome": self.outcome.value}


@dataclass(frozen=True)
class MappedSchema:
    """An incoming schema already mapped to Iceberg, with its Avro aliases."""

    schema: Schema
    aliases: Mapping[Path, tuple[str, ...]] = field(default_factory=dict)
    source: str | None = None   # e.g. "subject:version" for messages


@dataclass(frozen=True)
class EvolutionPlan:
    """What a table needs so that every incoming schema can be written to it."""

    current: Schema | None
    target: Schema | None
    changes: tuple[Change, ...] = ()
    violations: tuple[Violation, ...] = ()
    new_table: bool = False
    notes: tuple[str, ...] = ()
    policy: EvolutionPolicy = field(default_factory=EvolutionPolicy)
    table: str | None = None

    @property
    def is_noop(self) -> bool:
        return not (self.changes or self.violations or self.new_table)

    @property
    def blocked(self) -> bool:
        """True when any record would be refused, dropped or dead-lettered."""
        return any(v.blocking for v in self.violations)

    @property
    def failed(self) -> bool:
        """True when the policy says the whole table must stop (freeze)."""
        return any(v.outcome is Mode.FREEZE for v in self.violations)

    @property
    def status(self) -> str:
        if self.failed:
            return "failed"
        if self.blocked:
            return "blocked"
        if self.new_table:
            return "create"
        return "evolve" if self.changes else ("degraded" if self.violations else "unchanged")

    def violations_by_outcome(self, outcome: Mode) -> tuple[Violation, ...]:
        return tuple(v for v in self.violations if v.outcome is outcome)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "status": self.status,
            "new_table": self.new_table,
            "blocked": self.blocked,
            "changes": [c.to_dict() for c in self.changes],
            "violations": [v.to_dict() for v in self.violations],
            "notes": list(self.notes),
            "policy": self.policy.to_dict(),
            "target_schema": str(self.target) if self.target is not None else None,
        }

    def describe(self) -> str:
        head = f"table {self.table or '<table>'}: {self.status}"
        lines = [head]
        if self.new_table and self.target is not None:
            lines += [f"  + {f.name}: {'required' if f.required else 'optional'} {f.field_type}"
                      for f in self.target.fields]
        lines += [f"  {c.describe()}" for c in self.changes]
        lines += [f"  {v.describe()}" for v in self.violations]
        lines += [f"  note: {n}" for n in self.notes]
        if self.is_noop:
            lines.append("  (no changes)")
        return "\n".join(lines)
