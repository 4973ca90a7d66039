"""Table upkeep the job does while it runs, never on behalf of a batch's success.

`SnapshotExpirer` expires snapshots every N commits of a table (commit latency
grows with retained snapshots); `BackgroundMaintenance` compacts the job's
tables off the batch path. Failures are logged, never raised: maintenance must
never fail ingestion.
"""

from __future__ import annotations

import logging
import threading

from router.catalog import expire_snapshots, load_table
from router.config import CatalogConfig, MaintenanceConfig, RouterConfig
from router.driver.commits import CommitOutcome
from router.maintenance import MaintenanceScheduler

log = logging.getLogger("icerouter.job")


class SnapshotExpirer:
    """Expire old snapshots every N commits of a table so commit latency stays flat."""

    def __init__(self, catalog: CatalogConfig, config: MaintenanceConfig):
        self.catalog, self.config = catalog, config
        self.commits: dict[str, int] = {}

    def after_commit(self, outcome: CommitOutcome) -> None:
        if outcome.status != "committed":
            return
        count = self.commits[outcome.table] = self.commits.get(outcome.table, 0) + 1
        if count % self.config.expire_every_commits == 0:
            try:
                outcome.expired = expire_snapshots(load_table(self.catalog, outcome.table, refresh=True),
                                                   self.config.retain_last_snapshots,
                                                   self.config.max_snapshot_age_seconds)
            except Exception as exc:  # maintenance must never fail ingestion
                log.warning("snapshot expiry failed for %s: %s", outcome.table, exc)


class BackgroundMaintenance:
    """Compacts the job's tables every `maintenance.compact_interval_seconds`, off the batch path.

    One background thread; a call while it is busy is skipped (the next batch asks again).
    Compaction conflicts with our own appends are retried or abandoned by the maintenance code.
    """

    def __init__(self, config: RouterConfig):
        self.enabled = config.maintenance.compact_interval_seconds > 0
        self.config = config
        self._busy = threading.Lock()
        self._scheduler: MaintenanceScheduler | None = None

    def submit(self, tables: list[str]) -> None:
        if not self.enabled or not tables or not self._busy.acquire(blocking=False):
            return
        if self._scheduler is None:
            self._scheduler = MaintenanceScheduler(self.config, self.config.maintenance.compact_interval_seconds)

        def work():
            try:
                for r in self._scheduler.maybe_run(tables):
                    log.info("maintenance %s: files %d -> %d, snapshots %d -> %d%s", r.table, r.files_before,
                             r.files_after, r.snapshots_before, r.snapshots_after, f" ({r.error})" if r.error else "")
            finally:
                self._busy.release()

        threading.Thread(target=work, name="icerouter-maintenance", daemon=True).start()
