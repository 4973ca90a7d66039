"""The one way to walk an Avro schema, after pyiceberg's SchemaVisitor.

`visit_avro` knows the Avro rules every walk needs: named types and their
namespaces, references to types defined earlier, recursion (a reference to a
record still being expanded), unions (null branches make a value optional,
other branches are named as in the Iceberg mapping), logical types and wrapped
types (``{"type": {...}}``). A visitor only says what to build, bottom up:
`record` gets its fields' results, `array` its element's, and so on; the
`before_*` / `after_*` hooks let it track where it is.
"""
from __future__ import annotations

from typing import Any, Generic, TypeVar

from evolution.exceptions import UnsupportedSchemaError

__all__ = ["AvroVisitor", "PathVisitor", "visit_avro", "branch_name", "fullname", "NAMED_KINDS", "PRIMITIVE_NAMES"]

T = TypeVar("T")

NAMED_KINDS = ("record", "error", "enum", "fixed")
PRIMITIVE_NAMES = frozenset({"null", "boolean", "int", "long", "float", "double", "bytes", "string"})


def fullname(name: str, namespace: str | None) -> str:
    if "." in name or not namespace:
        return name
    return f"{namespace}.{name}"


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def branch_name(branch: Any) -> str:
    """Name of a union branch: the Avro type name, or a named type's short name."""
    if isinstance(branch, str):
        return _short(branch)
    if isinstance(branch, dict):
        kind = branch.get("type")
        if kind in NAMED_KINDS and "name" in branch:
            return _short(branch["name"])
        if isinstance(kind, str):
            return kind
    raise UnsupportedSchemaError(f"cannot name union branch {branch!r}")


class AvroVisitor(Generic[T]):
    """What to build at each kind of Avro node; results flow bottom up."""

    def before_field(self, field: dict) -> None: ...
    def after_field(self, field: dict) -> None: ...
    def before_element(self) -> None: ...
    def after_element(self) -> None: ...
    def before_value(self) -> None: ...
    def after_value(self) -> None: ...
    def before_branch(self, name: str) -> None: ...  # only in unions of two or more non-null branches
    def after_branch(self, name: str) -> None: ...

    def record(self, node: dict, fields: list[tuple[dict, T]]) -> T:
        raise NotImplementedError

    def union(self, node: list, branches: list[tuple[str, T]], nullable: bool) -> T:
        """`branches`: (name, result) of the non-null branches (name "" when there is only one)."""
        raise NotImplementedError

    def array(self, node: dict, element: T) -> T:
        raise NotImplementedError

    def map(self, node: dict, value: T) -> T:
        raise NotImplementedError

    def enum(self, node: dict) -> T:
        raise NotImplementedError

    def fixed(self, node: dict) -> T:
        raise NotImplementedError

    def primitive(self, node: str | dict, name: str) -> T:
        """`name` is one of PRIMITIVE_NAMES ("null" included)."""
        raise NotImplementedError

    def logical(self, node: dict, logical: str, kind: Any) -> T | None:
        """A result for a logical type, or None to walk the underlying type."""
        return None

    def named(self, name: str, node: dict, result: T) -> T:
        """After a record, enum or fixed (defined here or referenced), with its full name."""
        return result

    def wrapped(self, node: dict, inner: T) -> T:
        """``{"type": <schema>}``: the wrapped schema's result."""
        return inner

    def recursive(self, name: str) -> T:
        raise UnsupportedSchemaError(f"recursive type {name!r} cannot be flattened into an Iceberg schema",
                                     schema_name=name)

    def unknown(self, kind: Any) -> T:
        """A reference to a name not defined before, or a type that does not exist."""
        raise UnsupportedSchemaError(f"unknown Avro type {kind!r}")

    def invalid(self, node: Any) -> T:
        """Something that is not a schema at all (no "type")."""
        raise UnsupportedSchemaError(f"not an Avro schema: {node!r}")


