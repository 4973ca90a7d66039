"""Table upkeep the job does while it runs, never on behalf of a batch's success.

`BackgroundMaintenance` compacts the job's tables off the batch path (snapshot
expiry happens inside each table's commit, router/catalog/commit.py). Failures
are logged, never raised: maintenance must never fail ingestion.
"""

from __future__ import annotations

import logging
import threading

from router.config import RouterConfig
from router.maintenance import MaintenanceScheduler

log = logging.getLogger("icerouter.job")


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
