"""The exactly-once scenario of test_job_e2e.py on a Spark standalone cluster (a master and two workers),
with the job's Python environment from `icerouter pack`'s archive; and the spark-submit line of docs/deployment.md.

The cluster's workers see no source tree and no PYTHONPATH (`spark_cluster`): executors can import
icerouter only from the archive. The spark-submit test ships it as docs/deployment.md says (`--archives`: Spark
unpacks it in every executor's working directory); the exactly-once scenario's four applications run
the same archive unpacked once beside the driver (`spark.pyspark.python` its absolute bin/python, as on
nodes where the environment is installed in place), which spares 8 unpacks of ~770 MB on this machine.

A file of its own so that the test workers (pytest-xdist, a file per worker at a time) run it beside
the local-mode scenarios instead of after them.
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import router.cli.demo_data as data
from router.deploy.pack import EXECUTOR_PYTHON, site_packages_dir
from router.devstack.spark_cluster import spark_home
from tests.router.driver.test_job_e2e import Ledger, _exactly_once_scenario

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
# what a job's executors report about their Python workers (run by build_spark with the job's config)
PROBE = """
import json, sys
from router.config import load_config
from router.driver.session import build_spark

def where(_):
    import os, sys, evolution, pyarrow, pyspark, registry, router
    yield {"cwd": os.getcwd(), "executable": sys.executable, "path": sys.path, "router": router.__file__,
           "registry": registry.__file__, "evolution": evolution.__file__, "pyarrow": pyarrow.__file__,
           "pyspark": pyspark.__file__}

spark = build_spark(load_config(sys.argv[1]), {"spark.app.name": "icerouter-probe"})
print(json.dumps(spark.sparkContext.parallelize(range(2), 2).mapPartitions(where).collect()))
spark.stop()
"""


@pytest.fixture
def driver_dir(tmp_path, env_archive):
    """Where the driver starts: the archive unpacked as ./environment (the driver's JVM runs the Kafka
    source's planning in spark.pyspark.python, resolved here), as docs/deployment.md says for client mode."""
    driver = tmp_path / "driver"
    (driver / "environment").mkdir(parents=True)
    subprocess.run(["tar", "-xzf", env_archive["path"], "-C", str(driver / "environment")], check=True, timeout=300)
    yield driver
    shutil.rmtree(driver / "environment", ignore_errors=True)  # ~770 MB; pytest keeps recent runs' tmp dirs


def _executor_dirs(cluster, app_ids: set[str]) -> list[Path]:
    work = Path(cluster.workdir) / "work"
    return [executor for w in range(cluster.workers) for app in (work / str(w)).iterdir() if app.name in app_ids
            for executor in app.iterdir() if executor.is_dir()]


def test_job_on_a_standalone_cluster_end_to_end_exactly_once(tmp_path, kafka_bootstrap, registry_url, object_store,
                                                             spark_cluster, driver_dir, unique_name):
    """The same scenario submitted to a master and two workers, tables in S3 behind the REST catalog:
    source tasks, decoding and Parquet writes run in executor JVMs' Python workers, which share no
    process, cache or local file with the driver, and run the archive's Python (spark.pyspark.python
    in job.spark)."""
    environment = driver_dir / "environment"
    before = {app["id"] for app in spark_cluster.applications()}
    settings = {**spark_cluster.spark_settings(), "spark.driver.memory": "1g",
                "spark.pyspark.python": str(environment / "bin" / "python")}
    _exactly_once_scenario(tmp_path, kafka_bootstrap, registry_url, object_store.rest_catalog_properties(),
                           unique_name("c"), settings, driver_env={"PYTHONPATH": str(ROOT)}, driver_cwd=driver_dir)
    apps = [app for app in spark_cluster.applications() if app["id"] not in before]
    assert len(apps) == 3 and all(app["name"] == "icerouter" for app in apps)  # the three runs
    # executors ran on both workers, and every run had some (a worker's work dir holds one folder per
    # application it ran executors for; a worker still busy with the killed run may miss the next one)
    ran = {w: set(os.listdir(os.path.join(spark_cluster.workdir, "work", str(w))))
           for w in range(spark_cluster.workers)}
    ids = {app["id"] for app in apps}
    assert all(ran[w] & ids for w in ran), f"a worker ran no executor: {ran}"
    assert ids <= set().union(*ran.values()), f"a run had no executor: {ids} vs {ran}"

    # the same settings on the same cluster: the executors' Python workers import icerouter from there
    probe = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path / "router.yaml")], cwd=driver_dir,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-3000:]
    driver_paths = set(site.getsitepackages()) | {str(ROOT)}
    packages = environment / site_packages_dir()
    for seen in json.loads(probe.stdout.strip().splitlines()[-1]):
        assert Path(seen["cwd"]).is_relative_to(Path(spark_cluster.workdir) / "work"), seen  # an executor's
        assert all(Path(seen[m]).is_relative_to(packages) for m in ("router", "registry", "evolution", "pyarrow")), seen
        assert seen["executable"] == str(environment / "bin" / "python"), seen
        # pyspark is not in the archive: the worker's Spark puts its own pyspark.zip on the path
        assert "pyspark.zip" in seen["pyspark"] and driver_paths.isdisjoint(seen["path"]), seen


