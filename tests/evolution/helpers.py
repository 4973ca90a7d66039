"""Small builders for Avro record schemas used across the evolution tests."""
from __future__ import annotations

from typing import Any


def opt(t: Any) -> list:
    """Nullable Avro type ``[null, t]``."""
    return ["null", t]


def field(name: str, t: Any, **extra: Any) -> dict:
    return {"name": name, "type": t, **extra}


def rec(*fields: dict | tuple, name: str = "R", namespace: str | None = "test") -> dict:
    """Avro record from ``field(...)`` dicts or ``(name, type)`` tuples."""
    out = {"type": "record", "name": name,
           "fields": [f if isinstance(f, dict) else field(*f) for f in fields]}
    if namespace:
        out["namespace"] = namespace
    return out


def dec(precision: int, scale: int = 2) -> dict:
    return {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale}


def arr(items: Any) -> dict:
    return {"type": "array", "items": items}


def amap(values: Any) -> dict:
    return {"type": "map", "values": values}


def logical(base: str, name: str) -> dict:
    return {"type": base, "logicalType": name}
