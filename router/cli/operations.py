"""The operators' commands of the CLI (`status`, `dlq`): arguments in, library call, exit code out.

Kept apart from router/cli/commands.py so the job's own commands stay short; `build_parser`
adds these with `add_operations`. Exit codes as everywhere: 0 healthy / done, 1 over a threshold
(or letters that still fail), 2 usage or configuration error, 3 the catalog or the broker did
not answer (the message names its URL).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
from dataclasses import replace

from router.config import load_config

STATUS_EXIT_CODES = """exit codes:
  0  healthy: nothing over the thresholds given
  1  unhealthy: lag, dead letters or quarantined tables over a threshold given (listed as UNHEALTHY)
  2  usage or configuration error
  3  the Iceberg catalog or the Kafka brokers could not be reached, or the catalog does not exist
     (status never creates one; the message names the URL)"""


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is negative")
    return value


def add_operations(sub) -> None:
    """Add `status` (and `dlq`) to the subcommands of `icerouter`."""
    status = sub.add_parser(
        "status", help="the job's state from its tables and the broker, without Spark",
        description="Per table: last commit, rows, data and delete files, lag per partition; the lease "
                    "holder; quarantined tables; dead letters by reason. Lag is the broker's end offset "
                    "minus the job's next offset (docs/operations-status.md).",
        epilog=STATUS_EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    status.add_argument("--config", required=True, help="YAML configuration file of the job")
    status.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    status.add_argument("--max-lag", type=_non_negative, metavar="N",
                        help="unhealthy (exit 1) when a partition is more than N records behind")
    status.add_argument("--max-dead-letters", type=_non_negative, metavar="N",
                        help="unhealthy (exit 1) when the dead-letter table holds more than N letters")
    status.add_argument("--max-quarantined", type=_non_negative, metavar="N",
                        help="unhealthy (exit 1) when more than N tables are quarantined")
    status.add_argument("--require-running", action="store_true",
                        help="unhealthy (exit 1) when no live lease shows the job running")
    status.set_defaults(handler=cmd_status)

    dlq = sub.add_parser("dlq", help="list, summarize and replay dead letters",
                         description="The dead-letter table (dlq.table): list or summarize its letters, and "
                                     "replay a selection through the job's own path after a fix "
                                     "(docs/operations-dlq.md).")
    actions = dlq.add_subparsers(dest="action", required=True, parser_class=sub._parser_class)
    for name, text in (("list", "the selected letters, one a line (their bytes stay in the table)"),
                       ("summary", "counts of the selected letters by reason, table and topic"),
                       ("replay", "replay the selected letters into their tables, exactly once")):
        action = actions.add_parser(name, help=text, description=text,
                                    epilog=DLQ_EXIT_CODES if name == "replay" else None,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        action.add_argument("--config", required=True, help="YAML configuration file of the job")
        action.add_argument("--reason", help="letters of this reason only: the error class, as `summary` and "
                                             "the metrics name it (unmatched, wire_format, evolution_violation...)")
        action.add_argument("--table", help="letters headed for this table only")
        action.add_argument("--topic", help="letters of records from this topic only")
        action.add_argument("--since", type=_time, metavar="TIME",
                            help="letters that failed at or after TIME: ISO 8601 (UTC unless it says), "
                                 "or an age such as 30m, 6h, 2d")
        action.add_argument("--until", type=_time, metavar="TIME", help="letters that failed before TIME (as --since)")
        action.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
        if name == "list":
            action.add_argument("--limit", type=_non_negative, default=100, metavar="N",
                                help="at most N letters, oldest first (default 100; 0: all)")
        if name == "replay":
            action.add_argument("--all", action="store_true",
                                help="replay every letter (without a selection, replay refuses to run)")
            action.add_argument("--dry-run", action="store_true",
                                help="say what would land where and what would still fail; change nothing")
        action.set_defaults(handler=cmd_dlq)


DLQ_EXIT_CODES = """exit codes:
  0  every selected letter landed (or would, with --dry-run)
  1  some letters still fail: they stay in the dead-letter table with their new reason
  2  usage or configuration error (no selection and no --all, no dlq.table)
  3  the Iceberg catalog could not be reached or does not exist (dlq never creates one; the message
     names the URL)"""

AGE = re.compile(r"(\d+)\s*([smhd])")


def _time(text: str) -> dt.datetime:
    """ISO 8601 (naive: UTC) or an age (30m, 6h, 2d) before now."""
    age = AGE.fullmatch(text.strip())
    if age:
        seconds = int(age.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[age.group(2)]
        return dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds)
    try:
        when = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither an ISO 8601 time nor an age like 30m, 6h, 2d") from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def cmd_dlq(args) -> int:
    config = load_config(args.config)
    from router.exceptions import ConfigError
    from router.operations.letters import Selection

    if not config.dlq.table:
        raise ConfigError("dlq: the configuration has no dlq.table")
    selection = Selection(args.reason, args.table, args.topic, args.since, args.until)
    if args.action == "replay" and selection == Selection() and not args.all:
        raise ConfigError("dlq replay: give a selection (--reason, --table, --topic, --since, --until) or --all")
    selection = replace(selection, job=config.job.name)  # this job's letters (jobs may share the table)
    if args.action == "replay":
        from router.operations.dlq import catalog_reached
        from router.operations.replay import replay

        from router.lineage.emitter import command_lineage

        with catalog_reached(config), command_lineage(None if args.dry_run else config, "dlq_replay",
                                                      inputs=lambda: [config.dlq.table]) as run:
            report = replay(config, selection, dry_run=args.dry_run)
            run.outputs = sorted(report.rows_by_table)
        print(json.dumps(report.to_json(), indent=1, default=str) if args.format == "json" else report.text())
        return 1 if report.failed else 0
    from router.operations.dlq import list_letters, summary

    if args.action == "summary":
        print(summary(config, selection, args.format))
    else:
        print(list_letters(config, selection, args.format, args.limit))
    return 0


def cmd_status(args) -> int:
    config = load_config(args.config)
    from router.operations.status import status_command

    output, problems = status_command(config, fmt=args.format, max_lag=args.max_lag,
                                      max_dead_letters=args.max_dead_letters,
                                      max_quarantined=args.max_quarantined, require_lease=args.require_running)
    print(output)
    return 1 if problems else 0
