"""The schemas `plan` and `check` decide on: registry subjects and local files, read once.

Why a module of its own: both commands must give one verdict per input. A file
that is not text, not JSON, or a schema Iceberg cannot hold (a recursive type)
is not a usage error of the command: it is a schema the job could never write,
so both report it as blocked (exit 1), with one message that names the file and
says what is wrong (never the whole file echoed back).

Conventions: subjects follow the TopicNameStrategy (``<topic>-value``); a schema
file ``<name>.avsc`` is Avro and ``<name>.json`` is JSON Schema unless it parses
as an Avro record; a file name without ``-value``/``-key`` names the topic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from evolution.avro import avro_field_aliases, avro_to_iceberg
from evolution.changes import MappedSchema
from evolution.exceptions import EvolutionError
from evolution.jsonschema import jsonschema_to_iceberg
from router.exceptions import ConfigError, SchemaFileError

__all__ = ["AVRO", "JSON_SCHEMA", "SCHEMA_SUFFIXES", "SchemaInput", "map_schema", "detect_schema_type",
           "subject_topic", "file_subject", "parse_subject", "read_schema_file", "load_schema_file",
           "schema_input"]

AVRO, JSON_SCHEMA = "AVRO", "JSON"
SCHEMA_SUFFIXES = {".avsc": AVRO, ".avro": AVRO, ".json": None}
#: an Avro schema may be a bare (quoted or not) type name such as `string` or `shop.Order`
BARE_NAME = re.compile(r'"?[A-Za-z_][A-Za-z0-9_.]*"?')


def map_schema(schema_str: str, schema_type: str = AVRO, source: str | None = None) -> MappedSchema:
    """Registry schema text -> Iceberg schema (+ Avro aliases for renames)."""
    kind = (schema_type or AVRO).upper()
    if kind == AVRO:
        return MappedSchema(avro_to_iceberg(schema_str), avro_field_aliases(schema_str), source)
    if kind == JSON_SCHEMA:
        return MappedSchema(jsonschema_to_iceberg(schema_str), {}, source)
    raise ConfigError(f"schema type {kind} is not supported (AVRO, JSON)", subject=source)


def detect_schema_type(text: str, suffix: str = "") -> str:
    """AVRO for .avsc or an Avro-looking document, else JSON (Schema)."""
    if SCHEMA_SUFFIXES.get(suffix.lower()) == AVRO:
        return AVRO
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return AVRO  # a bare Avro primitive name such as `string`
    if isinstance(doc, list) or (isinstance(doc, str)):
        return AVRO
    if isinstance(doc, dict) and (doc.get("type") in ("record", "enum", "fixed", "array", "map")
                                  and "properties" not in doc and "$schema" not in doc):
        return AVRO
    return JSON_SCHEMA


def subject_topic(subject: str) -> str:
    """TopicNameStrategy: ``orders-value`` -> ``orders``."""
    for suffix in ("-value", "-key"):
        if subject.endswith(suffix):
            return subject[: -len(suffix)]
    return subject


def file_subject(path: Path) -> str:
    """``orders.avsc`` and ``orders-value.avsc`` -> ``orders-value``."""
    return path.stem if path.stem.endswith(("-value", "-key")) else f"{path.stem}-value"


def parse_subject(arg: str) -> tuple[str, int | str]:
    """``orders-value`` -> latest; ``orders-value:3`` -> version 3 (``:latest`` too)."""
    subject, sep, version = arg.rpartition(":")
    if sep and subject and (version.isdigit() or version == "latest"):
        number = int(version) if version.isdigit() else version
        if number == 0:
            raise ConfigError(f"--subject {arg}: versions start at 1")
        return subject, number
    return arg, "latest"


def read_schema_file(path: str | Path) -> str:
    """The file's text; a missing file is a usage error, a file that is not text a SchemaFileError."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read schema file {path}: {exc.strerror}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SchemaFileError(f"schema file {path} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset "
                              f"{exc.start}): is it a binary file?") from None
    if "\x00" in text:
        raise SchemaFileError(f"schema file {path} is not a text file (it contains NUL bytes)")
    return text


def _json_problem(text: str) -> str | None:
    """Why ``text`` is neither a JSON document nor a bare Avro type name (None: it is one of them)."""
    stripped = text.strip()
    if not stripped:
        return "is empty"
    if BARE_NAME.fullmatch(stripped):
        return None
    try:
        json.loads(stripped)
    except json.JSONDecodeError as exc:
        return f"is not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
    return None


@dataclass(frozen=True)
class SchemaInput:
    """One schema to decide on: its text and type, its Iceberg mapping, or why it cannot have one.

    ``problem`` set means the job could never write records of this schema (the
    registry would refuse the text, or the job dead-letters the records): a
    blocked verdict in plan and check alike."""

    source: str  # the file's path or `subject:version`
    text: str | None
    kind: str  # AVRO | JSON | unknown
    mapped: MappedSchema | None = None
    problem: str | None = None
    readable: bool = True  # False: not a schema document at all (binary, not JSON): no registry is asked


def schema_input(text: str, kind: str, source: str, what: str) -> SchemaInput:
    """Map ``text`` (``what`` names it in messages: "schema file x.avsc", "subject s:3")."""
    problem = _json_problem(text)
    if problem is not None:
        return SchemaInput(source, text, kind, problem=f"{what} {problem}", readable=False)
    try:
        return SchemaInput(source, text, kind, map_schema(text, kind, source=source))
    except EvolutionError as exc:
        return SchemaInput(source, text, kind, problem=f"{what}: {exc}")


def load_schema_file(path: str | Path) -> SchemaInput:
    """A local schema file read and mapped; a file that cannot be opened is a usage error (ConfigError)."""
    path = Path(path)
    try:
        text = read_schema_file(path)
    except SchemaFileError as exc:
        return SchemaInput(str(path), None, "unknown", problem=exc.message, readable=False)
    return schema_input(text, detect_schema_type(text, path.suffix), str(path), f"schema file {path}")
