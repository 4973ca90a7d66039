"""Relocate Jackson into Iceberg's shaded package, as maven-shade does, without Maven.

The Iceberg Spark runtime jar on PyPI (snowpark-connect-deps-iceberg) refers to
``org.apache.iceberg.shaded.com.fasterxml.jackson`` but leaves those classes out.
Spark 3.5 ships the same Jackson (2.15.2) under its own name: rewriting the class
names in each class file's constant pool (CONSTANT_Utf8 entries hold every class
name, descriptor and string literal) and the entries' paths gives the missing jar.
"""

from __future__ import annotations

import re
import struct
import zipfile

SOURCE_PREFIX = "com/fasterxml/jackson"
TARGET_PREFIX = "org/apache/iceberg/shaded/com/fasterxml/jackson"

_SLASHED = re.compile(rb"(?<!shaded/)com/fasterxml/jackson")  # also inside descriptors: Lcom/...;
_DOTTED = re.compile(rb"(?<!shaded\.)com\.fasterxml\.jackson")

# Constant pool tags -> size of the entry after its tag (Utf8 is variable-sized).
_FIXED = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2, 17: 4, 18: 4, 19: 2, 20: 2}


def relocate_text(data: bytes) -> bytes:
    data = _SLASHED.sub(TARGET_PREFIX.encode(), data)
    return _DOTTED.sub(TARGET_PREFIX.replace("/", ".").encode(), data)


def relocate_class(data: bytes) -> bytes:
    """The class file with every CONSTANT_Utf8 entry relocated; everything after the pool is unchanged."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    (count,) = struct.unpack_from(">H", data, 8)
    out = [data[:10]]
    pos, index = 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            text = relocate_text(data[pos + 3:pos + 3 + length])
            out.append(bytes([1]) + struct.pack(">H", len(text)) + text)
            pos += 3 + length
        else:
            size = _FIXED.get(tag)
            if size is None:
                raise ValueError(f"unknown constant pool tag {tag} at {pos}")
            out.append(data[pos:pos + 1 + size])
            pos += 1 + size
            if tag in (5, 6):  # long and double take two slots
                index += 1
        index += 1
    out.append(data[pos:])
    return b"".join(out)


def relocate_jars(sources: list[str], target: str) -> int:
    """Write `target` with the classes and service files of `sources` relocated; returns the classes written.
    Java 9+ extras (module-info, META-INF/versions) are left out: the base classes run on any JVM."""
    written, seen = 0, set()
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as out:
        out.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        for source in sources:
            with zipfile.ZipFile(source) as jar:
                for info in jar.infolist():
                    name = info.filename
                    if info.is_dir() or name.startswith("META-INF/versions/") or name.endswith("module-info.class"):
                        continue
                    if name.startswith(SOURCE_PREFIX + "/") and name.endswith(".class"):
                        new_name, data = TARGET_PREFIX + name[len(SOURCE_PREFIX):], relocate_class(jar.read(name))
                        written += 1
                    elif name.startswith("META-INF/services/com.fasterxml.jackson"):
                        service = relocate_text(name[len("META-INF/services/"):].encode()).decode()
                        new_name = "META-INF/services/" + service
                        data = relocate_text(jar.read(name))
                    else:
                        continue
                    if new_name not in seen:
                        seen.add(new_name)
                        out.writestr(new_name, data)
    return written
