"""Table maintenance: expire snapshots, compact small files, remove orphan files.

The streaming job leaves one small Parquet file per micro-batch and task, and a
snapshot per commit. Planning is pure (live files in, groups out) so a dry run
shows exactly what an apply would do. Applying commits ONE `replace` snapshot
per table (old files out, new files in, same rows) and re-validates against
concurrent writers: an append landing meanwhile is kept, a replaced file that
is no longer live aborts the compaction and leaves the table unchanged.
"""

from __future__ import annotations

import fnmatch
import itertools
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence
from urllib.parse import urlparse

from pyiceberg.exceptions import CommitFailedException, ValidationException
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.io.pyarrow import ArrowScan, _dataframe_to_data_files
from pyiceberg.manifest import DataFile, ManifestContent, ManifestFile
from pyiceberg.table import FileScanTask, TableProperties
from pyiceberg.table.snapshots import Operation, Summary
from pyiceberg.table.update.snapshot import _ManifestMergeManager, _OverwriteFiles
from pyiceberg.table.update.validate import _validate_data_files_exist, _validate_no_new_deletes_for_data_files
from pyiceberg.utils.properties import property_as_int

from router.commit import expire_snapshots
from router.config import MaintenanceConfig
from router.exceptions import RouterError
from router.tables import backoff

if TYPE_CHECKING:
    from router.config import RouterConfig

log = logging.getLogger("icerouter.maintenance")

SMALL_FILE_RATIO = 0.75  # files at >= 75% of the target are left alone
COMMIT_ATTEMPTS = 4
COMPACTION_SUMMARY = {"icerouter.maintenance": "compaction"}
LOCAL_SCHEMES = ("", "file")


class MaintenanceError(RouterError):
    """A maintenance step failed for one table."""


class CompactionConflict(MaintenanceError):
    """A concurrent commit removed files the compaction meant to replace; nothing was changed."""

    transient = True


class UnsupportedLocation(MaintenanceError):
    """Orphan removal needs a local (file://) warehouse."""


# ----------------------------------------------------------------------------- plan (pure)

@dataclass(frozen=True)
class CompactionGroup:
    """Small data files of one partition (same spec id and value) to rewrite together."""

    spec_id: int
    partition: Any  # pyiceberg Record
    partition_path: str
    files: tuple[DataFile, ...] = field(repr=False)

    def __repr__(self) -> str:
        return (f"CompactionGroup(spec_id={self.spec_id}, partition={self.partition_path!r}, "
                f"files={len(self.files)}, bytes={self.input_bytes}, rows={self.input_rows})")

    @property
    def input_bytes(self) -> int:
        return sum(f.file_size_in_bytes for f in self.files)

    @property
    def input_rows(self) -> int:
        return sum(f.record_count for f in self.files)


def plan_groups(files: Iterable[DataFile], target_file_size_bytes: int, min_input_files: int = 2,
                partition_path: Callable[[DataFile], str] = lambda f: str(f.partition)) -> list[CompactionGroup]:
    """Bin-pack small files per partition (first fit, largest first) into groups of <= target bytes."""
    threshold = SMALL_FILE_RATIO * target_file_size_bytes
    partitions: dict[tuple, list[DataFile]] = {}
    for f in files:
        if f.file_size_in_bytes < threshold:
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
        groups += [CompactionGroup(spec_id, partition, label, tuple(b)) for b in bins if len(b) >= min_input_files]
    return sorted(groups, key=lambda g: (g.spec_id, g.partition_path, -len(g.files)))


def plan_expiry(snapshots: Sequence[Any], current_snapshot_id: int | None, retain_last: int,
                max_age_seconds: float, now: float) -> list[int]:
    """Snapshot ids router.commit.expire_snapshots would expire (for dry runs)."""
    ordered = sorted(snapshots, key=lambda s: s.timestamp_ms)
    keep = {s.snapshot_id for s in ordered[-retain_last:]} | {current_snapshot_id}
    cutoff = (now - max_age_seconds) * 1000
    return [s.snapshot_id for s in ordered if s.snapshot_id not in keep and s.timestamp_ms < cutoff]


def live_data_files(table) -> list[DataFile]:
    """Data files of the current snapshot that have no delete files attached."""
    if table.current_snapshot() is None:
        return []
    return [task.file for task in table.scan().plan_files() if not task.delete_files]


def _delete_file_count(table) -> int:
    snapshot = table.current_snapshot()
    return int(snapshot.summary.get("total-delete-files") or 0) if snapshot and snapshot.summary else 0


