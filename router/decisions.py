"""The decisions the job, `icerouter plan` and `icerouter check` share.

Why one module: a dry run is only worth something if it answers exactly what
the job will do. So every input of the decision is built here, once, for all
three: the schema a table sees for a writer schema (the route's column
projection, the Kafka metadata columns, the Avro aliases), the policy that
applies (route -> topic pattern -> default, and ``tables.auto_create``), and
what happens to the records (write, drop, dead-letter, fail). Pure functions:
no catalog, no registry, no Spark.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from typing import Sequence

from pyiceberg.schema import Schema
from pyiceberg.types import (
    IcebergType, IntegerType, ListType, LongType, MapType, NestedField, PrimitiveType, StringType, StructType,
    TimestamptzType,
)

from evolution.avro import avro_field_aliases
from evolution.changes import AddColumn, EvolutionPlan, MappedSchema, Violation
from evolution.layout import Layout, TableLayout, plan_layout
from evolution.plan import plan_evolution
from evolution.policy import EvolutionPolicy, Mode, PolicyOverrides, PolicySet
from evolution.variant_type import VariantType
from router.changes.envelope import debezium_table_schema
from router.table_writes import APPEND, TableWrite, apply_write

__all__ = ["KAFKA_METADATA", "SEQUENCE_COLUMN", "SchemaDecision", "FormatDecision", "projected_names", "table_view",
           "with_sequence_column", "sequence_column", "resolve_policy", "table_layout",
           "plan_table", "refuse_variant_columns", "decide", "decide_schema", "wanted_format_version", "decide_format"]

#: (column, source column of the Kafka row, Iceberg type) appended to every row when
#: ``tables.metadata_columns`` is on.
KAFKA_METADATA = (("_kafka_topic", "topic", StringType()), ("_kafka_partition", "partition", IntegerType()),
                  ("_kafka_offset", "offset", LongType()), ("_kafka_timestamp", "timestamp", TimestamptzType()))

#: the column an upsert table keeps a row's sequence_by value in when the path is not a column of its own
SEQUENCE_COLUMN = "_change_sequence"

SEVERITY = {Mode.DISCARD_VALUE: 1, Mode.DISCARD_ROW: 2, Mode.DLQ: 3, Mode.FREEZE: 4}
ACTIONS = {None: "write", Mode.DISCARD_VALUE: "write", Mode.DISCARD_ROW: "drop", Mode.DLQ: "dlq",
           Mode.FREEZE: "fail"}


@dataclass
class SchemaDecision:
    """What happens to the records of one writer schema headed for one table."""

    action: str  # write | drop | dlq | fail
    reason: str = ""
    drop_columns: tuple[str, ...] = ()


def projected_names(schema: Schema, columns: Sequence[str] | None) -> list[str]:
    """Top-level columns a route keeps, in the route's order (all when it has no projection)."""
    names = [f.name for f in schema.fields]
    return names if columns is None else [c for c in columns if c in names]


def _with_metadata(schema: Schema) -> Schema:
    names = {f.name for f in schema.fields}
    fields, next_id = list(schema.fields), schema.highest_field_id
    for name, _, itype in KAFKA_METADATA:
        if name in names:  # the payload has a field of that name: it wins
            continue
        next_id += 1
        fields.append(NestedField(next_id, name, itype, required=False))
    return Schema(*fields, schema_id=schema.schema_id)


@functools.lru_cache(maxsize=1024)
def _aliases(schema_str: str) -> dict:
    return avro_field_aliases(schema_str)


def table_view(schema: Schema, *, columns: Sequence[str] | None, metadata_columns: bool,
               schema_type: str = "AVRO", schema_str: str | None = None,
               source: str | None = None, cdc: str | None = None,
               sequence_by: str | None = None) -> Schema | MappedSchema:
    """The schema a table receives from one writer schema through one route.

    A CDC route's table holds the row images (the envelope's ``after``), not the
    envelope; raises router.changes.exceptions.EnvelopeError for a schema that is
    not one.
    """
    value = schema
    if cdc is not None:
        schema, schema_str = debezium_table_schema(schema), None  # aliases name envelope paths: not the table's
    if columns is not None:
        schema = schema.select(*projected_names(schema, columns))
    if sequence_by is not None:
        schema = with_sequence_column(schema, value, sequence_by)
    if metadata_columns:
        schema = _with_metadata(schema)
    if (schema_type or "AVRO").upper() == "AVRO" and schema_str and "aliases" in schema_str:
        return MappedSchema(schema, _aliases(schema_str), source)
    return MappedSchema(schema, {}, source) if source else schema


