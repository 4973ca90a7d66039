"""Protobuf subjects in the registry emulator: parsing and Confluent's compatibility rules.

A schema is ``.proto`` text (or a base64 ``FileDescriptorProto``) compiled with its
references (registry/protobuf_schema.py); its identity is the compiled descriptor, so
whitespace and comments do not make a new schema id.

Compatibility follows Confluent's Protobuf diff (``io.confluent.kafka.schemaregistry.
protobuf.diff``): the *writer* file (original) is compared with the *reader* file (update);
messages are matched by name within the package, fields by number. BACKWARD checks
reader = new against writer = old, FORWARD the other way round, FULL both. Incompatible:

* ``PACKAGE_CHANGED``: the file's package differs;
* ``MESSAGE_REMOVED``: a message of the writer (nested ones included) is gone;
* ``FIELD_KIND_CHANGED``: a field number is now of another kind (scalar, enum, message, map);
* ``FIELD_SCALAR_KIND_CHANGED``: a scalar moved out of its wire-compatible group
  (int32/uint32/int64/uint64/bool; sint32/sint64; fixed32/sfixed32; fixed64/sfixed64;
  string/bytes); field number reuse with another type lands here or in the kind rule;
* ``FIELD_NAMED_TYPE_CHANGED``: a message or enum field now names another type;
* ``FIELD_NUMERIC_LABEL_CHANGED``: singular <-> repeated for a numeric or enum field
  (string, bytes and message fields may change: the same bytes on the wire);
* ``REQUIRED_FIELD_ADDED`` / ``REQUIRED_FIELD_REMOVED`` (proto2 ``required``);
* ``ONEOF_FIELD_REMOVED``, ``FIELD_MOVED_TO_EXISTING_ONEOF``, ``MULTIPLE_FIELDS_MOVED_TO_ONEOF``.

Compatible: fields added or removed, a field renamed under its number, messages, enums and
enum values added or removed, oneofs added or removed.
"""
from __future__ import annotations

import hashlib
from typing import Any, Sequence

from registry.exceptions import UnsupportedSchemaType
from registry.protobuf_schema import ProtobufFile, load_protobuf

__all__ = ["parse_protobuf", "protobuf_reader_problems", "WIRE_GROUPS"]

# FieldDescriptor.TYPE_* -> wire-compatible group
WIRE_GROUPS = {5: "varint", 13: "varint", 3: "varint", 4: "varint", 8: "varint",  # int32 uint32 int64 uint64 bool
               17: "zigzag", 18: "zigzag", 7: "fixed32", 15: "fixed32", 6: "fixed64", 16: "fixed64",
               9: "delimited", 12: "delimited", 1: "double", 2: "float"}
TYPE_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
              8: "bool", 9: "string", 10: "group", 11: "message", 12: "bytes", 13: "uint32", 14: "enum",
              15: "sfixed32", 16: "sfixed64", 17: "sint32", 18: "sint64"}
_MESSAGE, _ENUM, _GROUP = 11, 14, 10


def parse_protobuf(text: str, references: Sequence[tuple[str, str]] = ()) -> tuple[ProtobufFile, str]:
    """(the loaded file, its identity); ValueError with the compiler's reason when it does not load."""
    try:
        file = load_protobuf(text, references)
    except UnsupportedSchemaType as exc:
        raise ValueError(exc.reason) from None
    return file, hashlib.sha256(file.file.serialized_pb).hexdigest()


def _messages(file: ProtobufFile) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def walk(desc: Any) -> None:
        if desc.GetOptions().map_entry:
            return
        package = desc.file.package
        out[desc.full_name[len(package) + 1:] if package else desc.full_name] = desc  # a package change is its own rule
        for nested in desc.nested_types:
            walk(nested)
    for top in file.top:
        walk(top)
    return out


def _is_map(fd: Any) -> bool:
    return fd.type == _MESSAGE and fd.message_type.GetOptions().map_entry


def _kind(fd: Any) -> str:
    if _is_map(fd):
        return "map"
    if fd.type in (_MESSAGE, _GROUP):
        return "message"
    if fd.type == _ENUM:
        return "enum"
    return "scalar"


