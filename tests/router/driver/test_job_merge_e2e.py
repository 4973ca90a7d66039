"""The exactly-once scenario of test_job_e2e.py with small files merged into the batches' commits, on
PostgreSQL, read back by Java Iceberg too.

A file of its own so that the test workers (pytest-xdist, a file per worker at a time) run it beside
the plain scenario instead of after it.
"""

from __future__ import annotations

import pytest

from tests.router.driver.test_job_e2e import _exactly_once_scenario, catalog_props  # noqa: F401 - the fixture

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("catalog_props", ["postgres"], indirect=True)
def test_job_merging_small_files_at_every_commit_exactly_once(tmp_path, kafka_bootstrap, registry_url, catalog_props,
                                                             unique_name, java_reader):
    """The same scenario with small files merged into the batches' commits once a table holds two
    (router/catalog/merge_small.py): crash drill, fan-in, evolution and the dead letters stay exactly-once.
    Java Iceberg (tests/javaref/) then reads every table as DuckDB and pyiceberg do."""
    _exactly_once_scenario(tmp_path, kafka_bootstrap, registry_url, catalog_props, unique_name("m"),
                           maintenance={"merge_small_files_at": 2, "expire_every_commits": 1000},
                           java_reader=java_reader)