def plan_compaction(table, target_file_size_bytes: int, min_input_files: int = 2) -> list[CompactionGroup]:
    """Compaction groups for the table's current snapshot (no writes)."""
    if _delete_file_count(table):
        return []  # rewritten files get a newer sequence number, which would undo equality deletes
    specs, schema = table.specs(), table.schema()
    return plan_groups(live_data_files(table), target_file_size_bytes, min_input_files,
                       lambda f: specs[f.spec_id].partition_to_path(f.partition, schema) or "<unpartitioned>")


# ----------------------------------------------------------------------------- apply

class _ReplaceFiles(_OverwriteFiles):
    """pyiceberg's overwrite producer, recorded as `replace` (same rows, other files), that also
    merges the many one-batch manifests the job's fast appends leave behind."""

    def _summary(self, snapshot_properties=None) -> Summary:
        summary = super()._summary(snapshot_properties or {})
        return Summary(Operation.REPLACE, **summary.additional_properties)

    def _validate_concurrency(self) -> None:
        """Used by pyiceberg's own retry: a rewrite conflicts with changes to its files, not with appends."""
        window = self._commit_window
        if window is None or window.is_empty() or window.head is None:
            return
        table = self._transaction._table
        _validate_data_files_exist(table, window.head, self._deleted_data_files, window.base)
        _validate_no_new_deletes_for_data_files(table, window.head, None, self._deleted_data_files, window.base)

    def _process_manifests(self, manifests: list[ManifestFile]) -> list[ManifestFile]:
        target = property_as_int(self._transaction.table_metadata.properties,
                                 TableProperties.MANIFEST_TARGET_SIZE_BYTES,
                                 TableProperties.MANIFEST_TARGET_SIZE_BYTES_DEFAULT)
        data = [m for m in manifests if m.content == ManifestContent.DATA]
        merged = _ManifestMergeManager(target, 2, True, self).merge_manifests(data)
        return merged + [m for m in manifests if m.content != ManifestContent.DATA]


@dataclass
class CompactionResult:
    groups: int = 0
    files_removed: int = 0
    files_added: int = 0
    bytes_removed: int = 0
    bytes_added: int = 0
    rows: int = 0
    attempts: int = 0
    snapshot_id: int | None = None
    seconds: float = 0.0


def _write_group(table, group: CompactionGroup, target_file_size_bytes: int, write_uuid: uuid.UUID,
                 counter) -> list[DataFile]:
    """Read a group projected to the current schema and write it as target-size file(s)."""
    scan = ArrowScan(table.metadata, table.io, table.schema(), AlwaysTrue())
    try:
        data = scan.to_table([FileScanTask(f) for f in group.files])
    except FileNotFoundError as exc:  # another maintenance run replaced and expired it meanwhile
        raise CompactionConflict(f"a planned file vanished: {exc}", table=_name(table)) from None
    if data.num_rows != group.input_rows:
        raise MaintenanceError("rows read differ from the manifests", table=_name(table),
                               partition=group.partition_path, expected=group.input_rows, read=data.num_rows)
    # pyiceberg sizes files in in-memory bytes: scale the on-disk target by this group's ratio.
    in_memory_target = max(1, int(data.nbytes * target_file_size_bytes / max(1, group.input_bytes)))
    props = {**table.metadata.properties, TableProperties.WRITE_TARGET_FILE_SIZE_BYTES: str(in_memory_target)}
    metadata = table.metadata.model_copy(update={"properties": props})
    return list(_dataframe_to_data_files(metadata, data, table.io, write_uuid=write_uuid, counter=counter))


def compact(table, groups: Sequence[CompactionGroup], target_file_size_bytes: int | None = None,
            attempts: int = COMMIT_ATTEMPTS) -> CompactionResult:
    """Rewrite the groups and commit them as one atomic replace snapshot (refresh + retry on conflicts)."""
    started = time.perf_counter()
    result = CompactionResult(groups=len(groups))
    if not groups:
        return result
    target = target_file_size_bytes or max(g.input_bytes for g in groups)
    write_uuid, counter, spec_id = uuid.uuid4(), itertools.count(), table.metadata.default_spec_id
    old, new = [f for g in groups for f in g.files], []
    try:
        for group in groups:
            new += _write_group(table, group, target, write_uuid, counter)
        if sum(f.record_count for f in new) != sum(f.record_count for f in old):
            raise MaintenanceError("rewritten files do not hold the same number of rows", table=_name(table))
    except BaseException:
        _delete(table, [f.file_path for f in new])
        raise
    try:
        result.snapshot_id, result.attempts = _commit_replace(table, old, new, spec_id, attempts)
    except MaintenanceError:  # the commit did not land, so the new files are referenced by nothing
        _delete(table, [f.file_path for f in new])
        raise
    result.files_removed, result.files_added = len(old), len(new)
    result.bytes_removed = sum(f.file_size_in_bytes for f in old)
    result.bytes_added = sum(f.file_size_in_bytes for f in new)
    result.rows = sum(f.record_count for f in new)
    result.seconds = time.perf_counter() - started
    return result


