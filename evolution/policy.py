"""Evolution policies as data (schema-contract style).

Five entities, each with a mode:

* ``new_table``   a record targets a table that does not exist yet;
* ``new_column``  every *legal* change of the table's shape: adding a column
                  (any depth), widening a type (int->long, float->double,
                  decimal precision up), required->optional, alias renames;
* ``type_change`` an *illegal* change (narrowing the table, string<->int,
                  struct<->primitive, decimal scale...). Iceberg cannot
                  evolve these, so ``evolve`` is rejected for this entity.
* ``partition_change``  the configured ``partition_by`` differs from an
                  existing table's partition spec (evolution/layout.py);
* ``sort_order_change`` the configured ``sort_by`` differs from an existing
                  table's sort order. Both change the table's layout, not its
                  rows: only ``evolve`` (new files in the new layout, old files
                  stay as they are) and ``freeze`` make sense for them.

Modes: ``evolve`` (apply the change), ``freeze`` (fail the table: nothing is
written, the table is reported failed), ``discard_row`` (drop offending
records), ``discard_value`` (write the record without the offending column's
value), ``dlq`` (send offending records to the dead-letter topic).

Specs: a single string applies the mode to every entity where it is legal
(``"evolve"`` leaves ``type_change`` at its inherited value); a dict names
entities explicitly and may set ``optional_on_create`` (bool, default True:
top-level columns of a table created from a schema are made optional so other
topics can fan in later without ever having to fill them).

Resolution order: route rule -> first topic pattern (regex, full match, in
config order) -> global -> built-in defaults. Each layer overrides only the
keys it names.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from enum import Enum
from typing import Any, Mapping

from evolution.exceptions import PolicyConfigError

__all__ = ["Mode", "EvolutionPolicy", "PolicyOverrides", "PolicySet", "ENTITIES", "ALLOWED_MODES",
           "parse_policy_spec"]


class Mode(str, Enum):
    EVOLVE = "evolve"
    FREEZE = "freeze"
    DISCARD_ROW = "discard_row"
    DISCARD_VALUE = "discard_value"
    DLQ = "dlq"

    def __str__(self) -> str:
        return self.value


ENTITIES = ("new_table", "new_column", "type_change", "partition_change", "sort_order_change")
FLAGS = ("optional_on_create",)
SHORTHAND = "<shorthand>"  # the key reported for a policy given as one mode string

ALLOWED_MODES: dict[str, frozenset[Mode]] = {
    "new_table": frozenset({Mode.EVOLVE, Mode.FREEZE, Mode.DISCARD_ROW, Mode.DLQ}),
    "new_column": frozenset(Mode),
    "type_change": frozenset({Mode.FREEZE, Mode.DISCARD_ROW, Mode.DISCARD_VALUE, Mode.DLQ}),
    "partition_change": frozenset({Mode.EVOLVE, Mode.FREEZE}),
    "sort_order_change": frozenset({Mode.EVOLVE, Mode.FREEZE}),
}

#: why a layout change has no record-level outcome: the records are fine, the table's layout is the question
_LAYOUT_ONLY = "a layout change concerns the table, not single records; use evolve or freeze"

WHY_NOT: dict[tuple[str, Mode], str] = {
    ("new_table", Mode.DISCARD_VALUE): "a missing table has no single value to drop",
    ("type_change", Mode.EVOLVE): "Iceberg cannot evolve an incompatible type change; "
                                  "use freeze, dlq, discard_row or discard_value",
    **{(entity, mode): _LAYOUT_ONLY for entity in ("partition_change", "sort_order_change")
       for mode in (Mode.DISCARD_ROW, Mode.DISCARD_VALUE, Mode.DLQ)},
}


@dataclass(frozen=True)
class EvolutionPolicy:
    """Resolved policy for one (topic, table): what to do with each entity."""

    new_table: Mode = Mode.EVOLVE
    new_column: Mode = Mode.EVOLVE
    type_change: Mode = Mode.DLQ
    optional_on_create: bool = True
    partition_change: Mode = Mode.EVOLVE
    sort_order_change: Mode = Mode.EVOLVE

    def __post_init__(self) -> None:
        for entity in ENTITIES:
            mode = _mode(getattr(self, entity), entity)
            if mode not in ALLOWED_MODES[entity]:
                raise PolicyConfigError(_why(entity, mode), key=entity, value=mode.value)
            object.__setattr__(self, entity, mode)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: (v.value if isinstance(v := getattr(self, f.name), Mode) else v)
                for f in fields(self)}

    @classmethod
    def from_spec(cls, spec: Any, base: EvolutionPolicy | None = None) -> EvolutionPolicy:
        return replace(base or cls(), **parse_policy_spec(spec))


def _mode(value: Any, key: str, topic: str | None = None) -> Mode:
    if isinstance(value, Mode):
        return value
    try:
        return Mode(str(value).strip().lower())
    except ValueError:
        target = "" if key == SHORTHAND else f" for {key!r}"
        raise PolicyConfigError(
            f"unknown mode {value!r}{target}; expected one of "
            f"{', '.join(m.value for m in Mode)}", key=key, value=value, topic=topic) from None


def _why(entity: str, mode: Mode) -> str:
    reason = WHY_NOT.get((entity, mode), "not allowed")
    return f"mode {mode.value!r} is not allowed for {entity!r}: {reason}"


def parse_policy_spec(spec: Any, topic: str | None = None) -> dict[str, Any]:
    """Validate one spec (string or dict) into the overrides it names."""
    if spec is None:
        return {}
    if isinstance(spec, (str, Mode)):
        mode = _mode(spec, SHORTHAND, topic)
        out = {e: mode for e in ENTITIES if mode in ALLOWED_MODES[e]}
        if not out:
            raise PolicyConfigError(f"mode {mode.value!r} fits no entity", value=spec, topic=topic)
        return out
    if not isinstance(spec, Mapping):
        raise PolicyConfigError(f"expected a mode string or a mapping, got {type(spec).__name__}",
                                value=spec, topic=topic)
    out: dict[str, Any] = {}
    for key, value in spec.items():
        if key in ENTITIES:
            mode = _mode(value, key, topic)
            if mode not in ALLOWED_MODES[key]:
                raise PolicyConfigError(_why(key, mode), key=key, value=value, topic=topic)
            out[key] = mode
        elif key in FLAGS:
            if not isinstance(value, bool):
                raise PolicyConfigError(f"{key!r} must be true or false", key=key, value=value,
                                        topic=topic)
            out[key] = value
        else:
            raise PolicyConfigError(
                f"unknown key {key!r}; expected one of {', '.join(ENTITIES + FLAGS)}",
                key=key, value=value, topic=topic)
    return out


@dataclass(frozen=True)
class PolicyOverrides:
    """One validated spec (a route's rule): only the keys it names, parsed once at load."""

    values: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def parse(cls, spec: Any, topic: str | None = None) -> PolicyOverrides | None:
        """None for no spec; raises PolicyConfigError naming the bad key."""
        if spec is None:
            return None
        if isinstance(spec, PolicyOverrides):
            return spec
        return cls(tuple(parse_policy_spec(spec, topic=topic).items()))

    def apply(self, policy: EvolutionPolicy) -> EvolutionPolicy:
        return replace(policy, **dict(self.values))


@dataclass(frozen=True)
class PolicySet:
    """Global policy plus per-topic-pattern overrides, validated once at load."""

    default: EvolutionPolicy = field(default_factory=EvolutionPolicy)
    topics: tuple[tuple[str, re.Pattern[str], dict[str, Any]], ...] = ()

    @classmethod
    def from_config(cls, global_: Any = None,
                    topics: Mapping[str, Any] | None = None) -> PolicySet:
        default = EvolutionPolicy.from_spec(global_)
        compiled = []
        for pattern, spec in (topics or {}).items():
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                raise PolicyConfigError(f"invalid topic pattern: {exc}", key=pattern,
                                        topic=pattern) from None
            overrides = parse_policy_spec(spec, topic=pattern)
            replace(default, **overrides)  # validates the combination early
            compiled.append((pattern, rx, overrides))
        return cls(default, tuple(compiled))

    def resolve(self, topic: str, route_policy: Any = None) -> EvolutionPolicy:
        """Policy for ``topic``: route rule over first matching pattern over global."""
        policy = self.default
        for _, rx, overrides in self.topics:
            if rx.fullmatch(topic):
                policy = replace(policy, **overrides)
                break
        if route_policy is not None:
            if isinstance(route_policy, EvolutionPolicy):
                return route_policy
            if not isinstance(route_policy, PolicyOverrides):  # a raw spec (tests, ad-hoc callers)
                route_policy = PolicyOverrides.parse(route_policy, topic=topic)
            policy = route_policy.apply(policy)
        return policy

    def __reduce__(self):
        return (_rebuild_set, (self.default, tuple((p, o) for p, _, o in self.topics)))


def _rebuild_set(default: EvolutionPolicy, topics: tuple[tuple[str, dict], ...]) -> PolicySet:
    return PolicySet(default, tuple((p, re.compile(p), o) for p, o in topics))