def _type_name(fd: Any) -> str:
    if fd.type in (_MESSAGE, _GROUP):
        return fd.message_type.full_name
    if fd.type == _ENUM:
        return fd.enum_type.full_name
    return TYPE_NAMES.get(fd.type, str(fd.type))


def _oneof(fd: Any) -> str | None:
    oneof = fd.containing_oneof
    if oneof is None or (len(oneof.fields) == 1 and oneof.name.startswith("_")):
        return None  # proto3 `optional` is a synthetic oneof, not a real one
    return oneof.name


def _field_problems(where: str, old: Any, new: Any) -> list[str]:
    at = f"{where}.{new.name} (field {new.number})"
    kinds = (_kind(old), _kind(new))
    if kinds[0] != kinds[1]:
        return [f"FIELD_KIND_CHANGED: {at}: {kinds[0]} -> {kinds[1]}"]
    if kinds[0] == "scalar" and WIRE_GROUPS.get(old.type) != WIRE_GROUPS.get(new.type):
        return [f"FIELD_SCALAR_KIND_CHANGED: {at}: {_type_name(old)} -> {_type_name(new)}"]
    if kinds[0] in ("message", "enum") and _type_name(old) != _type_name(new):
        return [f"FIELD_NAMED_TYPE_CHANGED: {at}: {_type_name(old)} -> {_type_name(new)}"]
    if kinds[0] == "map":
        return [p for k in ("key", "value") for p in _field_problems(
            f"{at}.{k}", old.message_type.fields_by_name[k], new.message_type.fields_by_name[k])]
    problems = []
    if old.is_repeated != new.is_repeated and not (kinds[0] == "message" or WIRE_GROUPS.get(new.type) == "delimited"):
        problems.append(f"FIELD_NUMERIC_LABEL_CHANGED: {at}: "
                        f"{'repeated' if old.is_repeated else 'singular'} -> {'repeated' if new.is_repeated else 'singular'}")
    if old.is_required != new.is_required:
        kind = "REQUIRED_FIELD_ADDED" if new.is_required else "REQUIRED_FIELD_REMOVED"
        problems.append(f"{kind}: {at}")
    return problems


def _message_problems(name: str, old: Any, new: Any) -> list[str]:
    problems: list[str] = []
    new_by_number = {f.number: f for f in new.fields}
    old_by_number = {f.number: f for f in old.fields}
    moved_into: dict[str, list[int]] = {}
    for number, of in old_by_number.items():
        nf = new_by_number.get(number)
        if nf is None:
            if _oneof(of) is not None:
                problems.append(f"ONEOF_FIELD_REMOVED: {name}.{of.name} (field {number}) left oneof {_oneof(of)}")
            elif of.is_required:
                problems.append(f"REQUIRED_FIELD_REMOVED: {name}.{of.name} (field {number})")
            continue
        problems += _field_problems(name, of, nf)
        if _oneof(of) is None and _oneof(nf) is not None:
            moved_into.setdefault(_oneof(nf), []).append(number)
    old_oneofs = {_oneof(f) for f in old.fields} - {None}
    for oneof, numbers in sorted(moved_into.items()):
        if oneof in old_oneofs:
            problems.append(f"FIELD_MOVED_TO_EXISTING_ONEOF: {name}: field(s) {numbers} moved into oneof {oneof}")
        elif len(numbers) > 1:
            problems.append(f"MULTIPLE_FIELDS_MOVED_TO_ONEOF: {name}: fields {numbers} moved into new oneof {oneof}")
    for number, nf in new_by_number.items():
        if number not in old_by_number and nf.is_required:
            problems.append(f"REQUIRED_FIELD_ADDED: {name}.{nf.name} (field {number})")
    return problems


def protobuf_reader_problems(reader: ProtobufFile, writer: ProtobufFile) -> list[str]:
    """Why ``reader`` cannot read data written with ``writer`` (empty: it can); module docstring."""
    problems: list[str] = []
    if reader.file.package != writer.file.package:
        problems.append(f"PACKAGE_CHANGED: {writer.file.package or '<none>'} -> {reader.file.package or '<none>'}")
    old_messages, new_messages = _messages(writer), _messages(reader)
    for name, old in old_messages.items():
        new = new_messages.get(name)
        if new is None:
            problems.append(f"MESSAGE_REMOVED: {name}")
            continue
        problems += _message_problems(name, old, new)
    return problems
