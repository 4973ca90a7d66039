"""Deterministic crash points for recovery tests and drills.

`ICEROUTER_CRASH_AT=commit:N` kills the job process with SIGKILL right after
its N-th successful table commit: some tables of the batch are committed and
the others are not, the hardest case for exactly-once recovery. Unset in
production; reading one environment variable per commit costs nothing.
"""

from __future__ import annotations

import itertools
import os
import signal

_counters: dict[str, itertools.count] = {}


def crash_point(name: str) -> None:
    spec = os.environ.get("ICEROUTER_CRASH_AT")
    if not spec or not spec.startswith(f"{name}:"):
        return
    limit = int(spec.split(":", 1)[1])
    counter = _counters.setdefault(name, itertools.count(1))
    if next(counter) >= limit:
        os.kill(os.getpid(), signal.SIGKILL)
