"""DuckDB as an independent Iceberg reader for tests (offline, no INSTALL).

The ``duckdb-extension-iceberg`` / ``duckdb-extension-avro`` wheels ship the
extension binaries inside the package (``extensions/v<duckdb version>/``);
we LOAD them by path, so no network access or extension directory is needed.
Tables in object storage are read through ``duckdb-extension-httpfs`` with an S3
secret made from the table's FileIO properties.
"""
from __future__ import annotations


import duckdb
import pyarrow as pa

from router.cli.summary import duckdb_connect, metadata_path

__all__ = ["connect", "read_iceberg", "read_iceberg_rows"]


def connect(io_properties=None) -> duckdb.DuckDBPyConnection:
    """In-memory DuckDB connection with avro + iceberg (and httpfs for S3 properties) from the wheels."""
    return duckdb_connect(io_properties)


def _metadata_location(table) -> str:
    return metadata_path(table)


def read_iceberg(table, order_by: str | None = None, columns: str = "*") -> pa.Table:
    """Read a pyiceberg ``Table``'s current snapshot with DuckDB's iceberg_scan (``columns`` may name
    the row lineage columns of a v3 table, which ``*`` leaves out)."""
    con = connect(table.io.properties)
    try:
        sql = f"SELECT {columns} FROM iceberg_scan('{_metadata_location(table)}')"
        if order_by:
            sql += f" ORDER BY {order_by}"
        return con.execute(sql).to_arrow_table()
    finally:
        con.close()


def read_iceberg_rows(table, order_by: str | None = None) -> list[dict]:
    """Same as :func:`read_iceberg`, as a list of row dicts."""
    return read_iceberg(table, order_by).to_pylist()
