"""The Java reference reader: one Spark 3.5 JVM with Iceberg's runtime, serving many reads.

Runs with the reference venv's Python (tests/javaref/environment.py), never the project's:
requests come as JSON lines on stdin, answers go as JSON lines on the original stdout
(the JVM's own output goes to stderr). Requests:

- ``{"op": "read", "metadata": ".../metadata/00003-....metadata.json"}``: the table's current
  snapshot, read by Iceberg's Spark source from its metadata file (no catalog); with
  ``"columns": [...]`` those columns only, Iceberg's metadata columns included.
- ``{"op": "sql", "statements": [...]}``: statements on the session, whose ``javaref`` catalog is a
  Hadoop catalog on ``--warehouse``; answers the last statement's rows.
- ``{"op": "generic", "metadata": ...}``: the table read by Java Iceberg's generic reader
  (``IcebergGenerics``, no Spark types in between), Variant values walked into JSON-like values; for
  types Spark 3.5 has not (``variant``). Needs commons-lang3 >= 3.13 first on the driver's class path.

Rows are canonical (see :func:`canonical`) so that they compare with DuckDB's and pyiceberg's.
Imports at module level are the standard library's only: the test process imports
:func:`canonical` from here.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import sys
import uuid
from decimal import Decimal

CATALOG = "javaref"


def canonical(value):
    """A JSON-able form that every reader's Python values map onto alike: timestamps as naive UTC
    ISO text, decimals and binaries as tagged text, map entries (key, value) as sorted pairs."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, Decimal):
        return f"dec:{value}"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return f"ts:{value.isoformat()}"
    if isinstance(value, datetime.date):
        return f"date:{value.isoformat()}"
    if isinstance(value, datetime.time):
        return f"time:{value.isoformat()}"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"bin:{bytes(value).hex()}"
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, tuple):  # a map entry
        return ["entry", canonical(value[0]), canonical(value[1])]
    if isinstance(value, list):
        items = [canonical(v) for v in value]
        if items and all(isinstance(i, list) and i[:1] == ["entry"] for i in items):
            items.sort(key=lambda i: json.dumps(i, sort_keys=True))
        return items
    if isinstance(value, dict):
        return {str(k): canonical(v) for k, v in value.items()}
    raise TypeError(f"no canonical form for {type(value).__name__}")


def canonical_rows(rows) -> list[str]:
    """Rows (dicts) as sorted canonical JSON lines: equal lists mean the same rows, in any order."""
    return sorted(json.dumps(canonical(r), sort_keys=True) for r in rows)


def _plain(value):
    """A Spark value as the Python values Arrow's to_pylist gives: structs as dicts, maps as entry tuples."""
    from pyspark.sql import Row

    if isinstance(value, Row):
        return {k: _plain(v) for k, v in zip(value.__fields__, value)}
    if isinstance(value, dict):
        return [(_plain(k), _plain(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _session(jars: list[str], warehouse: str):
    from pyspark.sql import SparkSession

    builder = (SparkSession.builder.master("local[1]").appName("icerouter-javaref")
               .config("spark.jars", ",".join(jars))
               .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
               .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
               .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
               .config(f"spark.sql.catalog.{CATALOG}.warehouse", warehouse)
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "1")
               .config("spark.driver.memory", "768m"))
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _variant(value):
    """A Java Iceberg VariantValue as the Python value of its JSON (objects as dicts, arrays as lists)."""
    kind = value.type().name()
    if kind == "OBJECT":
        obj, out = value.asObject(), {}
        names = obj.fieldNames().iterator()
        while names.hasNext():
            name = names.next()
            out[name] = _variant(obj.get(name))
        return out
    if kind == "ARRAY":
        array = value.asArray()
        return [_variant(array.get(i)) for i in range(array.numElements())]
    if kind == "NULL":
        return None
    return _java(value.asPrimitive().get())


def _java(value):
    """A value py4j did not map to Python (a timestamp, a byte array...) as its Java text."""
    from py4j.java_gateway import JavaObject

    return value.toString() if isinstance(value, JavaObject) else value


def _generic(spark, metadata: str) -> dict:
    jvm = spark._jvm
    table = jvm.org.apache.iceberg.hadoop.HadoopTables(spark._jsc.hadoopConfiguration()).load(metadata)
    fields = [(f.name(), f.type().typeId().name()) for f in table.schema().columns()]
    rows, records = [], jvm.org.apache.iceberg.data.IcebergGenerics.read(table).build().iterator()
    while records.hasNext():
        record = records.next()
        row = {}
        for name, kind in fields:
            value = record.getField(name)
            row[name] = _variant(value.value()) if kind == "VARIANT" and value is not None else _java(value)
        rows.append(canonical(row))
    return {"rows": rows, "columns": [name for name, _ in fields]}


def _answer(spark, request: dict) -> dict:
    if request["op"] == "generic":
        return _generic(spark, request["metadata"])
    if request["op"] == "read":
        df = spark.read.format("iceberg").load(request["metadata"])
        if request.get("columns"):  # metadata columns too (`_row_id`, `_last_updated_sequence_number`)
            df = df.select(*request["columns"])
    elif request["op"] == "sql":
        df = None
        for statement in request["statements"]:
            df = spark.sql(statement)
    else:
        raise ValueError(f"unknown op {request['op']!r}")
    rows = [canonical(_plain(r)) for r in df.collect()] if df is not None else []
    return {"rows": rows, "columns": df.columns if df is not None else []}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser()
    parser.add_argument("--jar", action="append", required=True)
    parser.add_argument("--warehouse", required=True)
    args = parser.parse_args(argv)
    os.environ["TZ"] = "UTC"
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # the JVM and Spark print on stdout: keep it for the answers alone
    spark = _session(args.jar, args.warehouse)
    answers.write(json.dumps({"ready": spark.version}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = _answer(spark, json.loads(line))
        except Exception as exc:  # noqa: BLE001 - the error goes back to the test, the JVM serves on
            trace = str(getattr(exc, "stackTrace", "") or "")  # a captured JVM exception's Java frames
            answer = {"error": f"{type(exc).__name__}: {str(exc)[:4000]}" + (f"\n{trace[:3000]}" if trace else "")}
        answers.write(json.dumps(answer) + "\n")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