def test_spark_submit_runs_the_job_from_the_archive(tmp_path, kafka_bootstrap, registry_url, spark_cluster,
                                                    env_archive, driver_dir, unique_name):
    """The spark-submit line of docs/deployment.md, client mode: the driver (pyspark from Spark's pyspark.zip), its
    source planning and the executors all run the archive's Python; the job takes its master from
    spark-submit."""
    archive = env_archive["path"]
    topic = unique_name("submit")
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    ledger = Ledger()
    ledger.produce(kafka_bootstrap, [(topic, None, encode(data.order(i)), None) for i in range(30)],
                   lambda t, headers: [f"raw.{t}"])
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [topic],
                  "client": {"receive.message.max.bytes": 1_000_000_000}},
        "registry": {"url": registry_url},
        "catalog": {"name": "submit", "properties": props},
        "job": {"name": f"job_{topic}", "checkpoint": str(tmp_path / "checkpoint")},
        "routes": [{"name": "raw", "topic": topic, "table": "raw.{topic}"}],
    }))
    before = {app["id"] for app in spark_cluster.applications()}
    conf = {k: v for k, v in spark_cluster.spark_settings().items() if k != "spark.master"}
    submit = [os.path.join(spark_home(), "bin", "spark-submit"), "--master", spark_cluster.master_url,
              "--name", "icerouter", "--archives", f"{archive}#environment",
              "--conf", f"spark.pyspark.python={EXECUTOR_PYTHON}",
              "--conf", f"spark.pyspark.driver.python={EXECUTOR_PYTHON}",
              *[arg for key, value in conf.items() for arg in ("--conf", f"{key}={value}")],
              "environment/icerouter_main.py", "run", "--config", str(config), "--available-now"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYSPARK"))}
    result = subprocess.run(submit, cwd=driver_dir, env={**env, "SPARK_HOME": spark_home()}, capture_output=True,
                            text=True, timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]

    from pyiceberg.catalog import load_catalog

    table = load_catalog("submit", **props).load_table(f"raw.{topic}")
    rows = table.scan(selected_fields=("_kafka_offset",)).to_arrow()
    assert sorted(rows["_kafka_offset"].to_pylist()) == sorted(o for (_, _, o) in ledger.expected[f"raw.{topic}"])
    apps = [app for app in spark_cluster.applications() if app["id"] not in before]
    assert [app["name"] for app in apps] == ["icerouter"]  # on the cluster, not in a local master
    executors = _executor_dirs(spark_cluster, {apps[0]["id"]})
    assert executors and all((e / "environment" / "bin" / "python").exists() for e in executors)
