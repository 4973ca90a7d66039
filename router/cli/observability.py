"""`icerouter observability dashboard|alerts`: print the Grafana dashboard or the Prometheus rules
(router/observability/), the same files as conf/grafana/ and conf/prometheus/ ship."""

from __future__ import annotations

import argparse


def add_observability(sub) -> None:
    obs = sub.add_parser("observability", help="print the Grafana dashboard or the Prometheus alert rules",
                         description="What a platform team plugs in beside the job's /metrics "
                                     "(docs/monitoring.md); needs no configuration.")
    what = obs.add_subparsers(dest="artifact", required=True, parser_class=sub._parser_class)
    board = what.add_parser("dashboard", help="the Grafana dashboard JSON (import it; pick a Prometheus "
                                              "data source and the jobs)")
    board.add_argument("--title", default="icerouter", help="dashboard title (default icerouter)")
    board.set_defaults(handler=cmd_observability)
    rules = what.add_parser("alerts", help="the Prometheus alert rules (YAML, a rule_files entry)")
    rules.add_argument("--freshness-seconds", type=float, default=300.0, metavar="S",
                       help="alert when the p95 freshness is over S seconds for 10 minutes (default 300)")
    rules.add_argument("--lag-window", default="15m", metavar="D",
                       help="alert when a topic's lag grew over D and stayed above 0 (default 15m)")
    rules.add_argument("--no-batch-window", default="10m", metavar="D",
                       help="alert when no batch ran for D while records wait: N triggers (default 10m)")
    rules.add_argument("--docs-url", default=None, metavar="URL",
                       help="where the runbooks are: the monitoring page's URL (default docs/monitoring.md)")
    rules.set_defaults(handler=cmd_observability)


def _duration(text: str) -> str:
    import re

    if not re.fullmatch(r"\d+[smhd]", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a Prometheus duration such as 90s, 15m, 1h")
    return text


def cmd_observability(args) -> int:
    if args.artifact == "dashboard":
        from router.observability.dashboard import dashboard_json

        print(dashboard_json(args.title), end="")
        return 0
    from router.exceptions import ConfigError
    from router.observability.alerts import DOCS, Thresholds, alert_rules_yaml

    try:
        thresholds = Thresholds(args.freshness_seconds, _duration(args.lag_window), _duration(args.no_batch_window))
    except argparse.ArgumentTypeError as exc:
        raise ConfigError(f"observability alerts: {exc}") from None
    if thresholds.freshness_seconds <= 0:
        raise ConfigError("observability alerts: --freshness-seconds must be > 0")
    print(alert_rules_yaml(thresholds, args.docs_url or DOCS), end="")
    return 0
