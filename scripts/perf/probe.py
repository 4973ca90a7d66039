"""Measurement probes for the benchmarks: process memory and CPU, data files, per-batch and per-commit records.

Nothing here changes what the job does: the recording dispatcher only notes
times around the product's own Dispatcher and copies each batch's commit
outcomes (made in the tasks or on the driver) after the batch.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from router.driver.dispatcher import Dispatcher

def _status_kb(pid: int, key: str) -> int:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process on the machine, from /proc."""
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def cmdline(pid: int) -> str:
    """The command line of `pid`, arguments joined by spaces ("" once it is gone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _descendants(kids: dict[int, list[int]], roots) -> list[int]:
    stack, out = [k for r in roots for k in kids.get(r, [])], []
    while stack:
        pid = stack.pop()
        out.append(pid)
        stack.extend(kids.get(pid, []))
    return out


class MemorySampler:
    """Peak RSS of the driver (Python), the JVM and the Python workers, sampled from /proc.

    VmHWM gives each process's own peak; the workers' combined peak needs sampling
    because several worker processes are alive at once. `executor_roots`: pids of
    standalone Spark workers, whose executor JVMs and Python workers are not our
    descendants; their executors' RSS is summed as `executors_jvm_mb`. `all_mb`: the driver,
    the JVM and the workers' RSS of one sample summed, the peak over the samples (what the job
    takes of the machine at once; the per-role peaks may fall at different moments).
    """

    def __init__(self, interval: float = 0.5, executor_roots=()):
        self.interval = interval
        self.executor_roots = list(executor_roots)
        self.peak = {"driver_python_mb": 0.0, "jvm_mb": 0.0, "workers_total_mb": 0.0, "worker_max_mb": 0.0,
                     "all_mb": 0.0}
        if self.executor_roots:
            self.peak["executors_jvm_mb"] = 0.0
        self.worker_pids: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-memory", daemon=True)

    def start(self) -> "MemorySampler":
        self._thread.start()
        return self

    def stop(self) -> dict:
        self._stop.set()
        self._thread.join(timeout=5)
        self.sample()
        return {k: round(v, 1) for k, v in self.peak.items()}

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> dict:
        """Update the peaks; returns this sample's RSS in MB (driver, JVM, workers together)."""
        me = os.getpid()
        kids = children()
        remote = set(_descendants(kids, self.executor_roots))
        workers_now = executors_now = 0
        all_now = _status_kb(me, "VmRSS") / 1024
        self.peak["driver_python_mb"] = max(self.peak["driver_python_mb"], _status_kb(me, "VmHWM") / 1024)
        for pid in _descendants(kids, [me]) + sorted(remote):
            cmd = cmdline(pid)
            if "java" in cmd.split(" ", 1)[0]:
                if pid in remote:
                    executors_now += _status_kb(pid, "VmRSS") / 1024
                else:
                    self.peak["jvm_mb"] = max(self.peak["jvm_mb"], _status_kb(pid, "VmHWM") / 1024)
                    all_now += _status_kb(pid, "VmRSS") / 1024
            elif "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
                self.worker_pids.add(pid)
                rss = _status_kb(pid, "VmRSS") / 1024
                workers_now += rss
                self.peak["worker_max_mb"] = max(self.peak["worker_max_mb"], _status_kb(pid, "VmHWM") / 1024)
        self.peak["workers_total_mb"] = max(self.peak["workers_total_mb"], workers_now)
        self.peak["all_mb"] = max(self.peak["all_mb"], all_now + workers_now)
        if self.executor_roots:
            self.peak["executors_jvm_mb"] = max(self.peak["executors_jvm_mb"], executors_now)
        driver = _status_kb(me, "VmRSS") / 1024
        return {"driver_mb": round(driver, 1), "jvm_mb": round(all_now - driver, 1), "workers_mb": round(workers_now, 1)}


def driver_heap() -> dict:
    """What the driver process holds, to tell a growing heap from a pyarrow spike: Arrow's pool, the
    pool's own peak so far, and the count of Python objects the collector tracks."""
    import gc

    import pyarrow as pa

    pool = pa.default_memory_pool()
    return {"arrow_mb": round(pool.bytes_allocated() / 2**20, 1), "arrow_peak_mb": round(pool.max_memory() / 2**20, 1),
            "python_objects": len(gc.get_objects())}


