"""Compaction's plan: which small data files of a partition to rewrite together (pure, no writes).

Planning is apart from applying (router/maintenance/compaction.py) so that a dry run shows exactly
what an apply would do: live files in, groups out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterable, Mapping

from pyiceberg.manifest import DataFile

from router.catalog.snapshot_files import deleted_counts, snapshot_files
from router.exceptions import RowLevelError

__all__ = ["SMALL_FILE_RATIO", "DELETE_RATIO", "CompactionGroup", "plan_groups", "live_data_files", "plan_compaction"]

SMALL_FILE_RATIO = 0.75  # files at >= 75% of the target are left alone
# a file whose position deletes remove >= 30% of its rows is rewritten whatever its size, even alone
# (Iceberg's RewriteDataFiles `delete-ratio-threshold` default): reads stop paying for dead rows
DELETE_RATIO = 0.3


@dataclass(frozen=True)
class CompactionGroup:
    """Small data files of one partition (same spec id and value) to rewrite together."""

    spec_id: int
    partition: Any  # pyiceberg Record
    partition_path: str
    files: tuple[DataFile, ...] = field(repr=False)
    deleted_rows: int = 0  # rows of the files the position deletes remove (not rewritten)
    # per file (same order), the position-delete files that applied to it when planned
    deletes: tuple[tuple[DataFile, ...], ...] = field(default=(), repr=False)

    def __repr__(self) -> str:
        return (f"CompactionGroup(spec_id={self.spec_id}, partition={self.partition_path!r}, "
                f"files={len(self.files)}, bytes={self.input_bytes}, rows={self.input_rows}"
                + (f", deleted_rows={self.deleted_rows})" if self.deleted_rows else ")"))

    @property
    def input_bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)

    @property
    def input_rows(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def output_rows(self) -> int:
        return self.input_rows - self.deleted_rows


def plan_groups(files: Iterable[DataFile], target_file_size_bytes: int, min_input_files: int = 2,
                partition_path: Callable[[DataFile], str] = lambda f: str(f.partition),
                deleted: Mapping[str, int] | None = None) -> list[CompactionGroup]:
    """Bin-pack small files per partition (first fit, largest first) into groups of <= target bytes.

    `deleted`: data file path -> rows its position deletes remove. A file losing at least
    DELETE_RATIO of its rows is planned whatever its size, and its group even if it is alone.
    """
    threshold = SMALL_FILE_RATIO * target_file_size_bytes
    deleted = deleted or {}

    def mostly_deleted(f: DataFile) -> bool:
        return deleted.get(f.file_path, 0) >= DELETE_RATIO * max(f.record_count, 1)

    partitions: dict[tuple, list[DataFile]] = {}
    for f in files:
        if f.file_size_in_bytes < threshold or mostly_deleted(f):
            partitions.setdefault((f.spec_id, f.partition), []).append(f)
    groups = []
    for (spec_id, partition), members in partitions.items():
        bins: list[list[DataFile]] = []
        sizes: list[int] = []
        for f in sorted(members, key=lambda f: (-f.file_size_in_bytes, f.file_path)):
            slot = next((i for i, s in enumerate(sizes) if s + f.file_size_in_bytes <= target_file_size_bytes), None)
            if slot is None:
                bins.append([f])
                sizes.append(f.file_size_in_bytes)
            else:
                bins[slot].append(f)
                sizes[slot] += f.file_size_in_bytes
        label = partition_path(members[0])
        groups += [CompactionGroup(spec_id, partition, label, tuple(b), sum(deleted.get(f.file_path, 0) for f in b))
                   for b in bins if len(b) >= min_input_files or any(map(mostly_deleted, b))]
    return sorted(groups, key=lambda g: (g.spec_id, g.partition_path, -len(g.files)))


def live_data_files(table) -> list[DataFile]:
    """Data files of the current snapshot that have no delete files attached."""
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files() if not task.delete_files]


def _equality_delete_count(table) -> int:
    snapshot = table.current_snapshot()
    return int(snapshot.summary.get("total-equality-deletes") or 0) if snapshot and snapshot.summary else 0


def plan_compaction(table, target_file_size_bytes: int, min_input_files: int = 2,
                    merged_inline_below: int = 0) -> list[CompactionGroup]:
    """Compaction groups for the table's current snapshot (no writes).

    `merged_inline_below`: the size under which the job's commits merge files inline (0: they do
    not; router/catalog/merge_small.py). A merge lands every few commits on a busy table and
    removes small files, so a compaction that planned them loses its commit: the fan-in table of
    a 30-minute run at a 2 s trigger never compacted, and its merged files piled up. So when the
    table holds files above that size that make a group, compaction plans only those, and the
    two never pick the same file; otherwise it plans all small files, as without merging.
    """
    if table.current_snapshot() is None or _equality_delete_count(table):
        return []  # rewritten files get a newer sequence number, which would undo equality deletes
    try:
        files = snapshot_files(table)
    except RowLevelError:  # equality deletes the summary did not count
        return []
    specs, schema = table.specs(), table.schema()
    deleted = deleted_counts(table, files)

    def plan(data: Iterable[DataFile]) -> list[CompactionGroup]:
        return plan_groups(data, target_file_size_bytes, min_input_files,
                           lambda f: specs[f.spec_id].partition_to_path(f.partition, schema) or "<unpartitioned>",
                           deleted)

    groups = []
    if merged_inline_below and not files.deletes:  # tables with deletes are never merged inline
        groups = plan(f for f in files.data.values() if f.file_size_in_bytes >= merged_inline_below)
    groups = groups or plan(files.data.values())
    return [replace(g, deletes=tuple(files.delete_files_for(f.file_path) for f in g.files)) for g in groups]
