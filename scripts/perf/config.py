"""Job configuration on a bench catalog: where the benchmarks commit and what the job is told.

A bench catalog is a SQLite catalog in a working directory (router/catalog's SqlCatalog, WAL
mode); `job_config` is the live job of scripts/bench.py on it, `maintenance_config` a job
config that only its maintenance reads. The narrow table (string and long columns in turn)
is what the commit, maintenance and manifest-reader benchmarks append one file at a time.
"""

from __future__ import annotations

from pathlib import Path

NAMESPACE = "bench"
FAN_IN_TABLE = f"{NAMESPACE}.all_orders"
SOAK_ROWS = 100  # rows per table per batch: 2,000 records/s over 20 tables at a 1 s trigger


def catalog_properties(root: Path, db: str = "catalog.db", warehouse: str = "warehouse") -> dict:
    """The properties of a SQLite catalog file and a warehouse directory in `root`."""
    return {"type": "sql", "uri": f"sqlite:///{root / db}", "warehouse": (root / warehouse).as_uri()}


def bench_catalog(root: Path, name: str = "bench", db: str = "c.db", warehouse: str = "wh"):
    """A `router.config.CatalogConfig` on a SQLite catalog in `root`."""
    from router.config import CatalogConfig

    return CatalogConfig(name, catalog_properties(root, db, warehouse))


def commit_setting(commit_in: str, group_commit: bool = True) -> dict:
    """`job.commit_in_tasks` for the config dict (tasks: in the Spark tasks, driver: on the driver), and
    `job.commit_consumer_group` (--group-commit off: the local broker rewrites its whole store, every
    record it holds, on each consumer group commit: router/devstack/broker.py)."""
    return {"commit_in_tasks": commit_in == "tasks", "commit_consumer_group": group_commit}


def group_commit(args) -> bool:
    return getattr(args, "group_commit", "on") == "on"


def job_config(args, root: Path, bootstrap: str, registry_url: str, client: dict, *,
               pattern: str = r"orders\..*", spark: dict | None = None, commit_in: str | None = None):
    """The job's config for a run; `spark` replaces the job.spark settings (master and all)."""
    from router.config import parse_config

    routes = [{"name": "per-topic", "topic": pattern, "table": NAMESPACE + ".{topic}"}]
    hot = getattr(args, "hot_topics", 0)
    if hot:  # a skewed estate: the first `hot` topics (orders.000 ...) commit every batch, the rest at a cadence
        names = "|".join(f"{i:03d}" for i in range(hot))
        cold = {"commit_after": args.cold_commit_after} if getattr(args, "cold_commit_after", None) else {}
        routes = [{"name": "hot", "topic": rf"orders\.(?:{names})", "table": NAMESPACE + ".{topic}"},
                  {"name": "cold", "topic": rf"orders\.(?!(?:{names})$)\d+", "table": NAMESPACE + ".{topic}", **cold}]
    value_format = getattr(args, "value_format", None)  # an unframed format: every route reads it
    if args.fan_in:
        routes.append({"name": "fan-in", "topic": pattern, "table": FAN_IN_TABLE})
    maintenance = {}
    if args.expire_every:
        maintenance["expire_every_commits"] = args.expire_every
    if args.max_snapshot_age:
        maintenance["max_snapshot_age_seconds"] = args.max_snapshot_age
    if getattr(args, "compact_after_files", None):
        maintenance["compact_after_files"] = args.compact_after_files
    if getattr(args, "merge_at", None) is not None:
        maintenance["merge_small_files_at"] = args.merge_at
    if getattr(args, "transient_codec", None):
        maintenance["transient_file_codec"] = args.transient_codec
    return parse_config({
        "kafka": {"bootstrap_servers": bootstrap, "pattern": pattern, "client": client,
                  "max_records_per_batch": args.batch_records, "catch_up": args.catch_up},
        "registry": {"url": registry_url},
        "catalog": {"name": "bench", "properties": catalog_properties(root)},
        "job": {"name": "bench", "checkpoint": str(root / "checkpoint"), "trigger_seconds": args.trigger,
                # scale1000 measures restarts with the driver JVM's class archive (off by default)
                **({"jvm_class_archive": True} if getattr(args, "mode", None) == "scale1000" else {}),
                **({"commit_threads": args.commit_threads} if args.commit_threads else {}),
                **commit_setting(commit_in or args.commit_in, group_commit(args)),
                # --metrics: the Prometheus endpoint on a free port (scraped during the run)
                **({"metrics": {"port": 0, "host": "127.0.0.1"}} if getattr(args, "metrics", False) else {}),
                "spark": spark or {"spark.master": "local[2]", "spark.driver.memory": "4g"}},
        "tables": {"allowed_namespaces": [NAMESPACE, "ops", "warm"]},
        "routes": [{**r, "format": value_format} for r in routes] if value_format else routes,
        "maintenance": maintenance,
    })


def maintenance_config(catalog, retain: int, compact_after: int):
    """A job config on `catalog` whose maintenance compacts once `compact_after` files arrived (never
    by the clock) and keeps `retain` snapshots; its source and registry are never contacted."""
    from router.config import parse_config

    return parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:9", "topics": ["unused"]}, "registry": {"url": "http://127.0.0.1:9"},
        "catalog": {"name": catalog.name, "properties": dict(catalog.properties)},
        "maintenance": {"retain_last_snapshots": retain, "max_snapshot_age_seconds": 1,
                        "compact_after_files": max(compact_after, 0), "compact_interval_seconds": 10 ** 9}})


def narrow_schema(columns: int = 10):
    """`columns` optional fields f0, f1, ...: strings at even positions, longs at odd ones."""
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType

    return Schema(*[NestedField(i + 1, f"f{i}", LongType() if i % 2 else StringType(), required=False)
                    for i in range(columns)])


def narrow_rows(schema, rows: int, text: str = "x" * 20):
    """An Arrow table of `rows` rows for `narrow_schema`: 0.. in the longs, `text` in the strings."""
    import pyarrow as pa

    return pa.table({f.name: pa.array(range(rows), pa.int64()) if i % 2 else pa.array([text] * rows)
                     for i, f in enumerate(schema.fields)})
