"""Protobuf schemas from the registry -> descriptors, without generated classes.

A Confluent-API registry serves a Protobuf schema as ``.proto`` text (the default) or,
asked with ``?format=serialized``, as a base64 ``FileDescriptorProto``; its references
(``import "common/money.proto";``) come as (import name, schema text) pairs. Either form
is loaded into a fresh ``DescriptorPool`` per schema (two versions of one file never meet):

* ``.proto`` text is compiled in-process by grpcio-tools' protoc (``_protoc_compiler``,
  ~1-2 ms a schema, once per schema id): the schema and its references are written to a
  private temporary directory and compiled with ``--include_imports`` into a descriptor
  set; google/protobuf/*.proto well-known types come from grpcio-tools' own includes;
* a serialized descriptor is added as is, after its dependencies (well-known types from
  protobuf's built-in pool).

Confluent's wire format puts a message-index list after the schema id: which message of
the file the record uses (``[1, 0]``: the first nested message of the file's second
message). It is a zigzag varint count followed by zigzag varint indexes; the single byte
0 stands for ``[0]``. ``read_message_indexes`` / ``encode_message_indexes`` implement it.
"""
from __future__ import annotations

import base64
import binascii
import importlib
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any, Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from registry.exceptions import DecodeError, UnsupportedSchemaType

__all__ = ["ProtobufFile", "load_protobuf", "read_message_indexes", "encode_message_indexes",
           "PROTOBUF", "WKT_PREFIX"]

PROTOBUF = "PROTOBUF"
WKT_PREFIX = "google/protobuf/"
MAIN_FILE = "__schema__.proto"
MAX_INDEXES = 64
BATCH_PACKAGE = "icerouter_batch"


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """Confluent's message-index bytes (``b"\\x00"`` for ``[0]``)."""
    if list(indexes) == [0]:
        return b"\x00"
    return _varint(_zigzag(len(indexes))) + b"".join(_varint(_zigzag(i)) for i in indexes)


def _read_varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise DecodeError("truncated message-index list")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise DecodeError("message-index varint too long")
    return (result >> 1) ^ -(result & 1), pos


def read_message_indexes(buf: bytes, pos: int) -> tuple[tuple[int, ...], int]:
    """(message indexes, position of the protobuf payload) of one value."""
    if pos < len(buf) and buf[pos] == 0:
        return (0,), pos + 1
    count, pos = _read_varint(buf, pos)
    if count < 0 or count > MAX_INDEXES:
        raise DecodeError(f"message-index count {count} out of range")
    out = []
    for _ in range(count):
        index, pos = _read_varint(buf, pos)
        out.append(index)
    return tuple(out), pos


def _wkt_include() -> str:
    import grpc_tools
    return os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")


def _compile(text: str, references: Sequence[tuple[str, str]]) -> list[descriptor_pb2.FileDescriptorProto]:
    """FileDescriptorProtos of ``text`` and everything it imports, dependencies first."""
    from grpc_tools import _protoc_compiler as protoc  # deferred: a 10 MB extension, only for .proto text

    with tempfile.TemporaryDirectory(prefix="icerouter-proto-") as tmp:
        for name, ref_text in references:
            if name.startswith(WKT_PREFIX):
                continue  # grpcio-tools' own copy
            path = os.path.normpath(os.path.join(tmp, name))
            if not path.startswith(tmp + os.sep):
                raise ValueError(f"reference name {name!r} leaves the schema directory")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(ref_text)
        with open(os.path.join(tmp, MAIN_FILE), "w", encoding="utf-8") as fh:
            fh.write(text)
        includes = [tmp.encode(), _wkt_include().encode()]
        try:  # structured errors, nothing on stderr
            protoc.get_protos(MAIN_FILE.encode(), includes)
        except protoc.ProtocErrors as exc:
            raise ValueError(str(exc).replace(MAIN_FILE, "<schema>")) from None
        out = os.path.join(tmp, "out.pb")
        rc = protoc.run_main([b"protoc", b"-I" + includes[0], b"-I" + includes[1], b"--include_imports",
                              b"--descriptor_set_out=" + out.encode(), MAIN_FILE.encode()])
        if rc != 0:
            raise ValueError(f"protoc exited with {rc}")
        with open(out, "rb") as fh:
            return list(descriptor_pb2.FileDescriptorSet.FromString(fh.read()).file)


def _serialized(text: str) -> descriptor_pb2.FileDescriptorProto | None:
    """The FileDescriptorProto of a base64 schema text, None when the text is not one."""
    stripped = text.strip()
    if not stripped or any(c.isspace() for c in stripped) or ";" in stripped:
        return None
    try:
        raw = base64.b64decode(stripped, validate=True)
        proto = descriptor_pb2.FileDescriptorProto.FromString(raw)
    except (binascii.Error, ValueError, Exception):  # not base64 / not a descriptor
        return None
    return proto if proto.message_type or proto.name else None


