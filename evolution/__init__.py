"""Schemas in, plans out (pure). Importing the package teaches pyiceberg Iceberg's ``variant`` type
(evolution/variant_type.py): every process that reads a table schema imports this package first."""

from evolution.variant_type import install as _install_variant_type

_install_variant_type()
