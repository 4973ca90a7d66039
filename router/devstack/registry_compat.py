"""Schema parsing and compatibility verdicts for the registry emulator.

Avro verdicts come from Apache Avro's own ``ReaderWriterCompatibilityChecker``
(PyPI ``avro`` 1.12), so they match what a real reader does.

Protobuf verdicts follow Confluent's Protobuf diff rules, named in
router/devstack/registry_protobuf.py (field numbers, wire-compatible scalar groups,
removed messages, oneofs, proto2 ``required``).

JSON Schema verdicts use a small documented rule set (``json_reader_problems``),
applied to object schemas, recursively through ``properties``:

* every property the reader lists in ``required`` must be required by the writer;
* a property present in both must have the same ``type`` (a reader ``number``
  accepts a writer ``integer``; a reader without ``type`` accepts anything);
* a reader with ``additionalProperties: false`` must list every writer property.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from types import MappingProxyType
from typing import Sequence

import avro.schema
from avro.compatibility import ReaderWriterCompatibilityChecker, SchemaCompatibilityType

from router.devstack.registry_protobuf import parse_protobuf, protobuf_reader_problems

#: Which directions each level checks, and whether against all versions.
#: Direction "backward": the new schema reads data of the old one.
LEVELS: MappingProxyType = MappingProxyType(
    {
        "NONE": ((), False),
        "BACKWARD": (("backward",), False),
        "BACKWARD_TRANSITIVE": (("backward",), True),
        "FORWARD": (("forward",), False),
        "FORWARD_TRANSITIVE": (("forward",), True),
        "FULL": (("backward", "forward"), False),
        "FULL_TRANSITIVE": (("backward", "forward"), True),
    }
)

SCHEMA_TYPES = ("AVRO", "JSON", "PROTOBUF")


class SchemaInvalid(ValueError):
    """The schema text does not parse for its schema type."""


@dataclass(frozen=True)
class ParsedSchema:
    """A validated schema: canonical text for storage and a key for dedup."""

    schema_type: str
    canonical: str
    identity: str
    parsed: object


def parse_schema(text: str, schema_type: str = "AVRO",
                 references: Sequence[tuple[str, str]] = ()) -> ParsedSchema:
    """Validate ``text``; whitespace and JSON key order do not change identity.

    ``references``: (import name, schema text) of what a Protobuf schema imports."""
    if schema_type not in SCHEMA_TYPES:
        raise SchemaInvalid(f"unsupported schemaType {schema_type!r}")
    if schema_type == "PROTOBUF":
        try:
            file, digest = parse_protobuf(text, references)
        except ValueError as exc:
            raise SchemaInvalid(f"invalid Protobuf schema: {exc}") from exc
        return ParsedSchema(schema_type, text, "PROTOBUF:" + digest, file)
    try:
        obj = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise SchemaInvalid(f"schema is not valid JSON: {exc}") from exc
    if schema_type == "AVRO":
        try:
            parsed: object = avro.schema.parse(text)
        except Exception as exc:  # avro raises several unrelated types
            raise SchemaInvalid(f"invalid Avro schema: {exc}") from exc
    else:
        if not isinstance(obj, (dict, bool)):
            raise SchemaInvalid("a JSON Schema must be an object or a boolean")
        parsed = obj
    canonical = json.dumps(obj, separators=(",", ":"))
    identity = schema_type + ":" + json.dumps(obj, separators=(",", ":"), sort_keys=True)
    return ParsedSchema(schema_type, canonical, identity, parsed)


def avro_reader_problems(reader: avro.schema.Schema, writer: avro.schema.Schema) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can)."""
    result = ReaderWriterCompatibilityChecker().get_compatibility(reader, writer)
    if result.compatibility is SchemaCompatibilityType.compatible:
        return []
    kinds = sorted({getattr(k, "value", str(k)) for k in result.incompatibilities}) or ["incompatible"]
    # avro reports kinds, messages and locations as separate collections: keep them side by side
    return [f"{', '.join(kinds)}: {'; '.join(sorted(map(str, result.messages)))} "
            f"at {', '.join(sorted(map(str, result.locations)))}"]


def json_reader_problems(reader: object, writer: object, path: str = "#") -> list[str]:
    """The JSON Schema rule set from the module docstring."""
    if reader is True or writer is False or not isinstance(reader, dict):
        return []
    if reader is False:
        return [f"{path}: reader rejects everything"]
    if not isinstance(writer, dict):
        writer = {}
    problems: list[str] = []
    rtype, wtype = reader.get("type"), writer.get("type")
    if rtype is not None and rtype != wtype and not (rtype == "number" and wtype == "integer"):
        problems.append(f"{path}: type changed from {wtype!r} to {rtype!r}")
    missing = set(reader.get("required", ())) - set(writer.get("required", ()))
    problems += [f"{path}/required: {name!r} is required by the reader only" for name in sorted(missing)]
    rprops, wprops = reader.get("properties", {}), writer.get("properties", {})
    if reader.get("additionalProperties") is False:
        problems += [f"{path}/properties/{name}: removed from a closed content model"
                     for name in sorted(set(wprops) - set(rprops))]
    for name in sorted(set(rprops) & set(wprops)):
        problems += json_reader_problems(rprops[name], wprops[name], f"{path}/properties/{name}")
    return problems


def reader_problems(reader: ParsedSchema, writer: ParsedSchema) -> list[str]:
    if reader.schema_type != writer.schema_type:
        return [f"schema type changed from {writer.schema_type} to {reader.schema_type}"]
    if reader.schema_type == "AVRO":
        return avro_reader_problems(reader.parsed, writer.parsed)
    if reader.schema_type == "PROTOBUF":
        return protobuf_reader_problems(reader.parsed, writer.parsed)
    return json_reader_problems(reader.parsed, writer.parsed)


def compatibility_problems(level: str, new: ParsedSchema, previous: list[ParsedSchema],
                           labels: list[str] | None = None) -> list[str]:
    """Problems of ``new`` against ``previous`` (oldest first) under ``level``.

    ``labels`` name the versions in messages (default: their position)."""
    directions, transitive = LEVELS[level]
    targets = previous if transitive else previous[-1:]
    problems: list[str] = []
    for index, old in enumerate(targets):
        position = len(previous) - len(targets) + index
        label = labels[position] if labels else f"version #{position + 1}"
        prefix = f"{label} (" if label else ""
        suffix = ")" if label else ""
        if "backward" in directions:
            problems += [f"{prefix}BACKWARD{suffix}: {p}" for p in reader_problems(new, old)]
        if "forward" in directions:
            problems += [f"{prefix}FORWARD{suffix}: {p}" for p in reader_problems(old, new)]
    return problems
