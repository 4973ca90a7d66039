"""The Jackson relocation the Java reference reader needs (tests/javaref/relocate.py), on real jars:
pyspark's own Jackson, relocated, names no class outside the shaded package and keeps every
class file's structure after its constant pool."""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path

import pyspark

from tests.javaref.relocate import _FIXED, relocate_class, relocate_jars

JARS = Path(pyspark.__file__).parent / "jars"


def _utf8_entries(data: bytes) -> tuple[list[bytes], int]:
    """The class file's CONSTANT_Utf8 texts and the offset where its pool ends."""
    (count,) = struct.unpack_from(">H", data, 8)
    texts, pos, index = [], 10, 1
    while index < count:
        tag = data[pos]
        if tag == 1:
            (length,) = struct.unpack_from(">H", data, pos + 1)
            texts.append(data[pos + 3:pos + 3 + length])
            pos += 3 + length
        else:
            pos += 1 + _FIXED[tag]
            index += tag in (5, 6)
        index += 1
    return texts, pos


def test_jackson_relocated_into_icebergs_shaded_package(tmp_path):
    sources = [str(next(JARS.glob(f"jackson-{name}-2*.jar"))) for name in ("core", "databind", "annotations")]
    target = tmp_path / "shaded.jar"
    written = relocate_jars(sources, str(target))
    with zipfile.ZipFile(target) as jar:
        names = jar.namelist()
        assert written == sum(n.endswith(".class") for n in names) > 500
        assert "org/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactoryBuilder.class" in names
        assert all(n.startswith(("org/apache/iceberg/shaded/com/fasterxml/jackson/", "META-INF/")) for n in names)
        service = "META-INF/services/org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory"
        assert jar.read(service).decode().strip() == "org.apache.iceberg.shaded.com.fasterxml.jackson.core.JsonFactory"
        with zipfile.ZipFile(sources[1]) as original:
            before = original.read("com/fasterxml/jackson/databind/ObjectMapper.class")
        after = jar.read("org/apache/iceberg/shaded/com/fasterxml/jackson/databind/ObjectMapper.class")
    assert after == relocate_class(before)
    old_texts, old_end = _utf8_entries(before)
    new_texts, new_end = _utf8_entries(after)
    assert len(new_texts) == len(old_texts) and before[old_end:] == after[new_end:]
    assert any(b"Lorg/apache/iceberg/shaded/com/fasterxml/jackson/core/JsonFactory;" in t for t in new_texts)
    for text in new_texts:
        assert text.replace(b"org/apache/iceberg/shaded/com/fasterxml", b"").find(b"com/fasterxml") == -1, text
        assert text.replace(b"org.apache.iceberg.shaded.com.fasterxml", b"").find(b"com.fasterxml") == -1, text
