"""`.proto` schema files for plan and check: type detection, imports next to the file, refusals."""
from __future__ import annotations

from router.planning.inputs import PROTOBUF, SCHEMA_SUFFIXES, detect_schema_type, load_schema_file
from tests import protobuf_data as pb


def test_proto_file_with_a_local_import_maps_its_first_message(tmp_path):
    (tmp_path / "common").mkdir()
    (tmp_path / "common" / "money.proto").write_text(pb.MONEY)
    path = tmp_path / "orders.proto"
    path.write_text(pb.ALL_TYPES)
    loaded = load_schema_file(path)
    assert SCHEMA_SUFFIXES[".proto"] == PROTOBUF and loaded.kind == PROTOBUF and loaded.problem is None
    total = loaded.mapped.schema.find_field("total")
    assert [f.name for f in total.field_type.fields] == ["units", "currency"]
    assert detect_schema_type(pb.NESTED) == PROTOBUF  # `syntax = ...` without the suffix too


def test_unusable_proto_files_are_blocked_with_the_reason(tmp_path):
    recursive = tmp_path / "tree.proto"
    recursive.write_text(pb.RECURSIVE)
    assert "recursive message tree.Node" in load_schema_file(recursive).problem
    broken = tmp_path / "broken.proto"
    broken.write_text('syntax = "proto3";\nmessage X { strin a = 1; }\n')
    loaded = load_schema_file(broken)
    assert "strin" in loaded.problem and not loaded.readable
    missing = tmp_path / "orders.proto"
    missing.write_text(pb.ALL_TYPES)  # common/money.proto is not there
    assert "money.proto" in load_schema_file(missing).problem
