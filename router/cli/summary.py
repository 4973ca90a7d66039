"""Read tables back through DuckDB, an independent Iceberg reader, and summarise them."""

from __future__ import annotations

from pathlib import Path

from router.catalog import get_catalog
from router.config import CatalogConfig


def duckdb_connect():
    """In-memory DuckDB with the iceberg and avro extensions loaded from their PyPI wheels (offline)."""
    import duckdb  # deferred: only the demo, the scripts and the tests read tables back

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    for name in ("avro", "iceberg"):
        module = __import__(f"duckdb_extension_{name}")
        base = Path(module.__path__[0]) / "extensions"
        found = sorted((base / f"v{duckdb.__version__}").rglob(f"{name}.duckdb_extension")) or sorted(
            base.rglob(f"{name}.duckdb_extension"))
        if not found:
            raise FileNotFoundError(f"DuckDB extension {name} not found under {base}")
        con.execute(f"LOAD '{found[0]}'")
    return con


def metadata_path(table) -> str:
    location = table.metadata_location
    return location[len("file://"):] if location.startswith("file://") else location


def table_of_tables(catalog_config: CatalogConfig, dlq_table: str | None = "ops.dead_letters") -> str:
    catalog = get_catalog(catalog_config)
    con = duckdb_connect()
    rows = []
    dlq_by_table: dict[str, int] = {}
    for namespace in sorted(catalog.list_namespaces()):
        for ident in sorted(catalog.list_tables(namespace)):
            name = ".".join(ident)
            table = catalog.load_table(name)
            if table.metadata.current_snapshot_id is None:
                count = 0
            else:
                count = con.execute(f"SELECT count(*) FROM iceberg_scan('{metadata_path(table)}')").fetchone()[0]
            if name == dlq_table and count:
                for target, topic, n in con.execute(
                        f"SELECT coalesce(table_name, '-'), topic, count(*) FROM iceberg_scan('{metadata_path(table)}') "
                        "GROUP BY ALL").fetchall():
                    dlq_by_table[target] = dlq_by_table.get(target, 0) + n
                    dlq_by_table[f"topic:{topic}"] = dlq_by_table.get(f"topic:{topic}", 0) + n
            files = 0
            if table.metadata.current_snapshot_id is not None:
                files = int(table.current_snapshot().summary.get("total-data-files", 0))
            rows.append((name, count, len(table.schema().fields), len(table.metadata.schemas),
                         len(table.metadata.snapshots), files))
    con.close()
    header = ("table", "rows", "columns", "schema versions", "snapshots", "data files")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(v).ljust(w) if i == 0 else f"{v:,}".rjust(w) if isinstance(v, int) else str(v)
                               for i, (v, w) in enumerate(zip(r, widths))))
    if dlq_by_table:
        lines.append("")
        lines.append("dead letters by source: " + ", ".join(f"{k}={v}" for k, v in sorted(dlq_by_table.items())))
    return "\n".join(lines)