def _commit_replace(table, old: list[DataFile], new: list[DataFile], spec_id: int, attempts: int) -> tuple[int, int]:
    """Commit old -> new; on a conflict refresh and retry, re-checking that every old file is still live."""
    for attempt in range(attempts):
        if attempt:
            table.refresh()
        if table.metadata.default_spec_id != spec_id:
            raise CompactionConflict("the partition spec changed during compaction", table=_name(table))
        if _delete_file_count(table):  # row-level deletes aimed at the old files would be lost
            raise CompactionConflict("delete files appeared during compaction", table=_name(table))
        try:
            with table.transaction() as tx:
                replace = _ReplaceFiles(operation=Operation.OVERWRITE, transaction=tx, io=table.io,
                                        snapshot_properties=dict(COMPACTION_SUMMARY))
                for f in old:
                    replace.delete_data_file(f)
                for f in new:
                    replace.append_data_file(f)
                replace.commit()
        except ValidationException as exc:
            raise CompactionConflict(f"replaced files are no longer live: {exc}", table=_name(table)) from None
        except CommitFailedException as exc:
            log.info("compaction of %s conflicted (attempt %d): %s", _name(table), attempt + 1, exc)
            backoff(attempt, base=0.05, cap=2.0)
            continue
        table.refresh()
        _drop_intermediate_manifests(table, replace)
        return replace.snapshot_id, attempt + 1
    raise CompactionConflict("the commit kept conflicting", table=_name(table), attempts=attempts)


def _drop_intermediate_manifests(table, producer: _ReplaceFiles) -> None:
    """Manifests rewritten without the replaced files, then merged, are referenced by nothing."""
    snapshot = table.metadata.snapshot_by_id(producer.snapshot_id)
    if snapshot is not None:
        kept = {m.manifest_path for m in snapshot.manifests(table.io)}
        _delete(table, [p for p in producer._written_manifests if p not in kept])


def _delete(table, paths: Iterable[str]) -> None:
    for path in paths:
        try:
            table.io.delete(path)
        except Exception as exc:  # a leftover file is an orphan, removed later
            log.warning("could not delete %s: %s", path, exc)


def _name(table) -> str:
    return ".".join(table.name()) if hasattr(table, "name") else str(table)


# ----------------------------------------------------------------------------- expire

@dataclass
class ExpiryResult:
    expired: int = 0
    deleted_files: list[str] = field(default_factory=list)


def reachable_files(table, include_deleted_entries: bool = False) -> set[str]:
    """Manifest lists, manifests and data/delete files the table's snapshots still reference."""
    paths: set[str] = set()
    seen: set[str] = set()
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in snapshot.manifests(table.io):
            paths.add(manifest.manifest_path)
            if manifest.manifest_path in seen:
                continue
            seen.add(manifest.manifest_path)
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=not include_deleted_entries):
                paths.add(entry.data_file.file_path)
    return paths


def expire(table, retain_last: int, max_age_seconds: float, delete_files: bool = True) -> ExpiryResult:
    """Expire old snapshots (router.commit.expire_snapshots), then delete the files only they used."""
    before = reachable_files(table) if delete_files else set()
    expired = expire_snapshots(table, retain_last, max_age_seconds)
    result = ExpiryResult(expired=expired)
    if expired and delete_files:
        table.refresh()
        result.deleted_files = sorted(before - reachable_files(table))
        _delete(table, result.deleted_files)
    return result


# ----------------------------------------------------------------------------- orphans

def _local_path(location: str) -> str:
    parsed = urlparse(location)
    if parsed.scheme not in LOCAL_SCHEMES:
        raise UnsupportedLocation(f"orphan removal supports local warehouses only, not {parsed.scheme}://",
                                  location=location)
    return os.path.normpath(parsed.path if parsed.scheme else location)


def referenced_files(table) -> set[str]:
    """Every file the table metadata can reach, including old metadata versions and statistics."""
    metadata = table.metadata
    paths = reachable_files(table, include_deleted_entries=True)
    paths.add(table.metadata_location)
    paths.update(entry.metadata_file for entry in metadata.metadata_log)
    paths.update(s.statistics_path for s in getattr(metadata, "statistics", []) or [])
    paths.update(s.statistics_path for s in getattr(metadata, "partition_statistics", []) or [])
    return paths


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino


