"""Read tables back through DuckDB, an independent Iceberg reader, and summarise them."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping
from urllib.parse import urlparse

import duckdb

from router.catalog import get_catalog
from router.config import CatalogConfig


def _load_extension(con, name: str) -> None:
    module = __import__(f"duckdb_extension_{name}")
    base = Path(module.__path__[0]) / "extensions"
    found = sorted((base / f"v{duckdb.__version__}").rglob(f"{name}.duckdb_extension")) or sorted(
        base.rglob(f"{name}.duckdb_extension"))
    if not found:
        raise FileNotFoundError(f"DuckDB extension {name} not found under {base}")
    con.execute(f"LOAD '{found[0]}'")


def duckdb_connect(io_properties: Mapping[str, Any] | None = None):
    """In-memory DuckDB with the iceberg and avro extensions loaded from their PyPI wheels (offline).

    With pyiceberg S3 FileIO properties (``s3.endpoint``, keys...), httpfs is loaded too and an
    S3 secret made from them, so ``iceberg_scan('s3://...')`` reads the same objects pyiceberg
    wrote. Keys missing from the properties come from ``AWS_ACCESS_KEY_ID`` /
    ``AWS_SECRET_ACCESS_KEY``, as pyiceberg's own fallback does.

    DuckDB's external file cache is off: with it on, DuckDB 1.5.5 can hand one deletion vector's
    bytes to another from a Puffin file holding several (format v3; Java writes such files too),
    and a scan then shows deleted rows and hides live ones (docs/v3.md, readers).
    """

    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False,
                                 "enable_external_file_cache": False})
    for name in ("avro", "iceberg"):
        _load_extension(con, name)
    props = {k: str(v) for k, v in (io_properties or {}).items()}
    if any(k.startswith("s3.") for k in props):
        _load_extension(con, "httpfs")
        con.execute(f"CREATE SECRET icerouter_s3 ({', '.join(_s3_secret(props))})")
    return con


def _s3_secret(props: Mapping[str, str]) -> list[str]:
    def quote(value: str) -> str:
        return "'" + value.replace("'", "''") + "'"

    key = props.get("s3.access-key-id") or os.environ.get("AWS_ACCESS_KEY_ID")
    secret = props.get("s3.secret-access-key") or os.environ.get("AWS_SECRET_ACCESS_KEY")
    token = props.get("s3.session-token") or os.environ.get("AWS_SESSION_TOKEN")
    parts = ["TYPE s3", f"REGION {quote(props.get('s3.region') or os.environ.get('AWS_REGION') or 'us-east-1')}"]
    parts += [f"KEY_ID {quote(key)}"] if key else []
    parts += [f"SECRET {quote(secret)}"] if secret else []
    parts += [f"SESSION_TOKEN {quote(token)}"] if token else []
    endpoint = props.get("s3.endpoint")
    if endpoint:
        parsed = urlparse(endpoint if "://" in endpoint else f"https://{endpoint}")
        parts += [f"ENDPOINT {quote(parsed.netloc)}", f"USE_SSL {'true' if parsed.scheme == 'https' else 'false'}"]
    if props.get("s3.path-style-access", "").lower() == "true" or endpoint:
        parts.append("URL_STYLE 'path'")
    return parts


def metadata_path(table) -> str:
    location = table.metadata_location
    return location[len("file://"):] if location.startswith("file://") else location


def table_of_tables(catalog_config: CatalogConfig, dlq_table: str | None = "ops.dead_letters") -> str:
    catalog = get_catalog(catalog_config)
    con = duckdb_connect(catalog_config.properties)
    rows = []
    dead_by_topic: dict[str, int] = {}
    dead_by_reason: dict[str, int] = {}
    for namespace in sorted(catalog.list_namespaces()):
        for ident in sorted(catalog.list_tables(namespace)):
            name = ".".join(ident)
            table = catalog.load_table(name)
            if table.metadata.current_snapshot_id is None:
                count = 0
            else:
                count = con.execute(f"SELECT count(*) FROM iceberg_scan('{metadata_path(table)}')").fetchone()[0]
            if name == dlq_table and count:
                for topic, error_class, n in con.execute(
                        "SELECT coalesce(topic, '(no topic)'), coalesce(error_class, '(unknown)'), count(*) "
                        f"FROM iceberg_scan('{metadata_path(table)}') GROUP BY ALL").fetchall():
                    dead_by_topic[topic] = dead_by_topic.get(topic, 0) + n
                    dead_by_reason[error_class] = dead_by_reason.get(error_class, 0) + n
            files = deletes = 0
            if table.metadata.current_snapshot_id is not None:
                summary = table.current_snapshot().summary
                files = int(summary.get("total-data-files", 0))
                deletes = int(summary.get("total-delete-files", 0))
            key = ",".join(sorted(table.schema().identifier_field_names())) or "-"
            rows.append((name, count, len(table.schema().fields), len(table.metadata.schemas),
                         len(table.metadata.snapshots), files, deletes, key))
    con.close()
    header = ("table", "rows", "columns", "schema versions", "snapshots", "data files", "delete files", "key")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    lines = ["  ".join(str(h).ljust(w) for h, w in zip(header, widths))]
    lines.append("  ".join("-" * w for w in widths))
    for r in rows:
        lines.append("  ".join(str(v).ljust(w) if i == 0 else f"{v:,}".rjust(w) if isinstance(v, int) else str(v)
                               for i, (v, w) in enumerate(zip(r, widths))))
    if dead_by_topic:
        lines.append("")
        lines.append("dead letters by source topic: " + ", ".join(f"{k}={v}" for k, v in sorted(dead_by_topic.items())))
        lines.append("dead letters by reason: " + ", ".join(f"{k}={v}" for k, v in sorted(dead_by_reason.items())))
    return "\n".join(lines)
