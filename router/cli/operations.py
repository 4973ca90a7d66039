"""The operators' commands of the CLI (`status`, `dlq`): arguments in, library call, exit code out.

Kept apart from router/cli/commands.py so the job's own commands stay short; `build_parser`
adds these with `add_operations`. Exit codes as everywhere: 0 healthy / done, 1 over a threshold
(or letters that still fail), 2 usage or configuration error, 3 the catalog or the broker did
not answer (the message names its URL).
"""

from __future__ import annotations

import argparse

from router.config import load_config

STATUS_EXIT_CODES = """exit codes:
  0  healthy: nothing over the thresholds given
  1  unhealthy: lag, dead letters or quarantined tables over a threshold given (listed as UNHEALTHY)
  2  usage or configuration error
  3  the Iceberg catalog or the Kafka brokers could not be reached (the message names the URL)"""


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


def cmd_status(args) -> int:
    config = load_config(args.config)
    from router.operations.status import status_command

    output, problems = status_command(config, fmt=args.format, max_lag=args.max_lag,
                                      max_dead_letters=args.max_dead_letters,
                                      max_quarantined=args.max_quarantined, require_lease=args.require_running)
    print(output)
    return 1 if problems else 0
