"""Catalog fixture for the evolution apply tests.

SQLite runs everywhere (a fresh catalog in tmp_path); PostgreSQL is used
through the session-wide ``postgres_catalog`` fixture when tests/conftest.py
provides it, each test in its own namespace.
"""
from __future__ import annotations

import uuid

import pytest
from pyiceberg.catalog.sql import SqlCatalog


@pytest.fixture(params=["sqlite", "postgres"])
def evo_catalog(request, tmp_path):
    """(catalog, namespace) with a unique, freshly created namespace."""
    if request.param == "sqlite":
        catalog = SqlCatalog("evo", uri=f"sqlite:///{tmp_path}/catalog.db",
                             warehouse=f"file://{tmp_path}/warehouse")
    else:
        try:
            catalog = request.getfixturevalue("postgres_catalog")
        except pytest.FixtureLookupError:
            pytest.skip("postgres_catalog fixture not provided by tests/conftest.py")
    namespace = f"evo_{uuid.uuid4().hex[:10]}"
    catalog.create_namespace(namespace)
    return catalog, namespace