def _add_serialized(pool: descriptor_pool.DescriptorPool, protos: list, done: set[str]) -> None:
    by_name = {p.name: p for p in protos}

    def add(p: descriptor_pb2.FileDescriptorProto) -> None:
        if p.name in done:
            return
        done.add(p.name)
        for dep in p.dependency:
            if dep in by_name:
                add(by_name[dep])
            elif dep.startswith(WKT_PREFIX) and dep not in done:
                # the runtime's own copy (e.g. google.protobuf.timestamp_pb2 registers timestamp.proto)
                importlib.import_module("google.protobuf." + dep[len(WKT_PREFIX):-len(".proto")] + "_pb2")
                wkt = descriptor_pb2.FileDescriptorProto()
                descriptor_pool.Default().FindFileByName(dep).CopyToProto(wkt)
                add(wkt)
        pool.Add(p)
    for p in protos:
        add(p)


@dataclass
class ProtobufFile:
    """One registered Protobuf schema: its file descriptor and message classes."""

    file: Any
    top: list = field(default_factory=list)   # the file's messages in declaration order
    _classes: dict = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def message(self, indexes: Sequence[int]) -> Any:
        """The message descriptor a message-index list names; DecodeError if it names none."""
        if not indexes:
            raise DecodeError("empty message-index list")
        candidates = self.top
        desc = None
        for depth, i in enumerate(indexes):
            if not 0 <= i < len(candidates):
                where = self.file.name if depth == 0 else desc.full_name
                raise DecodeError(f"message index {list(indexes)} names no message of {where} "
                                  f"({len(candidates)} message(s) at that level)")
            desc = candidates[i]
            candidates = list(desc.nested_types)
        return desc

    def message_class(self, desc: Any) -> type:
        cls = self._classes.get(desc.full_name)
        if cls is None:
            with self._lock:
                cls = self._classes.setdefault(desc.full_name, message_factory.GetMessageClass(desc))
        return cls

    def batch_class(self, desc: Any) -> type:
        """A message ``{ repeated <desc> items = 1; bytes pad = 15; }`` in ``desc``'s pool: many
        payloads framed as its ``items`` are parsed by one upb call (registry/protobuf_decode.py)."""
        key = ("batch", desc.full_name)
        cls = self._classes.get(key)
        if cls is None:
            with self._lock:
                cls = self._classes.get(key)
                if cls is None:
                    name = "Items_" + desc.full_name.replace(".", "_")
                    proto = descriptor_pb2.FileDescriptorProto(name=f"{BATCH_PACKAGE}/{name}.proto",
                                                               package=BATCH_PACKAGE, syntax="proto3",
                                                               dependency=[desc.file.name])
                    msg = proto.message_type.add(name=name)
                    msg.field.add(name="items", number=1, type=descriptor_pb2.FieldDescriptorProto.TYPE_MESSAGE,
                                  label=descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED,
                                  type_name="." + desc.full_name)
                    msg.field.add(name="pad", number=15, type=descriptor_pb2.FieldDescriptorProto.TYPE_BYTES,
                                  label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL)
                    desc.file.pool.Add(proto)
                    cls = message_factory.GetMessageClass(
                        desc.file.pool.FindMessageTypeByName(f"{BATCH_PACKAGE}.{name}"))
                    self._classes[key] = cls
        return cls


def load_protobuf(schema_str: str, references: Sequence[tuple[str, str]] = (), *,
                  schema_id: int | str | None = None) -> ProtobufFile:
    """Load a registry Protobuf schema (text or serialized) with its references."""
    pool = descriptor_pool.DescriptorPool()
    try:
        main = _serialized(schema_str)
        if main is not None:
            refs = []
            for name, text in references:
                ref = _serialized(text)
                if ref is None:
                    raise ValueError(f"reference {name!r} is not a serialized descriptor like the schema")
                ref.name = name  # what the schema imports it as
                refs.append(ref)
            main.name = main.name or MAIN_FILE
            _add_serialized(pool, refs + [main], set())
            fd = pool.FindFileByName(main.name)
        else:
            protos = _compile(schema_str, references)
            for p in protos:
                pool.Add(p)
            fd = pool.FindFileByName(MAIN_FILE)
    except Exception as exc:  # invalid text or descriptor: terminal for this id
        raise UnsupportedSchemaType(f"invalid Protobuf schema: {exc}", schema_id=schema_id,
                                    schema_type=PROTOBUF) from None
    if not fd.message_types_by_name:
        raise UnsupportedSchemaType("the schema defines no message", schema_id=schema_id,
                                    schema_type=PROTOBUF)
    order = descriptor_pb2.FileDescriptorProto.FromString(fd.serialized_pb).message_type
    return ProtobufFile(fd, [fd.message_types_by_name[m.name] for m in order])
