"""The exactly-once scenario of test_job_e2e.py on a Spark standalone cluster (a master and two workers).

A file of its own so that the test workers (pytest-xdist, a file per worker at a time) run it beside
the local-mode scenarios instead of after them.
"""

from __future__ import annotations

import os

import pytest

from tests.router.driver.test_job_e2e import _exactly_once_scenario

pytestmark = pytest.mark.slow


def test_job_on_a_standalone_cluster_end_to_end_exactly_once(tmp_path, kafka_bootstrap, registry_url, object_store,
                                                             spark_cluster, unique_name):
    """The same scenario submitted to a master and two workers, tables in S3 behind the REST catalog:
    source tasks, decoding and Parquet writes run in executor JVMs' Python workers, which share no
    process, cache or local file with the driver."""
    before = {app["id"] for app in spark_cluster.applications()}
    settings = {**spark_cluster.spark_settings(), "spark.driver.memory": "1g"}
    _exactly_once_scenario(tmp_path, kafka_bootstrap, registry_url, object_store.rest_catalog_properties(),
                           unique_name("c"), settings)
    apps = [app for app in spark_cluster.applications() if app["id"] not in before]
    assert len(apps) == 3 and all(app["name"] == "icerouter" for app in apps)  # the three runs
    # executors ran on both workers, and every run had some (a worker's work dir holds one folder per
    # application it ran executors for; a worker still busy with the killed run may miss the next one)
    ran = {w: set(os.listdir(os.path.join(spark_cluster.workdir, "work", str(w))))
           for w in range(spark_cluster.workers)}
    ids = {app["id"] for app in apps}
    assert all(ran[w] & ids for w in ran), f"a worker ran no executor: {ran}"
    assert ids <= set().union(*ran.values()), f"a run had no executor: {ids} vs {ran}"
