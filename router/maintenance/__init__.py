"""Table maintenance: expire snapshots, compact small files, remove orphan files.

The streaming job leaves one small Parquet file per micro-batch and task, and a
snapshot per commit. `icerouter maintain` (and the job's background scheduler)
keeps tables fast to read and cheap to commit to.
"""

from router.exceptions import CompactionConflict, MaintenanceError, UnsupportedLocation
from router.maintenance.compaction import CompactionResult, compact
from router.maintenance.compaction_plan import CompactionGroup, live_data_files, plan_compaction, plan_groups
from router.maintenance.files import (
    ExpiryResult, expire, metadata_file_count, reachable_files, referenced_files, remove_orphans,
)
from router.maintenance.run import (
    MaintenanceReport, MaintenanceScheduler, format_reports, list_tables, maintain_command, maintain_table,
)

__all__ = [
    "CompactionConflict", "MaintenanceError", "UnsupportedLocation", "CompactionGroup", "CompactionResult",
    "compact", "live_data_files", "plan_compaction", "plan_groups", "ExpiryResult", "expire",
    "metadata_file_count", "reachable_files", "referenced_files", "remove_orphans", "MaintenanceReport",
    "MaintenanceScheduler", "format_reports", "list_tables", "maintain_command", "maintain_table",
]
