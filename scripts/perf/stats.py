"""Drift figures shared by the soak benchmarks: the start of a run against its end."""

from __future__ import annotations

import statistics

WINDOW = 10  # batches compared at each end


def first_last(values: list[float], n: int = WINDOW) -> dict | None:
    """Mean of the first n against the last n values (fewer when the run is short, never overlapping)."""
    n = min(n, len(values) // 2)
    if n == 0:
        return None
    first, last = statistics.mean(values[:n]), statistics.mean(values[-n:])
    return {"n": n, "first": round(first, 4), "last": round(last, 4), "ratio": round(last / first, 3) if first else None}


def median_first_last(per_batch: list[list[float]], n: int = WINDOW) -> dict | None:
    """Median of every per-table commit in the first `n` batches against the last `n`: the typical
    commit, where the mean also carries the batches in which the machine stalled."""
    if len(per_batch) < 2 * n:
        return None
    first = statistics.median(v for batch in per_batch[:n] for v in batch)
    last = statistics.median(v for batch in per_batch[-n:] for v in batch)
    return {"n": n, "first": round(first, 4), "last": round(last, 4), "ratio": round(last / first, 3) if first else None}
