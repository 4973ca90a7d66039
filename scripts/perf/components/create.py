"""Table creation: icerouter's (router/catalog create_table on our SqlCatalog) against pyiceberg's.

    python scripts/bench_create.py [--tables 200] [--namespaces 2] [--json FILE]

A new route over hundreds of topics creates hundreds of tables in one batch.
Both sides create the same tables (20 columns, the job's default properties),
interleaved table by table in one process so the ratio is not disturbed by load,
each on its own WAL-mode SQLite catalog file: ours through router/catalog, the
baseline as the job created tables before (pyiceberg's own SqlCatalog: create the
namespace unless it exists, then `create_table`, which checks the namespace,
reads its properties and re-reads the metadata file it wrote). Reports the
median / mean / p95 ms per table, the ratio, and the SQL statements per table.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from scripts.perf.config import bench_catalog, narrow_schema
from scripts.perf.report import emit


def summary(ms: list[float]) -> dict:
    ordered = sorted(ms)
    return {"median_ms": round(statistics.median(ms), 3), "mean_ms": round(statistics.mean(ms), 3),
            "p95_ms": round(ordered[int(0.95 * (len(ordered) - 1))], 3), "tables": len(ms)}


def run(tables: int, namespaces: int) -> dict:
    from pyiceberg.catalog.sql import SqlCatalog as PyicebergSqlCatalog
    from pyiceberg.exceptions import NamespaceAlreadyExistsError
    from sqlalchemy import event

    from router.catalog import DEFAULT_TABLE_PROPERTIES, create_table, get_catalog

    root = Path(tempfile.mkdtemp(prefix="icerouter-bench-create-"))
    ours_config = bench_catalog(root, "ours", "ours.db", "wh-ours")
    theirs = PyicebergSqlCatalog("theirs", uri=f"sqlite:///{root / 'theirs.db'}",
                                 warehouse=(root / "wh-theirs").as_uri())
    with theirs.engine.connect() as conn:  # same journal mode as ours: only the code path differs
        conn.exec_driver_sql("PRAGMA journal_mode=WAL")
    schema = narrow_schema(20)
    statements = {"ours": 0, "pyiceberg": 0}

    def counting(side):
        def seen(*_):
            statements[side] += 1
        return seen

    event.listen(get_catalog(ours_config).engine, "before_cursor_execute", counting("ours"))
    event.listen(theirs.engine, "before_cursor_execute", counting("pyiceberg"))

    def pyiceberg_create(name: str) -> None:
        try:
            theirs.create_namespace(name.rsplit(".", 1)[0])
        except NamespaceAlreadyExistsError:
            pass
        theirs.create_table(name, schema=schema, properties=DEFAULT_TABLE_PROPERTIES)

    ms = {"ours": [], "pyiceberg": []}
    for i in range(tables):
        name = f"bench{i % namespaces}.t{i:04d}"
        for side, create in (("ours", lambda n: create_table(ours_config, n, schema)),
                             ("pyiceberg", pyiceberg_create))[:: 1 if i % 2 else -1]:
            started = time.perf_counter()
            create(name)
            ms[side].append((time.perf_counter() - started) * 1000)
    result = {"benchmark": "create", "tables": tables, "namespaces": namespaces, "columns": 20,
              "ours": summary(ms["ours"]), "pyiceberg": summary(ms["pyiceberg"]),
              "statements_per_table": {k: round(v / tables, 2) for k, v in statements.items()}}
    result["ratio_median"] = round(result["pyiceberg"]["median_ms"] / result["ours"]["median_ms"], 2)
    result["ratio_mean"] = round(result["pyiceberg"]["mean_ms"] / result["ours"]["mean_ms"], 2)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tables", type=int, default=200)
    ap.add_argument("--namespaces", type=int, default=2)
    ap.add_argument("--json", dest="json_file")
    args = ap.parse_args(argv)
    return emit(run(args.tables, args.namespaces), args.json_file)

