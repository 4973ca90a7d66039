"""Driver side: commit the tables the tasks left to the driver, in parallel threads.

Tasks commit the tables they wrote themselves (router/executor/tasks.py); what
reaches the driver is what a task could not commit (catalog unreachable from
the executor, a conflict that outlived its retries) or every table when
`job.commit_in_tasks` is off. The commit itself (one transaction per table,
exactly once by offsets) is router/catalog/commit.py, shared by both.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Iterable

from router.catalog.commit import CommitOutcome, commit_table
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult


@dataclass
class CommitReport:
    outcomes: list[CommitOutcome] = field(default_factory=list)

    @property
    def failed(self) -> list[CommitOutcome]:
        return [o for o in self.outcomes if o.status == "failed"]

    @property
    def committed(self) -> list[CommitOutcome]:
        return [o for o in self.outcomes if o.status == "committed"]


def commit_all(catalog: CatalogConfig, results: Iterable[TableResult], job: str, batch_id: int,
               threads: int = 8, retries: int = 6, maintenance: MaintenanceConfig | None = None) -> CommitReport:
    results = list(results)
    report = CommitReport()
    if not results:
        return report
    with ThreadPoolExecutor(max_workers=max(1, min(threads, len(results))),
                            thread_name_prefix="icerouter-commit") as pool:
        futures = [pool.submit(commit_table, catalog, r, job, batch_id, retries, maintenance) for r in results]
        report.outcomes = [f.result() for f in futures]
    return report
