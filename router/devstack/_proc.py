"""Process helpers shared by the dev-stack launchers (ports, waiting, stopping)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable

from router.devstack.exceptions import ServiceStartError


def free_port(host: str = "127.0.0.1") -> int:
    """Ask the kernel for an unused TCP port (small race window, fine for dev)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_until(
    check: Callable[[], bool],
    *,
    timeout: float,
    service: str,
    proc: subprocess.Popen | None = None,
    log_path: str | None = None,
    interval: float = 0.1,
) -> None:
    """Poll ``check`` until true; fail early if ``proc`` died, with its log tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise ServiceStartError(service, f"exited with code {proc.returncode}: {log_tail(log_path)}")
        try:
            if check():
                return
        except Exception:  # noqa: BLE001 - any probe failure means "not ready yet"
            pass
        time.sleep(interval)
    raise ServiceStartError(service, f"not ready after {timeout:.0f}s: {log_tail(log_path)}")


def log_tail(path: str | None, limit: int = 2000) -> str:
    if not path or not os.path.exists(path):
        return "(no log)"
    with open(path, "rb") as fh:
        data = fh.read()[-limit:]
    return data.decode("utf-8", "replace").strip()


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    fields = _stat_fields(f"/proc/{pid}/stat")
    return fields is None or fields[0] != "Z"


def group_alive(pgid: int) -> bool:
    """True while a process of group ``pgid`` exists and is not a zombie."""
    for path in glob.glob("/proc/[0-9]*/stat"):
        fields = _stat_fields(path)
        if fields is not None and fields[0] != "Z" and int(fields[2]) == pgid:
            return True
    return False


def _stat_fields(path: str) -> list[str] | None:
    """The fields of a /proc/<pid>/stat after the command name (state, ppid, pgrp, ...); None if unreadable."""
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def stop_pid(pid: int, *, group: bool = True, timeout: float = 10.0, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` (to the process group when ``group``), then SIGKILL after ``timeout``.

    Returns True when the process is gone. Processes are started with
    ``start_new_session=True`` so their group id equals their pid.
    """
    send = os.killpg if group else os.kill
    try:
        send(pid, sig)
    except ProcessLookupError:
        return True
    except PermissionError:
        send = os.kill
        send(pid, sig)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        _reap(pid)
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    try:
        send(pid, signal.SIGKILL)
    except ProcessLookupError:
        return True
    for _ in range(100):
        _reap(pid)
        if not pid_alive(pid):
            return True
        time.sleep(0.05)
    return not pid_alive(pid)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when its parent dies (Linux).

    Keeps a killed test session or demo from leaking servers; not used for the
    detached stack started by scripts/stack.py.
    """

    import ctypes

    prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl  # resolved before fork
    pr_set_pdeathsig, signum = 1, int(sig)

    def _set() -> None:
        prctl(pr_set_pdeathsig, signum, 0, 0, 0)

    return _set


def end_process(proc: subprocess.Popen, *, sig: int = signal.SIGTERM, timeout: float = 10.0) -> None:
    """Signal, SIGKILL after ``timeout``, reap; a process that still lingers is left to init."""
    stop_pid(proc.pid, sig=sig, timeout=timeout)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def remove_tree(path: str | os.PathLike, remove: bool | None, own: bool) -> bool:
    """Drop a service's data directory: when asked to, else when the launcher made it itself."""
    drop = remove if remove is not None else own
    if drop:
        shutil.rmtree(path, ignore_errors=True)
    return drop


class Service:
    """``with Launcher(...) as service:`` starts on entry and stops on exit."""

    def start(self):
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
