"""Deterministic crash points for recovery tests and drills.

`ICEROUTER_CRASH_AT=commit:N` kills the job's driver process with SIGKILL right
after the N-th successful table commit of the job, wherever it happened (a
driver thread or a task in a Python worker): some tables of the batch are
committed and the others are not, the hardest case for exactly-once recovery.
The count is shared by every process of the job through a small file in
`ICEROUTER_CRASH_DIR` (the drill's own directory; the temp dir when unset; drills run
on one host), so "the N-th commit" means the same thing whether the driver or the
tasks commit. Unset in production, where a crash point costs one lookup.
"""

from __future__ import annotations

import fcntl
import os
import signal
import tempfile

ENV = "ICEROUTER_CRASH_AT"
DIR_ENV = "ICEROUTER_CRASH_DIR"


def _count(name: str, driver_pid: int, folder: str | None) -> int:
    path = os.path.join(folder or tempfile.gettempdir(), f"icerouter-crash-{name}-{driver_pid}")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        count = int(os.read(fd, 32) or b"0") + 1
        os.lseek(fd, 0, os.SEEK_SET)
        os.ftruncate(fd, 0)
        os.write(fd, str(count).encode())
        return count
    finally:
        os.close(fd)


def drill() -> tuple[str, int, str | None] | None:
    """On the driver: the crash drill to hand to tasks (their environment may not have it: a cluster)."""
    spec = os.environ.get(ENV)
    return (spec, os.getpid(), os.environ.get(DIR_ENV)) if spec else None


def drilling(name: str, drill_from_driver: tuple[str, int, str | None] | None = None) -> bool:
    """Whether a crash drill at the named point is set (code that commits several tables at once
    then commits them one by one, so "right after the N-th table commit" stays exact)."""
    spec = drill_from_driver[0] if drill_from_driver else os.environ.get(ENV)
    return bool(spec) and spec.startswith(f"{name}:")


def crash_point(name: str, drill_from_driver: tuple[str, int, str | None] | None = None) -> None:
    """SIGKILL the driver once the job reaches the named point N times (see the module docstring).

    On the driver the drill comes from the environment; tasks get it from the
    driver (`drill()`, carried in the dispatch context) with the driver's pid.
    """
    spec, target, folder = drill_from_driver or (os.environ.get(ENV), os.getpid(), os.environ.get(DIR_ENV))
    if not spec or not spec.startswith(f"{name}:"):
        return
    if _count(name, target, folder) >= int(spec.split(":", 1)[1]):
        os.kill(target, signal.SIGKILL)
        if target != os.getpid():  # a task: its process goes down with the driver, as in a host crash
            os.kill(os.getpid(), signal.SIGKILL)
