"""Table access shared by the driver, the executors and the commands: catalog and table
handles cached per process, table creation with our defaults, and the snapshot expiry rule.

Importing the package teaches pyiceberg Iceberg's ``variant`` type (evolution/variant_type.py): every
table load in the job, the commands and maintenance goes through it."""

from evolution.variant_type import install as _install_variant_type
from router.catalog.expiry import expire_snapshots, snapshots_to_expire
from router.catalog.tables import (
    DEFAULT_TABLE_PROPERTIES, backoff, create_table, delete_quietly, get_catalog, load_table,
)

__all__ = ["DEFAULT_TABLE_PROPERTIES", "backoff", "create_table", "delete_quietly", "expire_snapshots", "get_catalog", "load_table",
           "snapshots_to_expire"]

_install_variant_type()
