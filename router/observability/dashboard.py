"""The Grafana dashboard of one job or many: generated from code, shipped as JSON.

Plain dicts in Grafana's dashboard JSON model (schemaVersion 39, Grafana 10/11 import it as is):
grafanalib's last release dates from January 2024 and models an older panel set, and
grafana-foundation-sdk pins builds to one Grafana version each; a dashboard of timeseries and stat
panels needs neither. Variables: `datasource` (any Prometheus), `job` (the Prometheus target label,
one scrape job per icerouter job, multi-select), `table`. Every metric queried is one the job's
/metrics exports (tests/router/observability compares them with router/driver/metrics.py).
"""

from __future__ import annotations

import json
import re

UID = "icerouter-jobs"
SCHEMA_VERSION = 39
DS = {"type": "prometheus", "uid": "${datasource}"}
J = 'job=~"$job"'
JT = 'job=~"$job", table=~"$table"'

#: (row title, [(panel title, unit, [(expr, legend)], kind)])
ROWS = [
    ("Throughput", [
        ("Rows committed per table", "rows/s",
         [(f"sum by (job, table) (rate(icerouter_rows_committed_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}}")], "timeseries"),
        ("Records read", "rows/s",
         [(f"sum by (job) (rate(icerouter_records_read_total{{{J}}}[$__rate_interval]))", "{{job}}")], "timeseries"),
        ("Bytes committed per table", "Bps",
         [(f"sum by (job, table) (rate(icerouter_bytes_committed_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}}")], "timeseries"),
        ("Batches", "ops",
         [(f"sum by (job) (rate(icerouter_batches_total{{{J}}}[$__rate_interval]))", "{{job}}")], "timeseries"),
    ]),
    ("Lag and freshness", [
        ("Lag per partition", "short",
         [(f"sum by (job, topic, partition) (icerouter_partition_lag_records{{{J}}})",
           "{{job}} {{topic}}/{{partition}}")], "timeseries"),
        ("Freshness (commit time minus record time)", "s",
         [(f"histogram_quantile({q}, sum by (job, le) (rate(icerouter_record_freshness_seconds_bucket{{{J}}}"
           "[$__rate_interval])))", f"{{{{job}}}} p{int(q * 100)}") for q in (0.5, 0.95, 0.99)], "timeseries"),
        ("Seconds since each table's last commit", "s",
         [(f"max by (job, table) (icerouter_table_seconds_since_last_commit{{{JT}}})", "{{job}} {{table}}")],
         "timeseries"),
    ]),
    ("Commits", [
        ("Commit latency", "s",
         [(f"histogram_quantile({q}, sum by (job, where, le) (rate(icerouter_commit_duration_seconds_bucket{{{J}}}"
           "[$__rate_interval])))", f"{{{{job}}}} {{{{where}}}} p{int(q * 100)}") for q in (0.5, 0.95)],
         "timeseries"),
        ("Commit retries and failures", "ops",
         [(f"sum by (job, table) (rate(icerouter_commit_retries_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}} retries"),
          (f"sum by (job, table) (rate(icerouter_commit_failures_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}} failures")], "timeseries"),
        ("Batch phases", "s",
         [(f"sum by (job, phase) (rate(icerouter_batch_phase_seconds_total{{{J}}}[$__rate_interval]))",
           "{{job}} {{phase}}")], "timeseries"),
        ("Consumer-group commits", "ops",
         [(f"sum by (job, outcome) (rate(icerouter_consumer_group_commits_total{{{J}}}[$__rate_interval]))",
           "{{job}} {{outcome}}")], "timeseries"),
    ]),
    ("Dead letters, replays, quarantine", [
        ("Dead letters by reason", "rows/s",
         [(f"sum by (job, reason) (rate(icerouter_dead_letters_total{{{J}}}[$__rate_interval]))",
           "{{job}} {{reason}}")], "timeseries"),
        ("Replays (dlq replay)", "short",
         [(f"max by (job, outcome) (icerouter_dead_letter_replays{{{J}}})", "{{job}} {{outcome}}")], "timeseries"),
        ("Tables quarantined", "short",
         [(f"max by (job) (icerouter_tables_quarantined{{{J}}})", "{{job}}")], "stat"),
        ("Lease held", "short", [(f"min by (job) (icerouter_lease_held{{{J}}})", "{{job}}")], "stat"),
    ]),
    ("Maintenance", [
        ("Files committed (data, position deletes)", "ops",
         [(f"sum by (job, content) (rate(icerouter_files_committed_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{content}}")], "timeseries"),
        ("Expired files deleted", "ops",
         [(f"sum by (job, table) (rate(icerouter_expired_files_deleted_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}}")], "timeseries"),
        ("Rows deleted (upsert tables)", "rows/s",
         [(f"sum by (job, table) (rate(icerouter_rows_deleted_total{{{JT}}}[$__rate_interval]))",
           "{{job}} {{table}}")], "timeseries"),
        ("Version", "short",
         [(f"max by (job, version, pyspark, pyiceberg) (icerouter_build_info{{{J}}})",
           "{{job}} {{version}} (pyspark {{pyspark}}, pyiceberg {{pyiceberg}})")], "stat"),
    ]),
]


