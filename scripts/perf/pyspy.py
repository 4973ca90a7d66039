"""Optional sampling profile of a benchmark run with py-spy (`pip install py-spy`).

Records the driver and the Python worker daemons (with their forked workers)
in py-spy's collapsed-stack format, then sums samples per function: inclusive
for the project's own and its libraries' frames, exclusive (leaf) overall.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

INTERESTING = ("router/", "registry/", "evolution/", "pyiceberg/", "pyarrow/", "polars/", "fastavro",
               "confluent_kafka", "sqlalchemy/", "pyspark/")


def _descendants(root: int) -> list[int]:
    from scripts.perf.probe import children

    kids, out, stack = children(), [], [root]
    while stack:
        pid = stack.pop()
        for k in kids.get(pid, []):
            out.append(k)
            stack.append(k)
    return out


def _parent(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


class Profiler:
    """py-spy record on the driver and on every `pyspark.daemon` below it, until `stop()`."""

    def __init__(self, out_dir: Path, rate: int = 40):
        self.out_dir, self.rate = Path(out_dir), rate
        self.procs: list[tuple[str, subprocess.Popen, Path]] = []

    def start(self) -> "Profiler":
        from scripts.perf.probe import cmdline

        spy = shutil.which("py-spy")
        if spy is None:
            raise SystemExit("--profile needs py-spy: pip install py-spy")
        self.out_dir.mkdir(parents=True, exist_ok=True)
        targets = [("driver", os.getpid(), False)]
        daemons = [pid for pid in _descendants(os.getpid()) if "pyspark.daemon" in cmdline(pid)]
        for pid in daemons:  # the daemon itself (its forked workers are followed with --subprocesses)
            if cmdline(pid).rstrip().endswith("pyspark.worker") and _parent(pid) not in daemons:
                targets.append((f"workers-{pid}", pid, True))
        for name, pid, subs in targets:
            out = self.out_dir / f"{name}.txt"
            cmd = [spy, "record", "--pid", str(pid), "--rate", str(self.rate), "--format", "raw",
                   "--nonblocking", "-o", str(out)] + (["--subprocesses"] if subs else [])
            proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append((name, proc, out))
        return self

    def stop(self) -> dict:
        for _, proc, _ in self.procs:
            proc.send_signal(signal.SIGINT)
        summary = {}
        for name, proc, out in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
            if out.exists():
                summary[name] = summarize(out)
        return summary


def summarize(path: Path, top: int = 25) -> dict:
    inclusive: Counter = Counter()
    leaf: Counter = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        if any("(idle)" in f for f in frames[:1]):
            continue
        total += n
        seen = set()
        for frame in frames:
            if any(k in frame for k in INTERESTING) and frame not in seen:
                seen.add(frame)
                inclusive[frame] += n
        leaf[frames[-1]] += n
    pct = (lambda c: round(100.0 * c / total, 1)) if total else (lambda c: 0.0)
    return {"samples": total,
            "inclusive_pct": {f: pct(c) for f, c in inclusive.most_common(top)},
            "leaf_pct": {f: pct(c) for f, c in leaf.most_common(top)}}
