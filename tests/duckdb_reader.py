"""DuckDB as an independent Iceberg reader for tests (offline, no INSTALL).

The ``duckdb-extension-iceberg`` / ``duckdb-extension-avro`` wheels ship the
extension binaries inside the package (``extensions/v<duckdb version>/``);
we LOAD them by path, so no network access or extension directory is needed.
"""
from __future__ import annotations

from pathlib import Path

import duckdb
import pyarrow as pa

__all__ = ["connect", "read_iceberg", "read_iceberg_rows", "extension_path"]


def extension_path(name: str) -> Path:
    """Path of the ``<name>.duckdb_extension`` binary shipped in its wheel."""
    module = __import__(f"duckdb_extension_{name}")
    base = Path(module.__path__[0]) / "extensions"
    version_dir = base / f"v{duckdb.__version__}"
    matches = sorted(version_dir.rglob(f"{name}.duckdb_extension")) or sorted(
        base.rglob(f"{name}.duckdb_extension"))
    if not matches:
        raise FileNotFoundError(f"no {name}.duckdb_extension under {base}")
    return matches[0]


def connect() -> duckdb.DuckDBPyConnection:
    """In-memory DuckDB connection with avro + iceberg loaded from the wheels."""
    con = duckdb.connect(config={"autoinstall_known_extensions": False,
                                 "autoload_known_extensions": False})
    for name in ("avro", "iceberg"):
        con.execute(f"LOAD '{extension_path(name)}'")
    return con


def _metadata_location(table) -> str:
    location = table.metadata_location
    return location[len("file://"):] if location.startswith("file://") else location


def read_iceberg(table, order_by: str | None = None) -> pa.Table:
    """Read a pyiceberg ``Table``'s current snapshot with DuckDB's iceberg_scan."""
    con = connect()
    try:
        sql = f"SELECT * FROM iceberg_scan('{_metadata_location(table)}')"
        if order_by:
            sql += f" ORDER BY {order_by}"
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()


def read_iceberg_rows(table, order_by: str | None = None) -> list[dict]:
    """Same as :func:`read_iceberg`, as a list of row dicts."""
    return read_iceberg(table, order_by).to_pylist()