def _panel(pid: int, title: str, unit: str, targets: list, kind: str, x: int, y: int) -> dict:
    panel = {"id": pid, "type": kind, "title": title, "datasource": DS,
             "gridPos": {"h": 8, "w": 6 if kind == "stat" else 12, "x": x, "y": y},
             "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
             "targets": [{"refId": chr(ord("A") + i), "datasource": DS, "expr": expr, "legendFormat": legend}
                         for i, (expr, legend) in enumerate(targets)]}
    if kind == "timeseries":
        panel["options"] = {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}}
    return panel


def _variable(name: str, query: str, label: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DS,
            "query": {"query": query, "refId": f"{name}-var"}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"},
            "sort": 1}


def dashboard(title: str = "icerouter") -> dict:
    """The dashboard in Grafana's JSON model."""
    panels, pid, y = [], 1, 0
    for row, items in ROWS:
        panels.append({"id": pid, "type": "row", "title": row, "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        pid, y, x = pid + 1, y + 1, 0
        for title_, unit, targets, kind in items:
            width = 6 if kind == "stat" else 12
            if x + width > 24:
                x, y = 0, y + 8
            panels.append(_panel(pid, title_, unit, targets, kind, x, y))
            pid, x = pid + 1, x + width
        y += 8
    variables = [
        {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
         "current": {}, "refresh": 1, "hide": 0},
        _variable("job", "label_values(icerouter_build_info, job)", "Job"),
        _variable("table", 'label_values(icerouter_rows_committed_total{job=~"$job"}, table)', "Table"),
    ]
    return {"uid": UID, "title": title, "tags": ["icerouter", "kafka", "iceberg"], "timezone": "utc",
            "schemaVersion": SCHEMA_VERSION, "version": 1, "editable": True, "graphTooltip": 1,
            "time": {"from": "now-6h", "to": "now"}, "refresh": "30s",
            "templating": {"list": variables}, "annotations": {"list": []}, "panels": panels,
            "description": "icerouter jobs: throughput, lag, freshness, commits, dead letters, replays, "
                           "quarantine, maintenance (generated by router/observability/dashboard.py)"}


def dashboard_json(title: str = "icerouter") -> str:
    return json.dumps(dashboard(title), indent=2, sort_keys=False) + "\n"


METRIC = re.compile(r"\b(icerouter_[a-z_]+)\b")


def queried_metrics(board: dict) -> set[str]:
    """Every icerouter series name the dashboard's panels and variables query."""
    texts = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    texts += [v["query"]["query"] for v in board["templating"]["list"] if isinstance(v.get("query"), dict)]
    return {m for text in texts for m in METRIC.findall(text)}
