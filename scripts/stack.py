"""Start, stop or inspect the local dev stack (broker, schema registry, catalogs).

    python scripts/stack.py start [--postgres] [--s3] [--stack-dir DIR]
    python scripts/stack.py status
    python scripts/stack.py stop

The stack dir defaults to $ICEROUTER_STACK_DIR or ./.icerouter/stack; its
state.json lets start, status and stop run as separate processes.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from router.devstack import LOCAL_EXTRA_HINT, missing_local_stack  # noqa: E402

if missing_local_stack():
    sys.exit(f"stack.py: the local stack needs {LOCAL_EXTRA_HINT} (missing: {', '.join(missing_local_stack())})")

from router.devstack.exceptions import DevStackError  # noqa: E402
from router.devstack.stack import LocalStack, default_stack_dir  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="stack.py", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["start", "stop", "status"])
    parser.add_argument("--stack-dir", default=None, help="default: $ICEROUTER_STACK_DIR or .icerouter/stack")
    parser.add_argument("--postgres", action="store_true", help="also start a PostgreSQL catalog database")
    parser.add_argument("--s3", action="store_true",
                        help="also start SeaweedFS: S3 object storage and an Iceberg REST catalog "
                             "(secret key in <stack dir>/s3.secret)")
    args = parser.parse_args(argv)
    stack = LocalStack(args.stack_dir or default_stack_dir(), with_postgres=args.postgres, with_s3=args.s3)
    try:
        if args.command == "start":
            stack.start()
            print(json.dumps(stack.status(), indent=2, sort_keys=True))
            return 0
        if args.command == "stop":
            stopped = stack.stop()
            print(json.dumps({"stopped": stopped}, sort_keys=True))
            return 0 if all(stopped.values()) else 1
        status = stack.status()
        print(json.dumps(status, indent=2, sort_keys=True))
        services = status["services"].values()
        return 0 if services and all(s["alive"] and s["listening"] for s in services) else 1
    except DevStackError as exc:
        print(f"stack.py: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
