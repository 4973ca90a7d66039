"""What `icerouter status` counts as read, still to read and held, from the tables (no Spark).

- The job's read position per partition is the dead-letter table's `settled` offset (router/progress.py,
  committed last in every batch, with or without dead letters): every record below it is in its
  tables, a dead letter, or routed nowhere. It is the source's end offset of the last batch, so a
  caught-up partition stands at the broker's end offset even when its last offsets are transaction
  markers or compacted away (router/descriptors.py `BatchDescriptors.settled`). It is read as of the
  table's current snapshot (commit order), never by batch id: batch ids start again at 0 when the
  checkpoint is lost.
- Records a backfill or a rewind still has to read: the backfills the job's next start would plan
  from the tables and the checkpoint's open rewind cursors (router/driver/resume.py `plan_resume`,
  the same function the job starts with). A table in one stands at its own next offset there.
- Rows: an upsert table's live rows (position deletes applied), not the rows its snapshots added.
- What a table holds is its ledger (router/ledger.py): its next offsets carried on through the
  offsets `icerouter dlq replay` put there; a table only a replay wrote is listed.
"""

from __future__ import annotations

import logging

from router.catalog.progress_views import settled_offsets
from router.config import RouterConfig
from router.source.offsets import split_key

def open_backfills(config: RouterConfig, earliest: dict[str, int], ends: dict[str, int]) -> dict[str, dict[str, int]]:
    """table -> {"topic/partition": offset its backfill (or rewind) starts from} for every backfill the
    job has still to read: what its next start would plan, checkpoint cursors included."""
    from router.driver.checkpoint_files import checkpoint_offsets
    from router.driver.resume import plan_resume

    partitions = [split_key(key) for key in ends]
    if not partitions:
        return {}
    resume_log = logging.getLogger("icerouter.resume")
    level = resume_log.level
    resume_log.setLevel(logging.WARNING)  # its timing line is the job's start, not this command's output
    try:
        plan = plan_resume(config, partitions, earliest, ends, checkpoint_offsets(config.job.checkpoint))
    finally:
        resume_log.setLevel(level)
    out = {table: {key: begin for key, (begin, until) in parts.items() if until > begin}
           for table, parts in plan.backfills.items()}
    return {table: parts for table, parts in out.items() if parts}


def live_rows(config: RouterConfig, name: str, snapshot_rows: int | None, delete_files: int | None) -> int | None:
    """Rows a reader sees. Without delete files, the snapshot summary's total; with position deletes
    (upsert tables) the table is scanned, one column read, deletes applied (what DuckDB and pyiceberg
    count): the summary's total-records minus total-position-deletes is not the live count in
    general (a delete of a row a later compaction already dropped, or two of one row, count twice)."""
    if not delete_files:
        return snapshot_rows
    from router.catalog import load_table

    table = load_table(config.catalog, name, refresh=True)
    schema = table.schema()
    keys = [schema.find_column_name(i) for i in schema.identifier_field_ids]
    column = keys[0] if keys else schema.columns[0].name
    return table.scan(selected_fields=(column,)).count()
