"""Maintenance of one table and of many: (format upgrade) -> expire -> compact -> expire -> orphans; the job's scheduler.

`icerouter maintain` also upgrades a v2 table whose routes ask for format_version 3 (the
decision is router.decisions.decide_format, the one `plan` shows and the job creates tables by);
the job's own scheduled maintenance does not: an upgrade is the operator's step.
"""

from __future__ import annotations

import fnmatch
import logging
import re
import time
import zlib
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

from pyiceberg.table.update import AssertTableUUID

from router.catalog import get_catalog, snapshots_to_expire
from router.catalog.format_v3 import UpgradeToV3
from router.catalog.merge_policy import merge_candidate_limit
from router.catalog.sql import StagedTransaction
from router.config import MaintenanceConfig, RouterConfig
from router.decisions import decide_format, wanted_format_version
from router.routing.routes import TEMPLATE_PATTERN, RoutingTable
from router.exceptions import CompactionConflict, UnsupportedLocation
from router.maintenance.compaction import CompactionResult, _name, compact
from router.maintenance.compaction_plan import CompactionGroup, plan_compaction
from router.maintenance.files import delete_unreferenced, expire, metadata_file_count, remove_orphans

log = logging.getLogger("icerouter.maintenance")


# ----------------------------------------------------------------------------- one table

@dataclass
class MaintenanceReport:
    table: str
    dry_run: bool = False
    files_before: int = 0
    files_after: int = 0
    delete_files_before: int = 0  # position-delete files (upsert tables): compaction applies and drops them
    delete_files_after: int = 0
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
    replaced_deleted: list[str] = field(default_factory=list)  # files earlier compactions replaced (job only)
    format_version_before: int = 0
    format_version_after: int = 0
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    seconds: float = 0.0


def _data_stats(table) -> tuple[int, int, int]:
    """(data files, bytes, delete files) of the current snapshot."""
    summary = table.current_snapshot().summary if table.current_snapshot() else None
    if summary is None:
        return 0, 0, 0
    return (int(summary.get("total-data-files") or 0), int(summary.get("total-files-size") or 0),
            int(summary.get("total-delete-files") or 0))


def upgrade_format(table, version: int) -> None:
    """Commit the table's upgrade to `version` (3): metadata only, its files stay as they are."""
    if version != 3:
        raise ValueError(f"icerouter upgrades tables to format v3, not v{version}")
    tx = StagedTransaction(table)
    tx._apply((UpgradeToV3(),), (AssertTableUUID(uuid=table.metadata.table_uuid),))
    tx.commit_transaction()


def maintain_table(table, config: MaintenanceConfig, dry_run: bool = False, orphans: bool = True,
                   clock: Callable[[], float] = time.time, format_version: int | None = None) -> MaintenanceReport:
    """(upgrade) -> expire -> compact -> expire the replaced snapshots -> remove orphans (or only plan, dry_run).

    ``clock`` dates the orphan cut-off (object stores keep the server's write time, which
    cannot be back-dated, so tests move the clock instead). ``format_version``: the version the
    table's routes ask for (None: the format is left alone)."""
    started = time.perf_counter()
    report = MaintenanceReport(_name(table), dry_run)
    report.format_version_before = report.format_version_after = int(table.metadata.format_version)
    if format_version is not None:
        decision = decide_format(report.format_version_before, format_version)
        if decision.action == "upgrade" and not dry_run:
            upgrade_format(table, decision.wanted)
            table.refresh()
            report.format_version_after = int(table.metadata.format_version)
            report.notes.append(f"upgraded: {decision.note}")
        elif decision.action == "upgrade":
            report.notes.append(f"would upgrade: {decision.note}")
        elif decision.note:
            report.notes.append(decision.note)
    report.files_before, report.bytes_before, report.delete_files_before = _data_stats(table)
    report.snapshots_before = len(table.metadata.snapshots)
    report.metadata_files_before = metadata_file_count(table)
    retain, age = config.retain_last_snapshots, config.max_snapshot_age_seconds
    target = config.target_file_size_bytes
    inline = merge_candidate_limit(target) if config.merge_small_files_at else 0
    if dry_run:
        report.expired_snapshots = len(snapshots_to_expire(table.metadata, retain, age))
        report.planned_groups = plan_compaction(table, target, merged_inline_below=inline)
    else:
        report.expired_snapshots = expire(table, retain, age).expired
        report.planned_groups = plan_compaction(table.refresh(), target, merged_inline_below=inline)
        try:
            report.compaction = compact(table, report.planned_groups, target)
        except CompactionConflict as exc:  # the table is unchanged; the next run plans afresh
            report.notes.append(f"compaction skipped: {exc.message}")
        if report.compaction.files_added:
            report.expired_snapshots += expire(table.refresh(), retain, age).expired
    if orphans:
        try:
            report.orphans = remove_orphans(table, config.orphan_min_age_seconds, dry_run=dry_run, clock=clock)
        except UnsupportedLocation as exc:
            report.notes.append(exc.message)
    table.refresh()
    report.files_after, report.bytes_after, report.delete_files_after = _data_stats(table)
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


def routed_format_version(config: RouterConfig, table: str) -> int | None:
    """The format version the routes that can name `table` ask for (the first such route's, else
    ``tables.format_version``; the dead-letter table's is ``tables.format_version``); None when no
    route names it (others' tables)."""
    if config.dlq.table and table == config.dlq.table:
        return config.tables.format_version
    routing = RoutingTable(config.routes, config.tables, config.dlq)
    for route in routing.routes:
        template = route.table_template if "." in route.table_template \
            else f"{routing.default_namespace}.{route.table_template}"
        pattern, last = "", 0
        for m in TEMPLATE_PATTERN.finditer(template):
            pattern += re.escape(template[last:m.start()]) + r"[a-z0-9_]+"
            last = m.end()
        if re.fullmatch(pattern + re.escape(template[last:]), table):
            return wanted_format_version(config.tables.format_version, route.format_version)
    return None


