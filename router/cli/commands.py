"""`icerouter` command line: parse arguments, call the library, map errors to exit codes.

Exit codes: 0 ok, 1 a change or schema is blocked / incompatible (or the job
failed), 2 usage or configuration error, 3 could not decide (`plan` / `check`:
the schema registry or the catalog was unreachable, timed out or refused us).
Errors are one line on stderr, never a traceback (set ICEROUTER_DEBUG=1 to see one).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import traceback
from typing import Callable, Sequence

from router.config import load_config
from router.cli.observability import add_observability
from router.cli.operations import add_operations
from router.deploy.defaults import COMPRESS_LEVEL, DEFAULT_OUTPUT
from router.exceptions import ConfigError, RouterError
from router.version import version

# Each command imports what it runs when it runs: `--help`, a usage error or a bad configuration
# answer at once, and `run` starts the JVM before the job's own imports (cmd_run).

EXIT_OK, EXIT_BLOCKED, EXIT_USAGE, EXIT_UNDECIDED = 0, 1, 2, 3
DECIDING_COMMANDS = ("plan", "check", "status")  # an unexpected error there is "could not decide", not "blocked"

EXIT_CODES = """exit codes:
  0  ok: every schema compatible, no table change blocked
  1  blocked: a schema is incompatible or invalid, or a table change is refused (or the job failed)
  2  usage or configuration error
  3  could not decide (plan, check), nothing found blocked: the schema registry or the Iceberg
     catalog was unreachable, timed out or refused us, or the catalog does not exist (plan and
     check never create one); the message names the service and its URL"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # usage errors: one line, exit 2
        self.print_usage(sys.stderr)
        print(f"icerouter: error: {message}", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="icerouter", description="Route Kafka topics into Apache Iceberg tables.",
                     epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("--version", action="version", version=f"icerouter {version()}",
                        help="print the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run the streaming job")
    run.add_argument("--config", required=True, help="YAML configuration file")
    run.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    run.set_defaults(handler=cmd_run)

    plan = sub.add_parser("plan", help="dry run: what would change in the tables", epilog=EXIT_CODES,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    plan.add_argument("--config", required=True)
    plan.add_argument("--subject", action="append", default=[], help="registry subject (repeatable); "
                      "SUBJECT (latest version) or SUBJECT:VERSION")
    plan.add_argument("--schema-file", help="local .avsc or JSON Schema file")
    plan.add_argument("--table", help="target table for --schema-file, with its namespace (raw.orders)")
    plan.add_argument("--topic", help="topic the --schema-file is for (default: the file name, then "
                      "kafka.topics): selects the routes, their projections and policies")
    plan.add_argument("--sample", action="append", default=[], metavar="TOPIC",
                      help="plan from the topic's latest records, decoded as its routes' formats read them "
                           "(repeatable; for topics without a registry: plain JSON, Kafka Connect JSON)")
    plan.add_argument("--records", type=int, default=None, metavar="N",
                      help="records --sample reads from the end of each topic (default 1000)")
    plan.add_argument("--format", choices=("text", "json"), default="text")
    plan.set_defaults(handler=cmd_plan)

    check = sub.add_parser("check", help="CI gate: registry compatibility + Iceberg evolvability",
                           epilog=EXIT_CODES, formatter_class=argparse.RawDescriptionHelpFormatter)
    check.add_argument("--config", required=True)
    check.add_argument("--schemas", required=True, help="directory of <subject>.avsc / <subject>.json files")
    check.add_argument("--format", choices=("text", "json", "junit"), default="text")
    check.set_defaults(handler=cmd_check)

    maintain = sub.add_parser("maintain", help="expire snapshots, compact small files, remove orphans")
    maintain.add_argument("--config", required=True)
    maintain.add_argument("--table", default="*", help="table name or glob pattern (default: all)")
    maintain.add_argument("--dry-run", action="store_true")
    maintain.set_defaults(handler=cmd_maintain)

    packer = sub.add_parser("pack", help="archive the job's Python environment for spark-submit --archives",
                            epilog="every node that runs the archive needs this machine's Python (same version, "
                                   "same path) on the same OS and CPU architecture")
    packer.add_argument("--output", default=DEFAULT_OUTPUT, help=f"archive to write (default: {DEFAULT_OUTPUT})")
    packer.add_argument("--include-pyspark", action="store_true",
                        help="also pack pyspark and py4j (default: left out, the cluster's Spark provides them)")
    packer.add_argument("--compress-level", type=int, choices=range(0, 10), default=COMPRESS_LEVEL, metavar="0-9",
                        help=f"gzip level (default {COMPRESS_LEVEL}; 1 is about twice as fast, ~13%% larger)")
    packer.set_defaults(handler=cmd_pack)

    demo = sub.add_parser("demo", help="embedded stack, sample data, live job")
    demo.add_argument("--topics", type=int, default=50)
    demo.add_argument("--records", type=int, default=20_000, help="records per phase")
    demo.add_argument("--workdir", default=None, help="where to keep the demo stack (default: temp dir)")
    demo.add_argument("--customers", type=int, default=2_000,
                      help="rows of the change stream's initial snapshot (as many changes follow)")
    demo.add_argument("--s3", action="store_true",
                      help="tables in object storage (local SeaweedFS) behind an Iceberg REST catalog")
    demo.set_defaults(handler=cmd_demo)
    add_operations(sub)  # status, dlq (router/cli/operations.py)
    add_observability(sub)  # observability dashboard|alerts (router/cli/observability.py)
    return parser


def cmd_run(args) -> int:
    config = load_config(args.config)
    # the job's first log line: which version runs which job (before the JVM starts)
    logging.getLogger("icerouter.job").info("icerouter %s: starting job %s (config %s)", version(),
                                            config.job.name, args.config)
    # deferred: only `run` and `demo` need pyspark. The JVM starts first, in a thread, while the
    # rest of the job is imported and the catalog and broker are read (the start's longest part)
    from router.driver.session import start_spark
    spark = start_spark(config)
    from router.driver.job import run
    run(config, available_now=args.available_now, spark=spark)
    return EXIT_OK


def cmd_plan(args) -> int:
    config = load_config(args.config)
    if not args.subject and not args.schema_file and not args.sample:
        raise ConfigError("plan: give --subject S (repeatable), --schema-file F --table T, or --sample TOPIC")
    if args.records is not None and args.records < 1:
        raise ConfigError(f"plan: --records must be >= 1, got {args.records}")
    if args.schema_file and not args.table:
        raise ConfigError("plan: --schema-file needs --table")
    from router.planning.plan import plan_command

    output, blocked, problems = plan_command(config, subjects=args.subject, schema_file=args.schema_file,
                                             table=args.table, fmt=args.format, topic=args.topic,
                                             samples=args.sample, records=args.records)
    print(output)
    for line in problems:
        print(f"icerouter: error: {line}", file=sys.stderr)
    return EXIT_BLOCKED if blocked else EXIT_OK


def cmd_check(args) -> int:
    config = load_config(args.config)
    from router.planning.check import check_command

    output, code, unreachable = check_command(config, args.schemas, fmt=args.format)
    print(output)
    for line in unreachable:
        print(f"icerouter: error: {line}", file=sys.stderr)
    return code


def cmd_maintain(args) -> int:
    config = load_config(args.config)
    from router.lineage.emitter import command_lineage
    from router.maintenance import maintain_command
    from router.maintenance.run import list_tables

    tables = lambda: list_tables(config.catalog.load(), args.table)  # noqa: E731 (listed by the lineage thread)
    with command_lineage(config if not args.dry_run else None, "maintain", inputs=tables, outputs=tables):
        output = maintain_command(config, args.table, dry_run=args.dry_run)
    print(output)
    return EXIT_OK


def cmd_pack(args) -> int:
    from router.deploy.pack import pack

    result = pack(args.output, include_spark=args.include_pyspark, compress_level=args.compress_level,
                  progress=lambda line: print(line, file=sys.stderr, flush=True))
    print(result.instructions())
    return EXIT_OK


def cmd_demo(args) -> int:
    from router.devstack import LOCAL_EXTRA_HINT, missing_local_stack

    missing = missing_local_stack()
    if missing:  # a lean install: the job and plan/check work, the embedded stack is an extra
        raise ConfigError(f"icerouter demo needs the local stack: {LOCAL_EXTRA_HINT} (missing: {', '.join(missing)})")
    from router.cli.demo import run_demo  # deferred: only `run` and `demo` need pyspark

    return run_demo(topics=args.topics, records=args.records, workdir=args.workdir, s3=args.s3,
                    cdc_rows=args.customers)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    # pyiceberg logs `Loaded Catalog` at INFO on every catalog it opens: an error must stay one line
    for noisy in ("py4j", "pyspark", "urllib3", "httpx", "httpx2", "httpcore", "httpcore2", "pyiceberg"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    handler: Callable = args.handler
    try:
        return handler(args)
    except RouterError as exc:
        _fail(exc)
        return exc.exit_code
    except KeyboardInterrupt:
        print("icerouter: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # anything unexpected: one line
        _fail(exc)
        return EXIT_UNDECIDED if args.command in DECIDING_COMMANDS else EXIT_BLOCKED


def _fail(exc: BaseException) -> None:
    if os.environ.get("ICEROUTER_DEBUG"):
        traceback.print_exception(exc)
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    print(f"icerouter: error: {text}", file=sys.stderr)
