"""Pure evolution planning: current table schema + incoming schemas -> EvolutionPlan.

Decisions come from our own promotion table (``ALLOWED_PROMOTIONS``), never from
pyiceberg's ``union_by_name``/``promote`` which silently relax or ignore.

Rules, in short:

* incoming schemas are merged into the target in the given order (fan-in is
  the union of all of them);
* a column unknown to the table is added optional (nested fields of an added
  struct keep their source requiredness);
* the table's type may widen to the incoming one (int->long, float->double,
  decimal(p1,s)->decimal(p2,s), p2>p1); an incoming type *narrower* than the
  table is not a change: its values fit and the writer upcasts them (a note
  records it); so are int and long values for a double column (``FITS_AS_IS``);
* every other type difference is a ``type_change`` violation;
* an optional incoming field for a required column, or a required column
  missing from an incoming schema ("required column could not be filled"),
  makes the column optional when ``new_column`` is ``evolve``; otherwise it is
  a ``missing_required``/``make_optional`` violation (``discard_value`` is
  treated as ``discard_row`` there: the value to drop does not exist); the
  table's identifier (key) columns are never relaxed (Iceberg wants them
  required): records without a key are refused by the caller instead;
* an incoming field whose Avro ``aliases`` name an existing column renames that
  column (field id kept) unless another incoming schema still uses the old name; so does
  a Protobuf field whose number (its doc, evolution/protobuf.py) is an existing column's;
* under case-sensitive matching, a new field whose name differs from a sibling
  column only by case (``userid`` beside ``UserId``) is a ``case_conflict``
  violation handled like a type change: case-insensitive engines could not
  tell the two columns apart. Case-insensitive matching maps it onto the
  existing column instead.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator, Sequence, Union

from pyiceberg.schema import Schema, assign_fresh_schema_ids
from pyiceberg.types import (
    DecimalType, DoubleType, FloatType, IcebergType, IntegerType, ListType, LongType, MapType,
    NestedField, PrimitiveType, StructType,
)

from evolution.changes import (
    AddColumn, Change, EvolutionPlan, MakeOptional, MappedSchema, Path, RenameColumn, Violation,
    WidenColumn,
)
from evolution.policy import EvolutionPolicy, Mode
from evolution.protobuf import doc_field_number

__all__ = ["plan_evolution", "ALLOWED_PROMOTIONS", "can_promote"]

# table type -> incoming types it may widen to (decimal handled by DECIMAL rule)
ALLOWED_PROMOTIONS: dict[type, tuple[type, ...]] = {
    IntegerType: (LongType,),
    FloatType: (DoubleType,),
}


#: incoming type -> table types that hold its values as they are, without the table changing: Avro's
#: own reader resolution (int and long read as double). Not promotions: a long column never becomes
#: double. It keeps a column typed by its first values: a double column of inferred JSON takes the
#: records whose numbers happen to be integral.
FITS_AS_IS: dict[type, tuple[type, ...]] = {
    IntegerType: (DoubleType,),
    LongType: (DoubleType,),
}


def _same(a: IcebergType | None, b: IcebergType | None) -> bool:
    """Cheap primitive equality (pydantic ``==`` dominated planning time)."""
    return a is b or (type(a) is type(b) and a == b)


def can_promote(src: IcebergType, dst: IcebergType) -> bool:
    """True when a column of type ``src`` may legally become ``dst``."""
    if isinstance(src, DecimalType) and isinstance(dst, DecimalType):
        return src.scale == dst.scale and dst.precision > src.precision
    return type(dst) in ALLOWED_PROMOTIONS.get(type(src), ())


# --- mutable working tree -------------------------------------------------
@dataclass
class _Struct:
    fields: list["_Field"]


@dataclass
class _List:
    element: "_Field"


@dataclass
class _Map:
    key: "_Field"
    value: "_Field"


Node = Union[PrimitiveType, _Struct, _List, _Map]


@dataclass
class _Field:
    name: str
    type: Node
    required: bool
    doc: str | None = None
    field_id: int | None = None          # None: added by this plan
    orig_name: str | None = None
    orig_type: IcebergType | None = None
    orig_required: bool = False
    born: int = -1                       # index of the incoming schema that created it

    @property
    def added(self) -> bool:
        return self.field_id is None

    @property
    def path_name(self) -> str:
        return self.orig_name if self.orig_name is not None else self.name


def _node(t: IcebergType, existing: bool, born: int) -> Node:
    if isinstance(t, StructType):
        return _Struct([_from_nested(f, existing, born) for f in t.fields])
    if isinstance(t, ListType):
        return _List(_from_nested(t.element_field, existing, born))
    if isinstance(t, MapType):
        return _Map(_from_nested(t.key_field, existing, born),
                    _from_nested(t.value_field, existing, born))
    return t


def _from_nested(f: NestedField, existing: bool, born: int) -> _Field:
    return _Field(f.name, _node(f.field_type, existing, born), f.required, f.doc,
                  field_id=f.field_id if existing else None,
                  orig_name=f.name if existing else None,
                  orig_type=f.field_type if existing else None,
                  orig_required=f.required, born=born)


def _to_type(n: Node, ids: Iterator[int]) -> IcebergType:
    if isinstance(n, _Struct):
        return StructType(*[_to_field(f, ids) for f in n.fields])
    if isinstance(n, _List):
        return ListType(_fid(n.element, ids), _to_type(n.element.type, ids),
                        element_required=n.element.required)
    if isinstance(n, _Map):
        return MapType(_fid(n.key, ids), _to_type(n.key.type, ids), _fid(n.value, ids),
                       _to_type(n.value.type, ids), value_required=n.value.required)
    return n


def _fid(f: _Field, ids: Iterator[int]) -> int:
    return f.field_id if f.field_id is not None else next(ids)


def _to_field(f: _Field, ids: Iterator[int]) -> NestedField:
    if f.added:  # same id order as UpdateSchema.add_column: field, then fresh nested ids
        fid = next(ids)
        typ = assign_fresh_schema_ids(_to_type(f.type, itertools.count(1)), lambda: next(ids))
        return NestedField(fid, f.name, typ, required=f.required, doc=f.doc)
    return NestedField(f.field_id, f.name, _to_type(f.type, ids), required=f.required, doc=f.doc)


def _kind(n: Node) -> str:
    return {_Struct: "struct", _List: "list", _Map: "map"}.get(type(n), str(n))


def _itype_kind(t: IcebergType) -> str:
    return {StructType: "struct", ListType: "list", MapType: "map"}.get(type(t), str(t))


# --- planner ----------------------------------------------------------------
@dataclass
class _Planner:
    policy: EvolutionPolicy
    case_sensitive: bool
    incoming: list[MappedSchema]
    new_table: bool
    index: int = 0
    violations: list[Violation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # the table's identifier (key) columns: Iceberg wants them required, so they are never relaxed
    keys: frozenset[Path] = frozenset()

    def allow(self, kind: str, path: Path, reason: str) -> bool:
        """Legal evolution gated by the ``new_column`` mode."""
        mode = self.policy.new_column
        if mode is Mode.EVOLVE:
            return True
        if kind in ("missing_required", "make_optional") and mode is Mode.DISCARD_VALUE:
            mode = Mode.DISCARD_ROW
        self.violate(path, kind, reason, mode)
        return False

    def violate(self, path: Path, kind: str, reason: str, mode: Mode) -> None:
        v = Violation(path, kind, reason, mode)
        if v not in self.violations:
            self.violations.append(v)

    def lookup(self, s: _Struct, name: str) -> _Field | None:
        if self.case_sensitive:
            return next((f for f in s.fields if f.name == name), None)
        low = name.lower()
        return next((f for f in s.fields if f.name.lower() == low), None)

    def names_equal(self, a: str, b: str) -> bool:
        return a == b if self.case_sensitive else a.lower() == b.lower()

    def merge_struct(self, ts: _Struct, inc: StructType, path: Path, ipath: Path,
                     owner_added: bool, owner_born: int) -> None:
        matched: set[int] = set()
        for f in inc.fields:
            tf = self.lookup(ts, f.name) or self.renamed(ts, inc, f, path, ipath)
            if tf is None:
                added = self.add(ts, f, path, owner_added, owner_born)
                if added is not None:
                    matched.add(id(added))
                continue
            matched.add(id(tf))
            self.merge_field(tf, f, path + (tf.path_name,), ipath + (f.name,))
        for tf in ts.fields:
            if id(tf) in matched or not tf.required:
                continue
            p = path + (tf.path_name,)
            if p in self.keys:
                continue
            if tf.added:
                tf.required = False
            elif self.allow("missing_required", p, "required column could not be filled"):
                tf.required = False

    def add(self, ts: _Struct, f: NestedField, path: Path, owner_added: bool,
            owner_born: int) -> _Field | None:
        p = path + (f.name,)
        twin = self.case_twin(ts, f.name)
        if twin is not None:
            self.type_violation(p, f"differs from column {twin!r} only by case; case-insensitive engines "
                                   "(Spark SQL, Trino, DuckDB) cannot tell them apart", "case_conflict")
            return None
        if not (owner_added or self.new_table) and not self.allow(
                "new_column", p, f"new column of type {f.field_type}"):
            return None
        nf = _from_nested(f, existing=False, born=self.index)
        nf.required = f.required and owner_born == self.index
        ts.fields.append(nf)
        return nf

    def case_twin(self, ts: _Struct, name: str) -> str | None:
        """A sibling whose name equals ``name`` but for case (only possible when case-sensitive)."""
        low = name.lower()
        return next((f.name for f in ts.fields if f.name.lower() == low), None) if self.case_sensitive else None

    def renamed(self, ts: _Struct, inc: StructType, f: NestedField, path: Path,
                ipath: Path) -> _Field | None:
        aliases = self.incoming[self.index].aliases.get(ipath + (f.name,), ())
        for alias in aliases:
            tf = self.lookup(ts, alias)
            if tf is None or tf.added or any(self.names_equal(g.name, alias) for g in inc.fields):
                continue
            if self.old_name_still_used(ipath + (alias,)):
                self.notes.append(f"{'.'.join(path + (alias,))}: not renamed to {f.name!r}, "
                                  f"another incoming schema still uses {alias!r}")
                return None
            if not self.allow("rename", path + (tf.path_name,), f"rename to {f.name!r}"):
                return None
            tf.name = f.name
            return tf
        return self.renumbered(ts, inc, f, path, ipath)

    def renumbered(self, ts: _Struct, inc: StructType, f: NestedField, path: Path,
                   ipath: Path) -> _Field | None:
        """A Protobuf field renamed under its number: the column with that number (its doc)."""
        number = doc_field_number(f.doc)
        if number is None:
            return None
        tf = next((t for t in ts.fields if not t.added and doc_field_number(t.doc) == number), None)
        if tf is None or any(self.names_equal(g.name, tf.name) for g in inc.fields):
            return None
        if self.old_name_still_used(ipath + (tf.name,)):
            self.notes.append(f"{'.'.join(path + (tf.name,))}: not renamed to {f.name!r}, "
                              f"another incoming schema still uses {tf.name!r}")
            return None
        if not self.allow("rename", path + (tf.path_name,), f"rename to {f.name!r} (protobuf field {number})"):
            return None
        tf.name = f.name
        return tf

    def old_name_still_used(self, ipath: Path) -> bool:
        dotted = ".".join(ipath)
        for i, m in enumerate(self.incoming):
            if i == self.index:
                continue
            try:
                m.schema.find_field(dotted, case_sensitive=self.case_sensitive)
                return True
            except ValueError:
                continue
        return False

    def merge_field(self, tf: _Field, f: NestedField, path: Path, ipath: Path) -> None:
        if tf.required and not f.required and path in self.keys:
            self.notes.append(f"key column {'.'.join(path)} stays required: a record without it is refused")
        elif tf.required and not f.required:
            if tf.added:
                tf.required = False
            elif self.allow("make_optional", path, "incoming field is optional"):
                tf.required = False
        if tf.added and tf.doc is None and f.doc:  # docs of existing columns are the table's
            tf.doc = f.doc
        self.merge_type(tf, f.field_type, path, ipath)

    def merge_type(self, tf: _Field, t: IcebergType, path: Path, ipath: Path) -> None:
        n = tf.type
        if isinstance(n, _Struct) and isinstance(t, StructType):
            self.merge_struct(n, t, path, ipath, tf.added, tf.born)
        elif isinstance(n, _List) and isinstance(t, ListType):
            self.merge_field(n.element, t.element_field, path + ("element",), ipath + ("element",))
        elif isinstance(n, _Map) and isinstance(t, MapType):
            if not _same(n.key.type, t.key_type):
                self.type_violation(path + ("key",), f"map key {n.key.type} vs {t.key_type}")
            self.merge_field(n.value, t.value_field, path + ("value",), ipath + ("value",))
        elif isinstance(n, PrimitiveType) and isinstance(t, PrimitiveType):
            self.merge_primitive(tf, n, t, path)
        else:
            self.type_violation(path, f"incompatible kinds: table {_kind(n)}, "
                                      f"incoming {_itype_kind(t)}")

    def merge_primitive(self, tf: _Field, n: PrimitiveType, t: PrimitiveType, path: Path) -> None:
        if _same(n, t):
            return
        if can_promote(n, t):
            if tf.added or self.allow("widen", path, f"widen {n} -> {t}"):
                tf.type = t
        elif can_promote(t, n) or type(n) in FITS_AS_IS.get(type(t), ()):
            self.notes.append(f"{'.'.join(path)}: incoming {t} is upcast to {n}")
        else:
            self.type_violation(path, f"cannot change {n} to {t}")

    def type_violation(self, path: Path, reason: str, kind: str = "type_change") -> None:
        """An illegal change: handled by the ``type_change`` mode."""
        self.violate(path, kind, reason, self.policy.type_change)


def _emit(s: _Struct, path: Path, ids: Iterator[int]) -> Iterator[Change]:
    for f in s.fields:
        if f.added:
            yield AddColumn(path + (f.name,), _to_field(f, ids).field_type, f.doc)
            continue
        p = path + (f.path_name,)
        if f.name != f.path_name:
            yield RenameColumn(p, f.name)
        yield from _emit_field(f, p, ids)


def _emit_field(f: _Field, p: Path, ids: Iterator[int]) -> Iterator[Change]:
    if isinstance(f.type, PrimitiveType) and not _same(f.type, f.orig_type):
        yield WidenColumn(p, f.orig_type, f.type)
    if f.orig_required and not f.required:
        yield MakeOptional(p)
    n = f.type
    if isinstance(n, _Struct):
        yield from _emit(n, p, ids)
    elif isinstance(n, _List):
        yield from _emit_field(n.element, p + ("element",), ids)
    elif isinstance(n, _Map):
        yield from _emit_field(n.value, p + ("value",), ids)


def _as_mapped(s: Schema | MappedSchema) -> MappedSchema:
    return s if isinstance(s, MappedSchema) else MappedSchema(s)


def plan_evolution(current: Schema | None, incoming: Sequence[Schema | MappedSchema],
                   policy: EvolutionPolicy | None = None, *, case_sensitive: bool = True,
                   table: str | None = None) -> EvolutionPlan:
    """Plan what ``current`` needs to accept every ``incoming`` schema. Pure."""
    policy = policy or EvolutionPolicy()
    mapped = [_as_mapped(s) for s in incoming]
    if current is None and not mapped:
        raise ValueError("a new table needs at least one incoming schema")
    new_table = current is None
    planner = _Planner(policy, case_sensitive, mapped, new_table, keys=frozenset(
        tuple(current.find_column_name(i).split(".")) for i in current.identifier_field_ids) if current else frozenset())
    root_born = 0 if (new_table and not policy.optional_on_create) else -1
    root = _Field("", _node(current.as_struct(), True, -1) if current else _Struct([]),
                  True, field_id=0, born=root_born)
    for i, m in enumerate(mapped):
        planner.index = i
        planner.merge_struct(root.type, m.schema.as_struct(), (), (), new_table, root_born)
    violations = list(planner.violations)
    if new_table:
        if policy.new_table is not Mode.EVOLVE:
            violations.insert(0, Violation((), "new_table", "table does not exist",
                                           policy.new_table))
        target = assign_fresh_schema_ids(Schema(*_to_type(root.type, itertools.count(1)).fields))
        changes: tuple[Change, ...] = ()
    else:
        next_id = current.highest_field_id + 1
        changes = tuple(_emit(root.type, (), itertools.count(next_id)))
        target = current if not changes else Schema(
            *_to_type(root.type, itertools.count(next_id)).fields,
            schema_id=current.schema_id + 1,
            identifier_field_ids=list(current.identifier_field_ids))
    return EvolutionPlan(current=current, target=target, changes=changes,
                         violations=tuple(violations), new_table=new_table,
                         notes=tuple(dict.fromkeys(planner.notes)), policy=policy, table=table)
