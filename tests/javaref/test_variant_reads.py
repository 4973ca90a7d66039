"""Variant columns the job writes, read by Java Iceberg 1.10's generic reader back to the JSON that was
sent; Spark 3.5 cannot read them and the error is Iceberg's Spark 3.5 schema conversion (Spark 3.5 has no
variant type), raised from the table's schema before any data file is opened.

Iceberg's Parquet variant reader calls commons-lang3 3.13+ (``Streams.of(Iterable)``); Spark 3.5 ships
3.12, so this reader's JVM gets the project's pyspark's commons-lang3 first on its class path (its own JVM:
the shared reader keeps Spark 3.5's jars as they are)."""

from __future__ import annotations

import glob
import json
import os

import pyspark
import pytest

from router.catalog import load_table
from tests.javaref.client import JavaReader, JavaReaderError, canonical
from tests.javaref.environment import find_reference
from tests.router.executor.test_partition import make_dispatcher, run_batch
from tests.router.executor.test_variant_writes import DOCS, PAYLOADS, batch, catalog_config  # noqa: F401

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def generic_reader(tmp_path_factory):
    ref = find_reference()
    if ref is None:
        if os.environ.get("ICEROUTER_TEST_REQUIRE_JAVAREF"):
            pytest.fail("the Java reference reader is not set up (python3 -m tests.javaref.environment)")
        pytest.skip("the Java reference reader is not set up (python3 -m tests.javaref.environment)")
    lang3 = sorted(glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "commons-lang3-*.jar")))
    root = tmp_path_factory.mktemp("javaref-variant")
    reader = JavaReader(ref, str(root / "warehouse"), str(root / "reader.log"), classpath_first=tuple(lang3[-1:]))
    yield reader
    reader.close()


def test_java_iceberg_reads_the_variant_values_spark_35_cannot(generic_reader, catalog_config, unique_name):
    ns = unique_name("jv")
    dispatcher = make_dispatcher(catalog_config, "http://127.0.0.1:1", ns, [
        {"name": "events", "topic": "events", "table": f"{ns}.events", "format_version": 3,
         "format": {"type": "json", "variant": ["payload"]}},
        {"name": "docs", "topic": "docs", "table": f"{ns}.docs", "format_version": 3,
         "format": {"type": "json", "variant": True}}])
    sent = [{"id": i, "payload": p} for i, p in enumerate(PAYLOADS)] + [{"id": 99}]
    _, report = run_batch(dispatcher, batch("events", 0, sent) + batch("docs", 0, DOCS), 0)
    assert not report.failed, report.failed

    events = load_table(catalog_config, f"{ns}.events", refresh=True)
    rows = sorted(generic_reader.read_generic(events), key=lambda r: r["id"])
    # Java tells a variant holding JSON null from a missing one (SQL NULL): both are None here, as sent
    assert [(r["id"], r["payload"]) for r in rows] == [(d["id"], canonical(d.get("payload"))) for d in sent]
    docs = load_table(catalog_config, f"{ns}.docs", refresh=True)
    assert sorted(json.dumps(r["value"], sort_keys=True) for r in generic_reader.read_generic(docs)) == \
        sorted(json.dumps(canonical(d), sort_keys=True) for d in DOCS)

    with pytest.raises(JavaReaderError) as refused:
        generic_reader.read(events)
    error = str(refused.value)
    assert "UnsupportedOperationException: Unsupported type: variant" in error
    assert "at org.apache.iceberg.spark.SparkSchemaUtil.convert" in error  # Spark 3.5's schema, not our file
    assert "parquet" not in error.lower()