def remove_orphans(table, older_than_seconds: float, dry_run: bool = False) -> list[str]:
    """Delete (or list) files under the data and metadata paths that no metadata references.

    Files are matched by inode, not by path spelling (symlinks, `..`, URI forms); if a live data
    file cannot be found that way, nothing is deleted.
    """
    table.refresh()
    provider = table.location_provider()
    roots = sorted({_local_path(provider.data_path), _local_path(provider.metadata_path)})
    referenced = {_identity(_local_path(p)) for p in referenced_files(table)}
    live = [task.file.file_path for task in table.scan().plan_files()] if table.current_snapshot() else []
    lost = [p for p in live if _identity(_local_path(p)) is None]
    if lost:
        raise MaintenanceError("live data files not found on disk; not removing orphans", table=_name(table),
                               missing=lost[0], count=len(lost))
    cutoff = time.time() - older_than_seconds
    orphans = []
    for root in roots:
        for directory, _, names in os.walk(root):
            for path in (os.path.join(directory, name) for name in names):
                try:
                    st = os.stat(path)
                except FileNotFoundError:
                    continue
                if st.st_mtime < cutoff and (st.st_dev, st.st_ino) not in referenced:
                    orphans.append(path)
    if not dry_run:
        for path in orphans:
            try:
                os.remove(path)
            except FileNotFoundError:
                pass
    return sorted(orphans)


def metadata_file_count(table) -> int:
    """Files under the metadata path (local warehouses), else metadata.json versions known."""
    try:
        root = _local_path(table.location_provider().metadata_path)
    except UnsupportedLocation:
        return len(table.metadata.metadata_log) + 1
    return sum(len(names) for _, _, names in os.walk(root))


# ----------------------------------------------------------------------------- one table

@dataclass
class MaintenanceReport:
    table: str
    dry_run: bool = False
    files_before: int = 0
    files_after: int = 0
    bytes_before: int = 0
    bytes_after: int = 0
    snapshots_before: int = 0
    snapshots_after: int = 0
    metadata_files_before: int = 0
    metadata_files_after: int = 0
    expired_snapshots: int = 0
    compaction: CompactionResult = field(default_factory=CompactionResult)
    planned_groups: list[CompactionGroup] = field(default_factory=list)
    orphans: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def _data_stats(table) -> tuple[int, int]:
    summary = table.current_snapshot().summary if table.current_snapshot() else None
    if summary is None:
        return 0, 0
    return int(summary.get("total-data-files") or 0), int(summary.get("total-files-size") or 0)


def maintain_table(table, config: MaintenanceConfig, dry_run: bool = False,
                   orphans: bool = True) -> MaintenanceReport:
    """expire -> compact -> expire the replaced snapshots -> remove orphans (or only plan, dry_run)."""
    started = time.perf_counter()
    report = MaintenanceReport(_name(table), dry_run)
    report.files_before, report.bytes_before = _data_stats(table)
    report.snapshots_before = len(table.metadata.snapshots)
    report.metadata_files_before = metadata_file_count(table)
    retain, age = config.retain_last_snapshots, config.max_snapshot_age_seconds
    if dry_run:
        report.expired_snapshots = len(plan_expiry(table.metadata.snapshots, table.metadata.current_snapshot_id,
                                                   retain, age, time.time()))
        report.planned_groups = plan_compaction(table, config.target_file_size_bytes)
    else:
        report.expired_snapshots = expire(table, retain, age).expired
        report.planned_groups = plan_compaction(table.refresh(), config.target_file_size_bytes)
        try:
            report.compaction = compact(table, report.planned_groups, config.target_file_size_bytes)
        except CompactionConflict as exc:  # the table is unchanged; the next run plans afresh
            report.notes.append(f"compaction skipped: {exc.message}")
        if report.compaction.files_added:
            report.expired_snapshots += expire(table.refresh(), retain, age).expired
    if orphans:
        try:
            report.orphans = remove_orphans(table, config.orphan_min_age_seconds, dry_run=dry_run)
        except UnsupportedLocation as exc:
            report.notes.append(exc.message)
    table.refresh()
    report.files_after, report.bytes_after = _data_stats(table)
    report.snapshots_after = len(table.metadata.snapshots)
    report.metadata_files_after = metadata_file_count(table)
    report.seconds = time.perf_counter() - started
    return report


# ----------------------------------------------------------------------------- many tables