ROLES = ("driver_python", "jvm", "workers", "broker", "registry", "producer", "other")
TICKS = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime
    except (OSError, IndexError, ValueError):
        return 0.0


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def wait_until_idle(pid: int, cores: float = 0.5, quiet_seconds: float = 5.0, timeout: float = 600.0,
                    store: str | Path | None = None) -> float:
    """Wait until process `pid` has used under `cores` for `quiet_seconds` in a row (and `store`, when
    given, has not been written for as long); the seconds waited.

    The local broker keeps its records in memory and rewrites its whole store
    (one JSON file) after they change: for a while after a bulk production it
    takes one to two cores, which a measurement started at once would share
    with it. Idle is not zero and not steady: holding 2,000,000 records it kept
    0.1 core busy in one run and 0.2-0.26 in the next, for minutes, with the
    store untouched; so the store's age says the rewrite is over, and the CPU
    threshold only tells a rewrite (~1 core) from that.
    """
    started = last_t = time.monotonic()
    last_cpu, quiet = _cpu_seconds(pid), 0.0
    while time.monotonic() - started < timeout:
        time.sleep(0.5)
        now, cpu = time.monotonic(), _cpu_seconds(pid)
        written = _age(store) < quiet_seconds if store is not None else False
        calm = (cpu - last_cpu) / (now - last_t) < cores and not written
        quiet = quiet + (now - last_t) if calm else 0.0
        last_t, last_cpu = now, cpu
        if quiet >= quiet_seconds:
            break
    return round(time.monotonic() - started - quiet, 1)


def settle_broker(broker) -> float:
    """wait_until_idle for the local broker (router.devstack.broker.LocalBroker) and its store."""
    return wait_until_idle(broker.pid, store=Path(broker.data_dir) / "data" / "kafka.json")


def _age(path: str | Path) -> float:
    """Seconds since `path` was last written (a missing file counts as old)."""
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return float("inf")


def _role(pid: int, me: int) -> str:
    if pid == me:
        return "driver_python"
    cmd = cmdline(pid)
    if "java" in cmd.split(" ", 1)[0]:
        return "jvm"
    if "pyspark.daemon" in cmd or "pyspark.worker" in cmd:
        return "workers"
    if "noida" in cmd:
        return "broker"
    if "registry" in cmd:
        return "registry"
    if "multiprocessing" in cmd:
        return "producer"
    return "other"


class CpuSampler:
    """CPU seconds spent so far by each role of the run (our process and its descendants) and by
    the whole machine, from /proc: where the cores went between two samples.

    A process's CPU is kept after it exits (its last reading), so short-lived workers still count.
    """

    def __init__(self):
        self.me = os.getpid()
        self.last_seen: dict[int, tuple[str, float]] = {}

    @staticmethod
    def machine_busy_seconds() -> float:
        with open("/proc/stat") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        idle = values[3] + values[4]  # idle + iowait
        return (sum(values[:8]) - idle) / TICKS

    def sample(self) -> dict:
        for pid in [self.me, *_descendants(children(), [self.me])]:
            role = self.last_seen[pid][0] if pid in self.last_seen else _role(pid, self.me)
            self.last_seen[pid] = (role, _cpu_seconds(pid) or self.last_seen.get(pid, (role, 0.0))[1])
        out = dict.fromkeys(ROLES, 0.0)
        for role, seconds in self.last_seen.values():
            out[role] += seconds
        out["machine_busy"] = self.machine_busy_seconds()
        out["t"] = time.monotonic()
        return out


def cpu_seconds(first: dict, last: dict) -> dict:
    """CPU seconds each role (and the whole machine) spent between two CpuSampler samples."""
    return {k: round(last[k] - first[k], 2) for k in (*ROLES, "machine_busy")}


def cpu_per_second(first: dict, last: dict) -> dict:
    """Cores used by each role between two CpuSampler samples (1.0 = one core busy)."""
    span = last["t"] - first["t"]
    if span <= 0:
        return {}
    return {k: round((last[k] - first[k]) / span, 3) for k in (*ROLES, "machine_busy")}


def namespace_dir(warehouse: Path, namespace: str) -> Path:
    """Where a catalog put `namespace`'s tables: `<warehouse>/<ns>` or `<warehouse>/<ns>.db`."""
    return warehouse / namespace if (warehouse / namespace).is_dir() else warehouse / f"{namespace}.db"


