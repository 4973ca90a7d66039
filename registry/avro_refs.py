"""Avro schema references: inline referenced named types into the root schema.

A registry schema may name types defined in other subjects (``references``).
Mapping to Iceberg and the columnar reader need one self-contained schema, in
which each named type is defined once (first use) and referenced by full name
afterwards; a plain "expand everything" would define a type twice.
"""
from __future__ import annotations

from typing import Any

from evolution.avro import parse_avro

__all__ = ["collect_definitions", "inline_references"]

NAMED = ("record", "error", "enum", "fixed")


def _full(name: str, ns: str | None) -> str:
    return name if "." in name or not ns else f"{ns}.{name}"


def _ns_of(full: str) -> str | None:
    return full.rsplit(".", 1)[0] if "." in full else None


def collect_definitions(schema: Any, ns: str | None = None,
                        out: dict[str, dict] | None = None) -> dict[str, dict]:
    """Full name -> definition of every named type defined in ``schema``."""
    out = {} if out is None else out
    if isinstance(schema, list):
        for b in schema:
            collect_definitions(b, ns, out)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind in NAMED:
            full = _full(schema["name"], schema.get("namespace", ns))
            out.setdefault(full, {**schema, "name": full, "namespace": _ns_of(full) or ""})
            for f in schema.get("fields", []):
                collect_definitions(f["type"], _ns_of(full), out)
        elif kind == "array":
            collect_definitions(schema["items"], ns, out)
        elif kind == "map":
            collect_definitions(schema["values"], ns, out)
        elif isinstance(kind, (dict, list)):
            collect_definitions(kind, ns, out)
    return out


def inline_references(root: Any, reference_schemas: list[str]) -> Any:
    """``root`` with each referenced named type defined at its first use."""
    defs: dict[str, dict] = {}
    for text in reference_schemas:
        collect_definitions(parse_avro(text), None, defs)
    return _inline(parse_avro(root), None, defs, set())


def _inline(node: Any, ns: str | None, defs: dict[str, dict], defined: set[str]) -> Any:
    if isinstance(node, str):
        for cand in (_full(node, ns), node):
            if cand in defs and cand not in defined:
                return _inline(defs[cand], _ns_of(cand), defs, defined)
        full = _full(node, ns)
        return full if full in defined else node
    if isinstance(node, list):
        return [_inline(b, ns, defs, defined) for b in node]
    if not isinstance(node, dict):
        return node
    kind = node.get("type")
    out = dict(node)
    if kind in NAMED:
        full = _full(node["name"], node.get("namespace", ns))
        defined.add(full)
        out["name"], out["namespace"] = full, _ns_of(full) or ""
        if "fields" in node:
            out["fields"] = [{**f, "type": _inline(f["type"], _ns_of(full), defs, defined)}
                             for f in node["fields"]]
    elif kind == "array":
        out["items"] = _inline(node["items"], ns, defs, defined)
    elif kind == "map":
        out["values"] = _inline(node["values"], ns, defs, defined)
    elif isinstance(kind, (dict, list)) or (isinstance(kind, str) and kind in defs):
        out["type"] = _inline(kind, ns, defs, defined)
    return out
