"""The version a user and an operator see: `icerouter --version`, the job's start line, /metrics build info.

All three read the installed distribution's metadata (pyproject.toml's `version`), so they cannot
disagree with `pip show icerouter`.
"""

from __future__ import annotations

import logging
import platform
import subprocess
import sys
from importlib import metadata

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

import router.driver.session as session
from router.cli import main
from router.driver.metrics import JobMetrics
from router.exceptions import ConfigError

INSTALLED = metadata.version("icerouter")


def test_version_flag_prints_the_installed_version():
    done = subprocess.run([sys.executable, "-m", "router.cli", "--version"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"icerouter {INSTALLED}"


def test_start_line_names_the_version_before_the_jvm_starts(tmp_path, monkeypatch, caplog):
    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": ["orders"]},
        "registry": {"url": "http://127.0.0.1:1"},
        "job": {"name": "orders_job"},
        "routes": [{"topic": "orders", "table": "raw.orders"}],
    }))

    def no_spark(_config):  # the line comes before the JVM: stop the run right there
        raise ConfigError("no Spark in this test")

    monkeypatch.setattr(session, "start_spark", no_spark)
    with caplog.at_level(logging.INFO, logger="icerouter.job"):
        assert main(["run", "--config", str(config)]) == 2
    [line] = [r.getMessage() for r in caplog.records if r.name == "icerouter.job"]
    assert line == f"icerouter {INSTALLED}: starting job orders_job (config {config})"


def test_metrics_serve_the_build_info():
    samples = [s for family in text_string_to_metric_families(JobMetrics("j").exposition().decode())
               for s in family.samples if s.name == "icerouter_build_info"]
    assert [(s.labels, s.value) for s in samples] == [({
        "version": INSTALLED, "python": platform.python_version(), "pyspark": metadata.version("pyspark"),
        "pyiceberg": metadata.version("pyiceberg")}, 1.0)]


@pytest.mark.parametrize("argv", [["--version", "run"], ["run", "--config", "x", "--version"]])
def test_version_flag_placement_is_argparse_s(argv, capsys):
    """--version belongs to the top-level command: before a command it answers, after one it is a usage error."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    if argv[0] == "--version":
        assert exit_.value.code == 0 and capsys.readouterr().out.strip() == f"icerouter {INSTALLED}"
    else:
        assert exit_.value.code == 2
