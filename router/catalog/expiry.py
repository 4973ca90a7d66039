"""The one rule for which snapshots to expire, used by the job and by `icerouter maintain`.

Keep the newest `retain_last`, the current snapshot and every branch head and tag;
expire the rest once older than `max_age_seconds`. The dry run asks the same
function, so it reports exactly what a real run would expire.
"""

from __future__ import annotations

import time

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table.update.snapshot import ExpireSnapshots

from router.catalog.sql import StagedTransaction
from router.catalog.tables import backoff


def snapshots_to_expire(metadata, retain_last: int, max_age_seconds: float, now: float | None = None) -> list[int]:
    """Snapshot ids the rule expires for this table metadata (pure)."""
    snapshots = sorted(metadata.snapshots, key=lambda s: s.timestamp_ms)
    keep = {s.snapshot_id for s in snapshots[-retain_last:]}
    if metadata.current_snapshot_id is not None:
        keep.add(metadata.current_snapshot_id)
    keep |= {ref.snapshot_id for ref in metadata.refs.values()}  # branch heads and tags
    cutoff = ((time.time() if now is None else now) - max_age_seconds) * 1000
    return [s.snapshot_id for s in snapshots if s.snapshot_id not in keep and s.timestamp_ms < cutoff]


EXPIRE_ATTEMPTS = 4


def expire_snapshots(table, retain_last: int, max_age_seconds: float, attempts: int = EXPIRE_ATTEMPTS) -> int:
    """Expire what `snapshots_to_expire` names; returns how many.

    The running job commits the same table meanwhile, and its commits expire by
    the same rule: a snapshot named here may be gone by the time this commits
    (pyiceberg then refuses the whole removal). So the choice is made again on
    fresh metadata and retried; only what is still there is removed.
    """
    for attempt in range(attempts):
        if attempt:
            table.refresh()
        expired = snapshots_to_expire(table.metadata, retain_last, max_age_seconds)
        if not expired:
            return 0
        try:
            with StagedTransaction(table) as tx:
                ExpireSnapshots(tx).by_ids(expired).commit()
            return len(expired)
        except (CommitFailedException, ValueError):  # ValueError: "Snapshot with snapshot id ... does not exist"
            if attempt == attempts - 1:
                raise
            backoff(attempt, base=0.05, cap=1.0)
    return 0