def data_file_stats(warehouse: Path, namespace: str) -> dict:
    """Parquet data files on disk per table of `namespace`: count per table and mean size."""
    root = namespace_dir(warehouse, namespace)
    per_table: dict[str, list[int]] = {}
    if root.is_dir():
        for table_dir in root.iterdir():
            data = table_dir / "data"
            sizes = [p.stat().st_size for p in data.rglob("*.parquet")] if data.is_dir() else []
            per_table[table_dir.name] = sizes
    counts = [len(s) for s in per_table.values()]
    sizes = [x for s in per_table.values() for x in s]
    return {"tables": len(per_table), "files": len(sizes),
            "files_per_table_mean": round(statistics.mean(counts), 2) if counts else 0,
            "files_per_table_max": max(counts) if counts else 0,
            "mean_file_kb": round(statistics.mean(sizes) / 1024, 1) if sizes else 0}


@dataclass
class CommitRecord:
    batch_id: int
    table: str
    status: str
    seconds: float
    wall: float  # time.time() when the table's commit became visible (in a task or on the driver)
    expired: int = 0
    where: str = "driver"  # which side committed it: driver | task
    cpu_seconds: float = 0.0  # the committing thread's CPU time (seconds is wall time, load included)
    process_cpu_seconds: float = 0.0  # adds pyiceberg's manifest-writing threads (router/catalog/commit.py)
    attempts: int = 1  # more than one: the commit lost a swap to another committer (or failed) and went again
    expired_files: int = 0  # files only the snapshots it expired referenced, deleted after it (catalog/reachable.py)
    merged: int = 0  # small data files the commit merged into one (catalog/merge_small.py)


@dataclass
class BatchRecord:
    batch_id: int
    started: float
    ended: float
    stats: object
    offsets: dict = field(default_factory=dict)  # table -> {"topic/partition": [lo, hi]}


class RecordingDispatcher(Dispatcher):
    """The product's Dispatcher plus wall-clock marks and the offsets each table covered."""

    def __init__(self, config, keep_offsets: bool = False, **options):
        super().__init__(config, **options)
        self.keep_offsets = keep_offsets
        self.batches: list[BatchRecord] = []
        self.commits: list[CommitRecord] = []
        self._offsets: dict = {}

    def run_pass(self, df, ctx):
        merged = super().run_pass(df, ctx)
        if self.keep_offsets:
            self._offsets = {}
            for table, r in merged.items():  # what the tasks committed, plus what they left to the driver
                covered = self._offsets[table] = dict(r.offsets)
                for c in r.commits:
                    covered.update(c.offsets)
        return merged

    def __call__(self, df, batch_id: int) -> None:
        started = time.time()
        self._offsets = {}
        super().__call__(df, batch_id)
        done = time.time()
        self.commits += [CommitRecord(batch_id, o.table, o.status, o.seconds, o.committed_at or done, o.expired,
                                      o.where, o.cpu_seconds, o.process_cpu_seconds, o.attempts, o.expired_files,
                                      o.merged)
                         for o in self.last_outcomes]
        self.batches.append(BatchRecord(batch_id, started, time.time(), self.history[-1], self._offsets))


def batch_rows(batches, cores: int = 2) -> list[dict]:
    """Per batch. `commit_work_s`: the driver's commit phase plus the commit seconds of the tasks spread
    over the executor cores, the commit's share of the batch wherever it ran (tasks or driver)."""
    rows = []
    for b in batches:
        s = b.stats
        t = s.task_seconds
        work = s.commit_seconds + t.get("commit", 0.0) / cores
        rows.append({
            "batch": s.batch_id, "records": s.records, "rows_written": s.rows_written,
            "tables": s.tables_committed, "source_s": t.get("source", 0.0), "decode_s": t.get("decode", 0.0),
            "evolve_s": t.get("evolve", 0.0), "write_s": t.get("write", 0.0),
            "dispatch_s": round(s.dispatch_seconds, 3), "commit_s": round(s.commit_seconds, 3),
            "total_s": round(s.total_seconds, 3),
            "task_commit_s": round(t.get("commit", 0.0), 3), "commit_work_s": round(work, 3),
            "tables_per_s": round(s.tables_committed / work, 1) if work else 0.0,
            "dead_letters": s.dead_letters, "failed": s.tables_failed})
    return rows
