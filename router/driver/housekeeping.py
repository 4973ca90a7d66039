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
    """Compacts the job's tables every `maintenance.compact_interval_seconds`, or once
    `maintenance.compact_after_files` files were committed to one, off the batch path.

    One background thread; a call while it is busy only counts the batch's files towards the next run.
    Compaction conflicts with our own appends are retried or abandoned by the maintenance code.
    """

    def __init__(self, config: RouterConfig):
        m = config.maintenance
        self.enabled = m.compact_interval_seconds > 0 or m.compact_after_files > 0
        self.config = config
        self._busy = threading.Lock()
        self._scheduler: MaintenanceScheduler | None = None
        self._files: dict[str, int] = {}  # files committed while the thread was busy, handed on next time
        # since the job started: runs, failed runs, files compaction replaced / wrote / deleted afterwards
        self.totals = {"runs": 0, "failed": 0, "files_removed": 0, "files_added": 0, "replaced_deleted": 0}

    def submit(self, files_added: dict[str, int]) -> None:
        """`files_added`: files this batch committed, per table (data and position-delete files: a reader opens both)."""
        if not self.enabled or not files_added:
            return
        for name, files in files_added.items():
            self._files[name] = self._files.get(name, 0) + files
        if not self._busy.acquire(blocking=False):
            return
        if self._scheduler is None:
            m = self.config.maintenance
            self._scheduler = MaintenanceScheduler(self.config, m.compact_interval_seconds,
                                                   after_files=m.compact_after_files)
        files, self._files = self._files, {}

        def work():
            try:
                for r in self._scheduler.maybe_run(sorted(files), files):
                    self.totals["runs"] += 1
                    self.totals["failed"] += r.error is not None
                    self.totals["files_removed"] += r.compaction.files_removed
                    self.totals["files_added"] += r.compaction.files_added
                    self.totals["replaced_deleted"] += len(r.replaced_deleted)
                    log.info("maintenance %s: files %d -> %d, snapshots %d -> %d%s", r.table, r.files_before,
                             r.files_after, r.snapshots_before, r.snapshots_after, f" ({r.error})" if r.error else "")
            finally:
                self._busy.release()

        threading.Thread(target=work, name="icerouter-maintenance", daemon=True).start()