def with_sequence_column(schema: Schema, value: Schema, sequence_by: str) -> Schema:
    """An upsert table keeps each row's sequence_by value, so a change read in a later batch that is
    older than the row loses (router/catalog/sequence.py): in the column of that name when the path is
    one of the table's columns, else in SEQUENCE_COLUMN (a Debezium envelope's ``source.lsn``)."""
    name = sequence_column(schema, sequence_by)
    if name != SEQUENCE_COLUMN or SEQUENCE_COLUMN in schema.column_names:
        return schema
    try:
        field = value.find_field(sequence_by)
    except ValueError:
        return schema  # the records lack it: they are dead-lettered (missing_sequence)
    if not isinstance(field.field_type, PrimitiveType):
        return schema
    return Schema(*schema.fields, NestedField(schema.highest_field_id + 1, SEQUENCE_COLUMN, field.field_type,
                                              required=False), schema_id=schema.schema_id,
                  identifier_field_ids=schema.identifier_field_ids)


def sequence_column(schema: Schema, sequence_by: str) -> str:
    """Where an upsert table holds the sequence_by value of each row."""
    return sequence_by if "." not in sequence_by and sequence_by in schema.column_names else SEQUENCE_COLUMN


def resolve_policy(policies: PolicySet, topic: str, route_policy: PolicyOverrides | None,
                   auto_create: bool) -> EvolutionPolicy:
    """Route rule over topic pattern over default; a missing table is dead-lettered when
    ``tables.auto_create`` is off (unless the policy already refuses it harder)."""
    policy = policies.resolve(topic, route_policy)
    if not auto_create and policy.new_table is Mode.EVOLVE:
        policy = replace(policy, new_table=Mode.DLQ)
    return policy


def table_layout(tables, partition_by: Sequence[str] | None = None,
                 sort_by: Sequence[str] | None = None) -> Layout:
    """The layout a route asks of its table: the route's ``partition_by`` / ``sort_by`` over the
    ``tables`` defaults; what neither sets is left as the table has it."""
    partition_by = partition_by if partition_by is not None else tables.partition_by
    sort_by = sort_by if sort_by is not None else getattr(tables, "sort_by", None)
    return Layout(tuple(partition_by) if partition_by is not None else None,
                  tuple(sort_by) if sort_by is not None else None)


def plan_table(current: Schema | None, incoming: Sequence[Schema | MappedSchema], policy: EvolutionPolicy,
               case_sensitive: bool, table: str, write: TableWrite = APPEND,
               key: Sequence[str] | None = None, layout: Layout | None = None,
               current_layout: TableLayout | None = None) -> EvolutionPlan:
    """The evolution plan, with an upsert table's key and mode rules applied (router/table_writes.py)
    and the table's layout brought to ``layout`` (evolution/layout.py) from ``current_layout``, the
    existing table's spec and sort order (without it an existing table's layout is not planned)."""
    plan = plan_evolution(current, list(incoming), policy, case_sensitive=case_sensitive, table=table)
    plan = apply_write(plan, incoming, write, key)
    if current_layout is not None and not plan.new_table and current_layout.format_version < 3:
        plan = refuse_variant_columns(plan, current_layout.format_version, policy)
    if layout is None or plan.target is None or (not plan.new_table and current_layout is None):
        return plan
    changes, violations, notes = plan_layout(plan.target, None if plan.new_table else current_layout, layout, policy)
    if not (changes or violations or notes):
        return plan
    return replace(plan, changes=plan.changes + changes, violations=plan.violations + violations,
                   notes=plan.notes + tuple(n for n in notes if n not in plan.notes))


