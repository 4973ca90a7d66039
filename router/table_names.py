"""How a topic name becomes part of a table identifier: shared by routing and the source's planner
(router/source/cadence.py), which imports nothing heavy."""

from __future__ import annotations

import re

_NOT_IDENTIFIER = re.compile(r"[^a-z0-9_]")


def normalise_identifier_part(value: str) -> str:
    """Make a topic name usable as an Iceberg identifier part (``Orders.V1-x`` -> ``orders_v1_x``)."""
    cleaned = _NOT_IDENTIFIER.sub("_", value.lower())
    return cleaned if cleaned and not cleaned[0].isdigit() else f"t_{cleaned}"
