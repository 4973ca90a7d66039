"""The Grafana dashboard: importable (schema version, panels, a Prometheus data-source variable used
by every panel) and every metric it queries is one the job's /metrics exports."""

from __future__ import annotations

import json

from prometheus_client.parser import text_string_to_metric_families

from router.cli import main
from router.driver.metrics import JobMetrics
from router.observability.dashboard import SCHEMA_VERSION, dashboard, dashboard_json, queried_metrics
from tests.docs.helpers import ROOT
from tests.router.observability.test_alerts import exposition


def exported() -> set[str]:
    """Every series name router/driver/metrics.py's registry can render (families without a sample
    yet included), and those rendered at scrape time (lag, seconds since the last commit, lease)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",), "info": ("_info",)}
    names = {family.name + suffix for family in JobMetrics("j").registry.collect()
             for suffix in suffixes[family.type]}
    return names | {s.name for family in text_string_to_metric_families(exposition()) for s in family.samples}


def test_the_dashboard_is_importable():
    board = json.loads((ROOT / "conf" / "grafana" / "icerouter-dashboard.json").read_text())
    assert board == dashboard() and (ROOT / "conf" / "grafana" / "icerouter-dashboard.json").read_text() == dashboard_json()
    assert board["schemaVersion"] == SCHEMA_VERSION >= 36 and board["uid"] and board["title"]
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    assert variables["job"]["multi"] and variables["job"]["includeAll"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("rows committed", "lag per partition", "freshness", "commit latency", "dead letters by reason",
                  "replays", "quarantined", "maintenance"):
        assert topic in titles, topic
    for panel in board["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}" and panel["targets"]
        for target in panel["targets"]:
            assert 'job=~"$job"' in target["expr"] and target["datasource"]["uid"] == "${datasource}"


def test_every_queried_metric_is_exported():
    queried, names = queried_metrics(dashboard()), exported()
    assert queried and queried <= names, sorted(queried - names)
    # and the dashboard shows the families that matter
    assert {"icerouter_partition_lag_records", "icerouter_record_freshness_seconds_bucket",
            "icerouter_dead_letters_total", "icerouter_dead_letter_replays", "icerouter_tables_quarantined"} <= queried


def test_the_cli_prints_the_shipped_files(capsys):
    assert main(["observability", "dashboard"]) == 0
    assert capsys.readouterr().out == (ROOT / "conf" / "grafana" / "icerouter-dashboard.json").read_text()
    assert main(["observability", "alerts"]) == 0
    assert capsys.readouterr().out == (ROOT / "conf" / "prometheus" / "icerouter-alerts.yaml").read_text()
    assert main(["observability", "alerts", "--lag-window", "soon"]) == 2
