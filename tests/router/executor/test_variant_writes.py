"""Variant routes through the executor write path and the real commit (SQLite catalog): drifting
payloads land in one variant column across batches while the rest of the record evolves typed columns,
a whole-value route takes any JSON value, compaction rewrites the files; DuckDB decodes the values back
to the JSON that was sent, pyiceberg (with icerouter's type shim) reads the Variant bytes, and pyiceberg
alone cannot load the table: the error is its own."""

from __future__ import annotations

import json
import subprocess
import sys

import orjson
import pytest

from evolution.variant_type import VariantType
from router.catalog import load_table
from router.config import CatalogConfig
from router.maintenance import compact, plan_compaction
from tests.duckdb_reader import connect
from tests.registry.variant_decoder import decode_variant
from tests.router.executor.test_partition import make_dispatcher, run_batch, source_batch

MiB = 1 << 20

PAYLOADS = [{"kind": "click", "x": 1}, "plain text", [1, 2.5, None], {"kind": "buy", "items": [{"sku": "a", "n": 2}]},
            42, None, {"deeply": {"nested": {"list": [True, False, {"k": "v"}]}}}, {"kind": "click", "x": 10**12}]
DOCS = [[1, 2], {"free": "form"}, "just a string", 3.25, {"é": "ü", "": 0}]


@pytest.fixture
def catalog_config(tmp_path, unique_name):
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                                            "warehouse": (tmp_path / "wh").as_uri()})


def batch(topic: str, first: int, docs: list) -> list:
    return [source_batch([(topic, 0, first + i, orjson.dumps(d), None) for i, d in enumerate(docs)])]


def duck_rows(table, columns: str) -> list[tuple]:
    location = table.metadata_location.removeprefix("file://")
    con = connect()
    try:
        return con.execute(f"SELECT {columns} FROM iceberg_scan('{location}') ORDER BY _kafka_offset").fetchall()
    finally:
        con.close()


def test_variant_routes_write_drifting_json_that_readers_decode(catalog_config, unique_name):
    ns = unique_name("v")
    events, docs = f"{ns}.events", f"{ns}.docs"
    dispatcher = make_dispatcher(catalog_config, "http://127.0.0.1:1", ns, [
        {"name": "events", "topic": "events", "table": events, "format_version": 3,
         "format": {"type": "json", "variant": ["payload"]}},
        {"name": "docs", "topic": "docs", "table": docs, "format_version": 3,
         "format": {"type": "json", "variant": True, "variant_column": "doc"}}])
    first = [{"id": i, "payload": p} for i, p in enumerate(PAYLOADS[:4])]
    later = [{"id": 4 + i, "region": "eu", "payload": p} for i, p in enumerate(PAYLOADS[4:])] + [{"id": 8}]
    _, report = run_batch(dispatcher, batch("events", 0, first) + batch("docs", 0, DOCS[:2]), 0)
    assert not report.failed, report.failed
    _, report = run_batch(dispatcher, batch("events", 4, later) + batch("docs", 2, DOCS[2:]), 1)
    assert not report.failed, report.failed

    table = load_table(catalog_config, events, refresh=True)
    assert table.metadata.format_version == 3
    fields = {f.name: f.field_type for f in table.schema().fields}
    assert isinstance(fields["payload"], VariantType) and str(fields["region"]) == "string"  # evolved beside it
    sent = [d.get("payload", "<missing>") for d in first + later]

    # DuckDB decodes the Variant values (their groups carry Parquet's VARIANT annotation); it reads a
    # variant holding JSON null and a missing (SQL NULL) one alike
    read = duck_rows(table, "id, region, payload::JSON")
    assert [r[0] for r in read] == list(range(9)) and [r[1] for r in read] == [None] * 4 + ["eu"] * 4 + [None]
    assert [json.loads(text) for _, _, text in read] == [None if p == "<missing>" else p for p in sent]

    # pyiceberg with the shim reads the bytes; a spec-only decoder turns them back into what was sent
    rows = sorted(table.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [("<missing>" if r["payload"] is None else decode_variant(r["payload"]["metadata"], r["payload"]["value"]))
            for r in rows] == sent

    whole = load_table(catalog_config, docs, refresh=True)
    assert [f.name for f in whole.schema().fields if not f.name.startswith("_kafka")] == ["doc"]
    assert [json.loads(r[0]) for r in duck_rows(whole, "doc::JSON")] == DOCS

    # compaction rewrites the variant files (pyiceberg reads them, the rolling writer annotates them)
    result = compact(table, plan_compaction(table, MiB), MiB)
    assert result.files_removed >= 2 and result.files_added == 1 and result.rows == len(sent)
    table = load_table(catalog_config, events, refresh=True)
    assert len(table.inspect.files()) == 1
    compacted = [json.loads(t) for (t,) in duck_rows(table, "payload::JSON")]
    assert compacted == [None if p == "<missing>" else p for p in sent]


def test_pyiceberg_alone_cannot_load_a_table_with_a_variant_column(catalog_config, unique_name):
    """Without icerouter's shim (a fresh interpreter that imports pyiceberg only) the table's metadata does
    not parse: the error is pyiceberg's type parser, not our file."""
    ns = unique_name("p")
    dispatcher = make_dispatcher(catalog_config, "http://127.0.0.1:1", ns, [
        {"name": "docs", "topic": "docs", "table": f"{ns}.docs", "format_version": 3,
         "format": {"type": "json", "variant": True}}])
    _, report = run_batch(dispatcher, batch("docs", 0, DOCS), 0)
    assert not report.failed
    location = load_table(catalog_config, f"{ns}.docs", refresh=True).metadata_location
    script = ("import sys; from pyiceberg.table import StaticTable\n"
              "assert 'evolution' not in sys.modules\n"
              f"StaticTable.from_metadata({location!r})")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd="/",
                         env={"PATH": "/usr/bin:/bin"}, timeout=120)
    assert out.returncode == 1
    assert "pydantic_core._pydantic_core.ValidationError" in out.stderr
    assert "Unsupported field type: 'variant'" in out.stderr or "Type not recognized: variant" in out.stderr