def _holds_variant(t: IcebergType) -> bool:
    if isinstance(t, VariantType):
        return True
    if isinstance(t, StructType):
        return any(_holds_variant(f.field_type) for f in t.fields)
    if isinstance(t, ListType):
        return _holds_variant(t.element_type)
    if isinstance(t, MapType):
        return _holds_variant(t.key_type) or _holds_variant(t.value_type)
    return False


def refuse_variant_columns(plan: EvolutionPlan, format_version: int, policy: EvolutionPolicy) -> EvolutionPlan:
    """A variant column is a v3 type: on an older table (its routes ask for v3, the upgrade is
    `icerouter maintain`'s, router.decisions.decide_format) adding one is refused until the upgrade, as
    the table's ``new_column`` policy says, and dead-lettered where that policy would evolve."""
    added = [c for c in plan.changes if isinstance(c, AddColumn) and _holds_variant(c.type)]
    if not added:
        return plan
    outcome = Mode.DLQ if policy.new_column is Mode.EVOLVE else policy.new_column
    reason = (f"a variant column needs a format v3 table (this one is v{format_version}; "
              "`icerouter maintain` upgrades it once its routes ask for format_version 3)")
    return replace(plan, changes=tuple(c for c in plan.changes if c not in added),
                   violations=plan.violations + tuple(Violation(c.path, "new_column", reason, outcome) for c in added))


def decide(plan: EvolutionPlan) -> SchemaDecision:
    """The records' fate from a plan's violations: the most severe outcome wins."""
    worst = None
    for v in plan.violations:
        if v.outcome in SEVERITY and (worst is None or SEVERITY[v.outcome] > SEVERITY[worst]):
            worst = v.outcome
    table = plan.table or "<table>"
    reasons = "; ".join(f"{'.'.join(v.path) or table}: {v.kind}: {v.reason}" for v in plan.violations)
    drop = tuple(dict.fromkeys(v.path[0] for v in plan.violations
                               if v.outcome is Mode.DISCARD_VALUE and v.path))
    return SchemaDecision(ACTIONS[worst], reasons, drop)


def decide_schema(current: Schema | None, incoming: Schema | MappedSchema, policy: EvolutionPolicy,
                  case_sensitive: bool, table: str, write: TableWrite = APPEND,
                  key: Sequence[str] | None = None, layout: Layout | None = None,
                  current_layout: TableLayout | None = None) -> SchemaDecision:
    """Pure: what happens to records of one writer schema headed for one table."""
    return decide(plan_table(current, [incoming], policy, case_sensitive, table, write, key, layout, current_layout))


@dataclass(frozen=True)
class FormatDecision:
    """What a table's Iceberg format version becomes (router/catalog/format_v3.py, docs/v3.md).

    ``action``: ``create`` (a new table, at ``wanted``), ``upgrade`` (an existing table moves to
    ``wanted``: `icerouter maintain` applies it, `plan` shows it; the job writes a table at the version it
    has), ``keep`` (nothing to do) or ``refuse`` (a table newer than wanted: formats never go down)."""

    current: int | None
    wanted: int
    action: str

    @property
    def note(self) -> str:
        if self.action == "upgrade":
            return (f"format v{self.current} -> v{self.wanted}: deletion vectors instead of position-delete files, "
                    "row lineage; its position deletes stay valid (`icerouter maintain` upgrades it)")
        if self.action == "refuse":
            return f"format v{self.current} is kept: format_version {self.wanted} would be a downgrade"
        if self.action == "create":
            return f"created as format v{self.wanted}"
        return ""


def wanted_format_version(tables_format_version: int, route_format_version: int | None) -> int:
    """The format version a route's tables get: the route's, else ``tables.format_version``."""
    return route_format_version if route_format_version is not None else tables_format_version


def decide_format(current: int | None, wanted: int) -> FormatDecision:
    """The one rule for a table's format version, taken by the job (table creation), `plan` and `maintain`."""
    if current is None:
        return FormatDecision(None, wanted, "create")
    if current < wanted:
        return FormatDecision(current, wanted, "upgrade")
    return FormatDecision(current, wanted, "keep" if current == wanted else "refuse")
