"""One job per name with the real `icerouter run` process: a second start with the same `job.name`
is refused at once with one line, and after the first is SIGKILLed its successor on the same host
starts at once (the holder's process is gone; elsewhere the lease's expiry decides, see
tests/router/catalog/test_lease.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
import yaml

from router.version import version
from tests.router.driver.test_job_e2e import LOCAL_SPARK, _run, _wait

pytestmark = pytest.mark.slow

LEASE = 60  # a SIGKILLed holder's lease outlives it: only the dead process lets the successor in


def test_a_second_job_with_the_same_name_is_refused_until_the_lease_expires(tmp_path, kafka_bootstrap,
                                                                           registry_url, unique_name):
    prefix = unique_name("ls")
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": kafka_bootstrap, "topics": [f"{prefix}.none"]},
        "registry": {"url": registry_url},
        "catalog": {"name": "ls", "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp_path / "checkpoint"), "trigger_seconds": 1,
                "status_file": str(tmp_path / "status.json"), "spark": LOCAL_SPARK, "lease_seconds": LEASE},
        "tables": {"allowed_namespaces": [f"{prefix}_ops"]},
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    }))
    first = subprocess.Popen([sys.executable, "-m", "router.cli", "run", "--config", str(config)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait(lambda: (tmp_path / "checkpoint").exists(), 180, first)  # its query runs: it holds the lease
        started = time.monotonic()
        second = _run(config, "--available-now", timeout=120)
        assert second.returncode == 2, second.stderr[-2000:]
        [line] = [ln for ln in second.stderr.splitlines() if ln.startswith("icerouter: error:")]
        assert f"job 'job_{prefix}' is already running (pid {first.pid} " in line
        assert time.monotonic() - started < 60 and "Traceback" not in second.stderr
        first.send_signal(signal.SIGKILL)  # a crash: the lease is not released, and has not expired
        first.wait(30)
        # on the same host the holder's process is seen to be gone: no need to wait out its lease
        successor = _run(config, "--available-now", timeout=300)
        assert successor.returncode == 0, successor.stderr[-3000:]
        assert "lease on job" in successor.stderr
        # the real process's start line names the installed version first (router/cli/commands.py)
        assert f"icerouter {version()}: starting job job_{prefix} (config {config})" in successor.stderr
    finally:
        if first.poll() is None:
            first.kill()
