"""What one batch did (the log line, the listeners, the status file) and how far behind the job is."""

from __future__ import annotations

import dataclasses
import json
import time

from router.jsonfile import write_json_atomic
from router.source.rewind import REWIND_PREFIX


@dataclasses.dataclass
class BatchStats:
    batch_id: int
    records: int = 0
    tables_committed: int = 0
    tables_skipped: int = 0
    rows_replayed: int = 0  # rows read again that their tables (or the DLQ) already held: not written
    tables_failed: int = 0
    rows_written: int = 0
    dead_letters: int = 0
    dispatch_seconds: float = 0.0
    commit_seconds: float = 0.0
    total_seconds: float = 0.0
    attempts: int = 1
    lag: int | None = None  # records behind the latest offsets, as of the previous batch's progress
    task_seconds: dict = dataclasses.field(default_factory=dict)
    failed_tables: dict = dataclasses.field(default_factory=dict)
    changes: dict = dataclasses.field(default_factory=dict)

    def line(self) -> str:
        held = f", {self.rows_replayed} rows already held" if self.rows_replayed else ""
        return (f"batch {self.batch_id}: {self.rows_written} rows -> {self.tables_committed} tables "
                f"({self.tables_failed} failed{held}), "
                f"{self.dead_letters} dead letters; lag {'-' if self.lag is None else f'{self.lag:,}'}; dispatch {self.dispatch_seconds:.2f}s "
                f"commit {self.commit_seconds:.2f}s total {self.total_seconds:.2f}s; task time "
                + " ".join(f"{k} {v:.2f}s" for k, v in self.task_seconds.items()))


def partition_lag(spark, query_name: str) -> dict[str, int] | None:
    """Records per topic-partition between the last planned end offsets and the latest ones (the
    query's last progress); `progress_lag`."""
    try:
        query = next((q for q in spark.streams.active if q.name == query_name), None) if spark is not None else None
        progress = query.lastProgress if query is not None else None
        if not progress or not progress.get("sources"):
            return None
        source = progress["sources"][0]
        latest, end = source.get("latestOffset"), source.get("endOffset")
        latest = json.loads(latest) if isinstance(latest, str) else latest
        end = json.loads(end) if isinstance(end, str) else end
        if not isinstance(latest, dict) or not isinstance(end, dict):
            return None
        return progress_lag(latest, end)
    except Exception:  # progress is best effort, never a reason to fail a batch
        return None


def progress_lag(latest: dict, end: dict) -> dict[str, int]:
    """Per partition, the latest offset minus where the job's reading stands in `end` (a batch's end
    offsets): its position, or an open rewind cursor (router/source/rewind.py) below it, so what a
    backfill has still to read counts as lag, as in `icerouter status`. Ends are the source's (past
    transaction markers), so a caught-up partition lags 0."""
    out = {}
    for key, value in latest.items():
        if key.startswith(REWIND_PREFIX):
            continue
        at = int(end.get(key, 0))
        cursor = end.get(REWIND_PREFIX + key)
        out[key] = max(0, int(value) - (min(at, int(cursor)) if cursor is not None else at))
    return out


def write_status(path: str, job: str, totals: dict, stats: BatchStats, table_rows: dict,
                 quarantined: list | tuple = (), waiting: dict | None = None) -> None:
    """A small JSON status file for dashboards, the demo and `icerouter status` (atomic replace).
    `waiting`: what tables with a commit cadence hold back (router/source/cadence.py read_waiting)."""
    body = {"job": job, "updated": time.time(), "totals": totals,
            "last_batch": dataclasses.asdict(stats), "tables": table_rows, "quarantined": sorted(quarantined),
            "waiting": waiting or {}}
    write_json_atomic(path, body, indent=1, default=str)