def maintain_command(config: RouterConfig, table_pattern: str = "*", dry_run: bool = False) -> str:
    """`icerouter maintain`: maintain every matching table; one failure does not stop the others."""
    catalog = get_catalog(config.catalog)  # icerouter's catalog and writers: they commit v3 tables
    reports = []
    for name in list_tables(catalog, table_pattern):
        try:
            reports.append(maintain_table(catalog.load_table(name), config.maintenance, dry_run=dry_run,
                                          format_version=routed_format_version(config, name)))
        except Exception as exc:
            log.warning("maintenance of %s failed: %s", name, exc, exc_info=log.isEnabledFor(logging.DEBUG))
            reports.append(MaintenanceReport(name, dry_run, error=f"{type(exc).__name__}: {exc}"))
    return format_reports(reports, table_pattern, dry_run)


def _short(exc: Exception, limit: int = 300) -> str:
    """One bounded line: pyiceberg's messages can carry a table's whole snapshot list."""
    text = (str(exc).splitlines() or [""])[0]
    return text if len(text) <= limit else text[:limit] + "..."


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
    header = ("table", "data files", "delete files", "data bytes", "snapshots", "metadata files", "expired",
              "orphans", "seconds", "status")
    rows = []
    for r in reports:
        if r.error:
            error = r.error.splitlines()[0]
            rows.append((r.table, *[""] * 8, f"FAILED {error[:160]}{'...' if len(error) > 160 else ''}"))
            continue
        if r.dry_run:
            files = sum(len(g.files) for g in r.planned_groups)
            status = f"would rewrite {files} files in {len(r.planned_groups)} groups"
        else:
            status = f"ok, rewrote {r.compaction.files_removed} -> {r.compaction.files_added} files"
        rows.append((r.table, _pair(r.files_before, r.files_after),
                     _pair(r.delete_files_before, r.delete_files_after), _pair(r.bytes_before, r.bytes_after, _size),
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
    """Maintains the job's tables, called from the driver after commits: a table is due once its
    interval elapsed or once about `after_files` (see files_threshold) files (data and position-delete) were committed
    to it since its last run. A 1 s trigger adds 3,600 small files an hour per table and every
    manifest merge rewrites an entry per live file, so waiting for the clock alone lets both grow.

    A table's clock starts when it is first seen; each call runs at most `max_tables_per_run`
    due tables (most new files first, then longest waiting) so one call never stalls for long.
    """

    def __init__(self, config: RouterConfig, interval_seconds: float = 600.0, max_tables_per_run: int = 2,
                 clock: Callable[[], float] = time.monotonic, after_files: int = 0):
        self.config, self.interval, self.max_tables, self.clock = config, interval_seconds, max_tables_per_run, clock
        self.after_files = after_files
        self.last_run: dict[str, float] = {}
        self.new_files: dict[str, int] = {}  # files (data and position-delete) committed since the table's last run
        # Files our compactions replaced that retained snapshots still read. The job's commits
        # expire those snapshots without deleting files, so they are deleted here once unreferenced.
        self.replaced: dict[str, set[str]] = {}

    def files_threshold(self, name: str) -> int:
        """`after_files` spread over 0.75x-1.25x by a stable hash of the table name: tables fed
        at the same pace would otherwise all come due in the same batch and compact together."""
        return max(1, round(self.after_files * (0.75 + 0.5 * (zlib.crc32(name.encode()) % 1000) / 1000)))

    def due(self, table_names: Iterable[str], files_added: Mapping[str, int] | None = None) -> list[str]:
        """Tables due now: most new files first, then longest waiting (first sight starts the clock)."""
        now = self.clock()
        for name in table_names:
            self.last_run.setdefault(name, now)
            self.new_files[name] = self.new_files.get(name, 0) + (files_added or {}).get(name, 0)
        waiting = [(-self.new_files.get(n, 0), t, n) for n, t in self.last_run.items()
                   if (self.interval and now - t >= self.interval)
                   or (self.after_files and self.new_files.get(n, 0) >= self.files_threshold(n))]
        return [n for _, _, n in sorted(waiting)][: self.max_tables]

    def maybe_run(self, table_names: Iterable[str], files_added: Mapping[str, int] | None = None
                  ) -> list[MaintenanceReport]:
        reports = []
        for name in self.due(table_names, files_added):
            self.last_run[name], self.new_files[name] = self.clock(), 0
            try:
                # a handle of its own: the process's cached one (router/catalog/tables.py) is
                # refreshed and committed in place by the job's commits on other threads
                table = get_catalog(self.config.catalog).load_table(name)
                report = maintain_table(table, self.config.maintenance, orphans=False)
                replaced = self.replaced.pop(name, set())
                if report.compaction.files_removed:
                    replaced |= {f.file_path for g in report.planned_groups for f in g.files}
                    replaced |= set(report.compaction.removed_delete_files)
                report.replaced_deleted, still = delete_unreferenced(table, replaced)
                if still:
                    self.replaced[name] = still
                reports.append(report)
            except Exception as exc:  # maintenance must never fail ingestion
                error = f"{type(exc).__name__}: {_short(exc)}"
                log.warning("scheduled maintenance of %s failed: %s", name, error)
                reports.append(MaintenanceReport(name, error=error))
        return reports
