"""`pip install icerouter` without extras: the job and the CLI work, the local stack is not pulled in.

A fresh virtual environment (no system site-packages) gets the package from this checkout; `run --help`
and `plan` against the registry emulator and a SQLite catalog work there, and `demo` names the extra
it needs in one line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import yaml
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from router.devstack import LOCAL_STACK_DISTRIBUTIONS

pytestmark = pytest.mark.slow

ROOT = __import__("pathlib").Path(__file__).resolve().parent.parent
ORDER = json.dumps({"type": "record", "name": "Order", "fields": [{"name": "id", "type": "long"}]})


def test_the_lean_install_runs_the_cli_without_the_local_stack(tmp_path, registry_url, unique_name):
    venv, source = tmp_path / "venv", tmp_path / "source"
    # a copy of what the package is built from: pip builds in the tree it is given, and a build/ left in
    # the checkout would both litter it and feed stale modules to the next build
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for package in ("router", "registry", "evolution"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(source)],
                         capture_output=True, text=True, timeout=900)
    assert pip.returncode == 0, pip.stderr[-3000:]
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, check=True).stdout
    installed = {p["name"].lower() for p in json.loads(listed)}
    assert "icerouter" in installed and "pyspark" in installed and "pyiceberg" in installed
    # avro stays: the chosen confluent-kafka[avro] extra requires it
    assert installed.isdisjoint(set(LOCAL_STACK_DISTRIBUTIONS) - {"avro"}), installed
    assert "pytest" not in installed and "testcontainers" not in installed

    icerouter = str(venv / "bin" / "icerouter")
    helped = subprocess.run([icerouter, "run", "--help"], capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "--available-now" in helped.stdout

    topic = unique_name("lean")
    SchemaRegistryClient({"url": registry_url}).register_schema(f"{topic}-value", Schema(ORDER, "AVRO"))
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [topic]},
        "registry": {"url": registry_url},
        "catalog": {"name": "lean", "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                  "warehouse": (tmp_path / "wh").as_uri()}},
        "routes": [{"name": "raw", "topic": topic, "table": "raw.{topic}"}],
    }))
    from pyiceberg.catalog.sql import SqlCatalog

    # the job's first run creates the catalog; plan never does
    SqlCatalog("lean", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "wh").as_uri())
    planned = subprocess.run([icerouter, "plan", "--config", str(config), "--subject", f"{topic}-value",
                              "--format", "json"], capture_output=True, text=True, timeout=120)
    assert planned.returncode == 0, planned.stderr
    [plan] = json.loads(planned.stdout)["plans"]
    assert (plan["table"], plan["status"]) == (f"raw.{topic}", "create") and planned.stderr == ""

    demo = subprocess.run([icerouter, "demo"], capture_output=True, text=True, timeout=120)
    assert demo.returncode == 2 and demo.stdout == ""
    [line] = demo.stderr.strip().splitlines()
    assert line.startswith("icerouter: error: icerouter demo needs the local stack: pip install 'icerouter[local]'")
