"""The shipped alert rules pass `promtool check rules`, and `promtool test rules` over series shaped
like the job's /metrics (here JobMetrics' own rendering; tests/router/driver/test_metrics_e2e.py
runs the same tests over a live job's scrape)."""

from __future__ import annotations

import subprocess
import threading
from types import SimpleNamespace

import pytest

from router.catalog.commit import CommitOutcome
from router.driver.metrics import JobMetrics
from router.driver.status import BatchStats
from router.observability.alerts import alert_rules_yaml
from tests.docs.helpers import ROOT
from tests.router.observability.promtool import promtool, run_rule_tests

pytestmark = pytest.mark.skipif(promtool() is None, reason="promtool (Debian prometheus) is not installed")


def exposition() -> str:
    metrics = JobMetrics("orders-router", lag=lambda: {"orders/0": 0, "orders/1": 0, "payments/0": 0})
    metrics.watch_lease(SimpleNamespace(lost=threading.Event()))
    outcomes = [CommitOutcome("raw.orders", "committed", rows=10, files=1, attempts=1, seconds=0.02, where="task",
                              committed_at=1000.0, oldest_record=998.0, bytes=100),
                CommitOutcome("all.events", "committed", rows=20, files=1, attempts=2, seconds=0.05,
                              committed_at=1000.0, oldest_record=999.0, bytes=200)]
    metrics.observe_batch(BatchStats(0, records=31, commit_seconds=0.1), outcomes, {"wire_format": 1})
    metrics.observe_group_commit(True)
    metrics.observe_replays({"landed": 0, "runs": 0})
    return metrics.exposition().decode()


def test_the_shipped_rules_are_the_generated_ones_and_pass_promtool_check():
    shipped = ROOT / "conf" / "prometheus" / "icerouter-alerts.yaml"
    assert shipped.read_text() == alert_rules_yaml()
    done = subprocess.run([promtool(), "check", "rules", str(shipped)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "SUCCESS: 9 rules found" in done.stdout, done.stdout + done.stderr


def test_the_rules_fire_on_a_troubled_job_and_stay_quiet_on_a_healthy_one(tmp_path):
    done = run_rule_tests(exposition(), tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_rule_has_a_runbook_on_the_monitoring_page():
    import re

    from router.observability.alerts import alert_rules

    page = (ROOT / "docs" / "monitoring.md").read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", page, re.M)}
    for rule in alert_rules()["groups"][0]["rules"]:
        path, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert path == "docs/monitoring.md" and anchor in anchors, rule["alert"]
        assert f"`{rule['alert']}`" in page, rule["alert"]
