"""`promtool test rules` over series shaped like a job's /metrics: every series name and label set
comes from an exposition (a live job's scrape, or JobMetrics' own rendering), with the target
labels Prometheus adds (`job`, `instance`; the exported `job` label becomes `exported_job`, as a
scrape without honor_labels does). Scenarios: a healthy job (no alert), a troubled one (every
alert but IcerouterJobGone) and one whose /metrics went away (IcerouterJobGone)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

from router.observability.alerts import alert_rules

JOB, INSTANCE = "orders-router", "10.0.0.7:9464"


def promtool() -> str | None:
    """promtool's path; None where it is not installed, except in CI (ICEROUTER_TEST_REQUIRE_PROMTOOL,
    set by .ci/run), where a missing promtool fails instead of skipping the rules' tests."""
    found = shutil.which("promtool")
    if found is None and os.environ.get("ICEROUTER_TEST_REQUIRE_PROMTOOL"):
        raise RuntimeError("promtool is not installed (Debian package prometheus; .ci/run installs it)")
    return found


def samples(exposition: str) -> list[tuple[str, dict]]:
    """(series name, labels) of every sample, target labels added."""
    out = []
    for family in text_string_to_metric_families(exposition):
        for s in family.samples:
            labels = dict(s.labels)
            if "job" in labels:
                labels["exported_job"] = labels.pop("job")
            out.append((s.name, {**labels, "job": JOB, "instance": INSTANCE}))
    return out


def _series(name: str, labels: dict) -> str:
    return name + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _named(found: list, name: str) -> list[dict]:
    return [labels for n, labels in found if n == name]


def _healthy(found: list) -> list[dict]:
    series = []
    for name, labels in found:
        if name in ("icerouter_dead_letters_total", "icerouter_commit_failures_total"):
            values = "1x60"  # as many as ever: none new
        elif name.endswith("_total") or name.endswith("_bucket") or name.endswith("_count") or name.endswith("_sum"):
            le = labels.get("le")
            step = 1 if le is None or le == "+Inf" or float(le) >= 10 else 0  # fresh: every record under 10 s
            values = f"0+{step}x60"
        elif name == "icerouter_lease_held" or name.endswith("_info"):
            values = "1x60"
        else:  # gauges: lag 0, quarantine 0, seconds since the last commit small, replays as scraped
            values = "0x60"
        series.append({"series": _series(name, labels), "values": values})
    return series


def _troubled(found: list) -> list[dict]:
    series = []
    for name, labels in found:
        le = labels.get("le")
        if name == "icerouter_partition_lag_records":
            values = "0+50x60"  # growing
        elif name == "icerouter_batches_total":
            values = "5x60"  # no batch
        elif name == "icerouter_record_freshness_seconds_bucket":
            values = "0+1x60" if le == "+Inf" else "0x60"  # every record older than the largest bucket
        elif name == "icerouter_tables_quarantined":
            values = "1x60"
        elif name == "icerouter_lease_held":
            values = "0x60"
        elif name == "icerouter_dead_letters_total":
            values = "_x20 1+1x40"  # letters appear at 20m
        elif name == "icerouter_consumer_group_commits_total":
            values = "3x60"  # committed no more
        else:
            values = "1x60"
        series.append({"series": _series(name, labels), "values": values})
    group = _named(found, "icerouter_consumer_group_commits_total")
    if group:
        series.append({"series": _series("icerouter_consumer_group_commits_total", {**group[0], "outcome": "failed"}),
                       "values": "0+1x60"})
    for labels in _named(found, "icerouter_rows_committed_total"):
        series.append({"series": _series("icerouter_commit_failures_total", labels), "values": "0+1x60"})
    return series


def _alerts(name: str, found: list, by: tuple[str, ...], source: str, severity: str, anchor: str) -> dict:
    keys = sorted({tuple(labels.get(k, "") for k in by) for labels in _named(found, source)})
    return {"eval_time": "45m", "alertname": name, "exp_alerts": [
        {"exp_labels": {"job": JOB, "severity": severity, **dict(zip(by, key))},
         "exp_annotations": {"runbook_url": f"docs/monitoring.md#{anchor}"}} for key in keys]}


def rule_tests(exposition: str) -> dict:
    """The promtool test file for the rules of `alert_rules()` over `exposition`'s series."""
    found = samples(exposition)
    names = [r["alert"] for r in alert_rules()["groups"][0]["rules"]]
    group = _named(found, "icerouter_consumer_group_commits_total")
    troubled = [
        _alerts("IcerouterLagGrowing", found, ("topic",), "icerouter_partition_lag_records", "warning", "lag-growing"),
        {"eval_time": "45m", "alertname": "IcerouterFreshnessOverTarget", "exp_alerts": [
            {"exp_labels": {"job": JOB, "severity": "warning"},
             "exp_annotations": {"runbook_url": "docs/monitoring.md#freshness-over-target"}}]},
        _alerts("IcerouterDeadLetters", found, ("reason",), "icerouter_dead_letters_total", "warning",
                "dead-letters-appearing"),
        _alerts("IcerouterTableQuarantined", found, (), "icerouter_tables_quarantined", "critical", "table-quarantined"),
        _alerts("IcerouterLeaseLost", found, (), "icerouter_lease_held", "critical", "lease-lost"),
        {"eval_time": "45m", "alertname": "IcerouterConsumerGroupCommitFailing", "exp_alerts": [
            {"exp_labels": {"job": JOB, "severity": "warning"},
             "exp_annotations": {"runbook_url": "docs/monitoring.md#consumer-group-commit-failing"}}] if group else []},
        _alerts("IcerouterNoBatch", found, (), "icerouter_batches_total", "critical", "no-batch"),
        _alerts("IcerouterCommitFailures", found, ("table",), "icerouter_rows_committed_total", "warning",
                "commit-failures"),
        {"eval_time": "45m", "alertname": "IcerouterJobGone", "exp_alerts": []},
    ]
    assert {t["alertname"] for t in troubled} == set(names), "every rule is tested"
    gone = [{"series": s["series"], "values": "1x10 _x50"} for s in _healthy(found)]
    return {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": [
        {"name": "healthy job", "interval": "1m", "input_series": _healthy(found),
         "alert_rule_test": [{"eval_time": "45m", "alertname": n, "exp_alerts": []} for n in names]},
        {"name": "troubled job", "interval": "1m", "input_series": _troubled(found), "alert_rule_test": troubled},
        {"name": "metrics gone", "interval": "1m", "input_series": gone, "alert_rule_test": [
            {"eval_time": "30m", "alertname": "IcerouterJobGone", "exp_alerts": [
                {"exp_labels": {"job": JOB, "severity": "critical"},
                 "exp_annotations": {"runbook_url": "docs/monitoring.md#job-gone"}}]}]},
    ]}


def run_rule_tests(exposition: str, folder: Path) -> subprocess.CompletedProcess:
    """`promtool test rules` in `folder`: the rules with only their runbook annotation (the summaries'
    templates are checked by `promtool check rules` on the shipped file), and the tests above."""
    rules = alert_rules()
    for rule in rules["groups"][0]["rules"]:
        rule["annotations"] = {"runbook_url": rule["annotations"]["runbook_url"]}
    (folder / "rules.yaml").write_text(yaml.safe_dump(rules, sort_keys=False))
    (folder / "tests.yaml").write_text(yaml.safe_dump(rule_tests(exposition), sort_keys=False))
    return subprocess.run([promtool(), "test", "rules", "tests.yaml"], cwd=folder, capture_output=True, text=True,
                          timeout=120)