class PathVisitor(AvroVisitor[T]):
    """A visitor that knows where it is: `path` names the current column as in the Iceberg mapping
    (field names, ``element`` for list items, ``value`` for map values, branch names in unions)."""

    def __init__(self, root: tuple[str, ...] = ()) -> None:
        self.path: list[str] = list(root)

    def before_field(self, field: dict) -> None:
        self.path.append(field["name"])

    def after_field(self, field: dict) -> None:
        self.path.pop()

    def before_element(self) -> None:
        self.path.append("element")

    def after_element(self) -> None:
        self.path.pop()

    def before_value(self) -> None:
        self.path.append("value")

    def after_value(self) -> None:
        self.path.pop()

    def before_branch(self, name: str) -> None:
        self.path.append(name)

    def after_branch(self, name: str) -> None:
        self.path.pop()


class _Walk(Generic[T]):
    def __init__(self, visitor: AvroVisitor[T]) -> None:
        self.visitor = visitor
        self.named: dict[str, dict] = {}
        self.expanding: list[str] = []

    def define(self, node: dict, ns: str | None) -> tuple[str, str | None]:
        name = node.get("name")
        if not isinstance(name, str) or not name:
            raise UnsupportedSchemaError(f"named type {node.get('type')!r} without a name")
        full = fullname(name, node.get("namespace", ns))
        self.named.setdefault(full, node)
        return full, full.rsplit(".", 1)[0] if "." in full else None

    def reference(self, name: str, ns: str | None) -> T:
        full = fullname(name, ns)
        if full not in self.named and name in self.named:
            full = name
        if full not in self.named:
            return self.visitor.unknown(name)
        if full in self.expanding:
            return self.visitor.recursive(full)
        return self.visit(self.named[full], full.rsplit(".", 1)[0] if "." in full else None)

    def visit(self, node: Any, ns: str | None) -> T:
        v = self.visitor
        if isinstance(node, list):
            return self.union(node, ns)
        if isinstance(node, str):
            return v.primitive(node, node) if node in PRIMITIVE_NAMES else self.reference(node, ns)
        if not isinstance(node, dict) or "type" not in node:
            return v.invalid(node)
        kind = node["type"]
        if kind not in NAMED_KINDS:
            return self.anonymous(node, kind, ns)
        full, inner_ns = self.define(node, ns)
        if kind in ("record", "error") and full in self.expanding:
            return v.recursive(full)
        logical = node.get("logicalType")
        result = v.logical(node, logical, kind) if logical is not None else None
        if result is None:
            if kind in ("record", "error"):
                result = self.record(node, full, inner_ns)
            else:
                result = v.enum(node) if kind == "enum" else v.fixed(node)
        return v.named(full, node, result)

    def anonymous(self, node: dict, kind: Any, ns: str | None) -> T:
        v = self.visitor
        logical = node.get("logicalType")
        if logical is not None:
            result = v.logical(node, logical, kind)
            if result is not None:
                return result
        if isinstance(kind, (dict, list)):
            return v.wrapped(node, self.visit(kind, ns))
        if kind in PRIMITIVE_NAMES:
            return v.primitive(node, kind)
        if kind == "array":
            v.before_element()
            try:
                element = self.visit(node["items"], ns)
            finally:
                v.after_element()
            return v.array(node, element)
        if kind == "map":
            v.before_value()
            try:
                value = self.visit(node["values"], ns)
            finally:
                v.after_value()
            return v.map(node, value)
        if isinstance(kind, str):
            return self.reference(kind, ns)
        return v.unknown(kind)

    def record(self, node: dict, full: str, ns: str | None) -> T:
        self.expanding.append(full)
        try:
            fields = []
            for f in node.get("fields", []):
                self.visitor.before_field(f)
                try:
                    fields.append((f, self.visit(f["type"], ns)))
                finally:
                    self.visitor.after_field(f)
            return self.visitor.record(node, fields)
        finally:
            self.expanding.pop()

    def union(self, node: list, ns: str | None) -> T:
        real = [b for b in node if b != "null"]
        nullable = len(real) != len(node)
        if len(real) == 1:  # an optional value, not a choice: its branch needs no name
            return self.visitor.union(node, [("", self.visit(real[0], ns))], nullable)
        branches = []
        for branch in real:
            name = branch_name(branch)
            self.visitor.before_branch(name)
            try:
                branches.append((name, self.visit(branch, ns)))
            finally:
                self.visitor.after_branch(name)
        return self.visitor.union(node, branches, nullable)


def visit_avro(schema: Any, visitor: AvroVisitor[T]) -> T:
    """Walk a parsed Avro schema (dict, list or type name) with `visitor`."""
    return _Walk(visitor).visit(schema, None)