def list_tables(catalog, pattern: str = "*") -> list[str]:
    """"ns.table" names in every namespace (nested too) that match a glob."""
    names: set[str] = set()
    pending, seen = list(catalog.list_namespaces()), set()
    while pending:
        namespace = tuple(pending.pop())
        if namespace in seen:
            continue
        seen.add(namespace)
        try:
            pending += catalog.list_namespaces(namespace)
        except Exception:  # catalogs without nested namespaces
            pass
        names.update(".".join(ident) for ident in catalog.list_tables(namespace))
    return sorted(n for n in names if fnmatch.fnmatchcase(n, pattern))


def maintain_command(config: RouterConfig, table_pattern: str = "*", dry_run: bool = False) -> str:
    """`icerouter maintain`: maintain every matching table; one failure does not stop the others."""
    catalog = config.catalog.load()
    reports = []
    for name in list_tables(catalog, table_pattern):
        try:
            reports.append(maintain_table(catalog.load_table(name), config.maintenance, dry_run=dry_run))
        except Exception as exc:
            log.warning("maintenance of %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            reports.append(MaintenanceReport(name, dry_run, error=f"{type(exc).__name__}: {exc}"))
    return format_reports(reports, table_pattern, dry_run)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _pair(before, after, show=str) -> str:
    return show(before) if before == after else f"{show(before)} -> {show(after)}"


def format_reports(reports: Sequence[MaintenanceReport], pattern: str = "*", dry_run: bool = False) -> str:
    """One line per table; a dry run shows the current state and what would be done."""
    if not reports:
        return f"no tables match {pattern!r}"
    header = ("table", "data files", "data bytes", "snapshots", "metadata files", "expired", "orphans",
              "seconds", "status")
    rows = []
    for r in reports:
        if r.error:
            error = r.error.splitlines()[0]
            rows.append((r.table, *[""] * 7, f"FAILED {error[:160]}{'...' if len(error) > 160 else ''}"))
            continue
        if r.dry_run:
            files = sum(len(g.files) for g in r.planned_groups)
            status = f"would rewrite {files} files in {len(r.planned_groups)} groups"
        else:
            status = f"ok, rewrote {r.compaction.files_removed} -> {r.compaction.files_added} files"
        rows.append((r.table, _pair(r.files_before, r.files_after), _pair(r.bytes_before, r.bytes_after, _size),
                     _pair(r.snapshots_before, r.snapshots_after),
                     _pair(r.metadata_files_before, r.metadata_files_after), str(r.expired_snapshots),
                     str(len(r.orphans)), f"{r.seconds:.2f}", status + "".join(f"; {n}" for n in r.notes)))
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in (header, *rows)]
    failed = sum(1 for r in reports if r.error)
    title = (f"dry run of {len(reports)} tables ({failed} failed): nothing changed; expired/orphans = would be "
             "removed" if dry_run else f"maintained {len(reports) - failed} tables, {failed} failed")
    return "\n".join([title, *lines])


class MaintenanceScheduler:
    """Maintains the job's tables at most once per interval each, called from the driver after commits.

    A table's clock starts when it is first seen; each call runs at most `max_tables_per_run`
    overdue tables (longest waiting first) so one call never stalls the stream for long.
    """

    def __init__(self, config: RouterConfig, interval_seconds: float = 600.0, max_tables_per_run: int = 2,
                 clock: Callable[[], float] = time.monotonic):
        self.config, self.interval, self.max_tables, self.clock = config, interval_seconds, max_tables_per_run, clock
        self.last_run: dict[str, float] = {}

    def due(self, table_names: Iterable[str]) -> list[str]:
        """Tables whose interval elapsed, longest waiting first (first sight starts the clock)."""
        now = self.clock()
        for name in table_names:
            self.last_run.setdefault(name, now)
        waiting = [(t, n) for n, t in self.last_run.items() if now - t >= self.interval]
        return [n for _, n in sorted(waiting)][: self.max_tables]

    def maybe_run(self, table_names: Iterable[str]) -> list[MaintenanceReport]:
        from router.tables import load_table

        reports = []
        for name in self.due(table_names):
            self.last_run[name] = self.clock()
            try:
                table = load_table(self.config.catalog, name, refresh=True)
                reports.append(maintain_table(table, self.config.maintenance, orphans=False))
            except Exception as exc:  # maintenance must never fail ingestion
                log.warning("scheduled maintenance of %s failed: %s", name, exc)
                reports.append(MaintenanceReport(name, error=f"{type(exc).__name__}: {exc}"))
        return reports
