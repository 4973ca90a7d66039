"""The schemas `plan` and `check` decide on: registry subjects and local files, read once.

Why a module of its own: both commands must give one verdict per input. A file
that is not text, not JSON, or a schema Iceberg cannot hold (a recursive type)
is not a usage error of the command: it is a schema the job could never write,
so both report it as blocked (exit 1), with one message that names the file and
says what is wrong (never the whole file echoed back).

Conventions: subjects follow the TopicNameStrategy (``<topic>-value``); a schema
file ``<name>.avsc`` is Avro and ``<name>.json`` is JSON Schema unless it parses
as an Avro record; ``<name>.proto`` is Protobuf (its ``import``s are read from the
file's directory, well-known types built in; the table gets the file's first message,
message index ``[0]``, as Confluent's serializers default to); a file name without
``-value``/``-key`` names the topic.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from evolution.avro import BARE_NAME, avro_field_aliases, avro_to_iceberg
from evolution.changes import MappedSchema
from evolution.exceptions import EvolutionError
from evolution.jsonschema import jsonschema_to_iceberg
from evolution.protobuf import protobuf_to_iceberg
from registry.exceptions import UnsupportedSchemaType
from registry.protobuf_schema import load_protobuf
from router.exceptions import ConfigError, SchemaFileError

__all__ = ["AVRO", "JSON_SCHEMA", "PROTOBUF", "SCHEMA_SUFFIXES", "proto_references", "SchemaInput", "map_schema", "detect_schema_type",
           "subject_topic", "file_subject", "parse_subject", "read_schema_file", "load_schema_file",
           "schema_input"]

AVRO, JSON_SCHEMA, PROTOBUF = "AVRO", "JSON", "PROTOBUF"
SCHEMA_SUFFIXES = {".avsc": AVRO, ".avro": AVRO, ".json": None, ".proto": PROTOBUF}
PROTO_IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.MULTILINE)
PROTO_SYNTAX = re.compile(r'^\s*(?://[^\n]*\n\s*)*(syntax|edition)\s*=', re.MULTILINE)


def map_schema(schema_str: str, schema_type: str = AVRO, source: str | None = None,
               references: Sequence[tuple[str, str]] = ()) -> MappedSchema:
    """Registry schema text -> Iceberg schema (+ Avro aliases for renames; a Protobuf column's
    doc carries its field number, evolution/protobuf.py). ``references``: (import name, text)
    of what a Protobuf schema imports."""
    kind = (schema_type or AVRO).upper()
    if kind == AVRO:
        return MappedSchema(avro_to_iceberg(schema_str), avro_field_aliases(schema_str), source)
    if kind == JSON_SCHEMA:
        return MappedSchema(jsonschema_to_iceberg(schema_str), {}, source)
    if kind == PROTOBUF:
        file = load_protobuf(schema_str, references)  # the job's loader: the same verdict on the same text
        return MappedSchema(protobuf_to_iceberg(file.message((0,))), {}, source)
    raise ConfigError(f"schema type {kind} is not supported (AVRO, JSON, PROTOBUF)", subject=source)


def proto_references(text: str, root: Path, depth: int = 0) -> list[tuple[str, str]]:
    """(import name, text) of the files ``text`` imports, read under ``root``, dependencies first;
    well-known types (google/protobuf/...) are built in. A missing import is left to the compiler."""
    out: list[tuple[str, str]] = []
    if depth > 32:
        return out
    for name in PROTO_IMPORT.findall(text):
        path = root / name
        if name.startswith("google/protobuf/") or not path.is_file():
            continue
        ref_text = read_schema_file(path)
        out += [r for r in proto_references(ref_text, root, depth + 1) if r not in out]
        if (name, ref_text) not in out:
            out.append((name, ref_text))
    return out


def detect_schema_type(text: str, suffix: str = "") -> str:
    """AVRO for .avsc or an Avro-looking document, PROTOBUF for .proto or `syntax = ...` text,
    else JSON (Schema)."""
    if SCHEMA_SUFFIXES.get(suffix.lower()) in (AVRO, PROTOBUF):
        return SCHEMA_SUFFIXES[suffix.lower()]
    if PROTO_SYNTAX.match(text):
        return PROTOBUF
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
    kind: str  # AVRO | JSON | PROTOBUF | unknown
    mapped: MappedSchema | None = None
    problem: str | None = None
    readable: bool = True  # False: not a schema document at all (binary, not JSON): no registry is asked


def schema_input(text: str, kind: str, source: str, what: str,
                 references: Sequence[tuple[str, str]] = ()) -> SchemaInput:
    """Map ``text`` (``what`` names it in messages: "schema file x.avsc", "subject s:3")."""
    problem = _json_problem(text) if kind != PROTOBUF else ("is empty" if not text.strip() else None)
    if problem is not None:
        return SchemaInput(source, text, kind, problem=f"{what} {problem}", readable=False)
    try:
        return SchemaInput(source, text, kind, map_schema(text, kind, source=source, references=references))
    except EvolutionError as exc:
        return SchemaInput(source, text, kind, problem=f"{what}: {exc}")
    except UnsupportedSchemaType as exc:  # Protobuf text the compiler refuses
        return SchemaInput(source, text, kind, problem=f"{what}: {exc.reason}", readable=False)


def load_schema_file(path: str | Path) -> SchemaInput:
    """A local schema file read and mapped; a file that cannot be opened is a usage error (ConfigError)."""
    path = Path(path)
    try:
        text = read_schema_file(path)
    except SchemaFileError as exc:
        return SchemaInput(str(path), None, "unknown", problem=exc.message, readable=False)
    kind = detect_schema_type(text, path.suffix)
    refs = proto_references(text, path.parent) if kind == PROTOBUF else ()
    return schema_input(text, kind, str(path), f"schema file {path}", refs)
