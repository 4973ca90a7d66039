"""The first batch after a start, Python workers warmed at the start or not (router/driver/session.py).

Runs `icerouter demo` (its own broker, registry and catalog; 50 topics into 49 tables) with
ICEROUTER_WARM_UP=0 and =1 alternately, each in a fresh process, and reads from its log the first
batch's dispatch seconds (route, decode, write and commit in the tasks) and the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

BATCH_0 = re.compile(r"batch 0: .*? dispatch ([\d.]+)s")


def one_run(warm: bool) -> dict:
    env = {**os.environ, "ICEROUTER_WARM_UP": "1" if warm else "0"}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "router.cli", "demo"], env=env, capture_output=True, text=True,
                          timeout=600)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"demo failed (warm-up {'on' if warm else 'off'}): {done.stderr.strip()[-500:]}")
    found = BATCH_0.search(done.stderr + done.stdout)
    if found is None:
        raise SystemExit("demo log has no 'batch 0' line")
    return {"first_batch_dispatch_s": float(found.group(1)), "wall_s": round(wall, 2)}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    runs: dict[str, list[dict]] = {"off": [], "on": []}
    for i in range(args.pairs):
        for side in ("off", "on"):
            runs[side].append(one_run(side == "on"))
            print(f"pair {i + 1} warm-up {side}: {runs[side][-1]}", file=sys.stderr)
    medians = {side: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for side, rows in runs.items()}
    result = {
        "benchmark": "warm_up",
        "what": "icerouter demo (50 topics -> 49 tables, 20,000 records), warm-up off and on alternately, "
                "a fresh process each; the first batch's dispatch seconds and the run's wall time",
        "runs": runs,
        "median": medians,
        "first_batch_off_over_on": round(medians["off"]["first_batch_dispatch_s"]
                                         / medians["on"]["first_batch_dispatch_s"], 3),
        "load_after": list(os.getloadavg()),
    }
    text = json.dumps(result, indent=1)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    print(text)
    return 0
