"""The job's commits that expire snapshots delete the files only those snapshots referenced
(router/catalog/reachable.py), on real SQLite and PostgreSQL catalogs: what stays on disk is exactly
what the retained snapshots reference, each retained snapshot reads its rows (pyiceberg by snapshot
id, DuckDB the current one), a commit whose outcome is unknown or that failed deletes nothing, and a
file a retained snapshot still reads is never deleted. Maintenance and compaction beside the job
meet its deletions without failing.
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

import pyarrow.compute as pc
import pytest
from pyiceberg.manifest import ManifestEntryStatus
from pyiceberg.manifest import _manifests as read_manifest_list
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from router.catalog import create_table, get_catalog, load_table
from router.catalog.batch_commit import commit_tables
from router.catalog.commit import commit_table
from router.config import CatalogConfig, MaintenanceConfig
from router.exceptions import CompactionConflict
from tests.router.catalog.test_batch_commit import _refuse_swaps_of
from tests.router.catalog.test_merge_small import JOB, SCHEMA, check_rows, result_for

ROWS = 5  # per batch: batch b holds ids b*ROWS .. b*ROWS+ROWS-1
EXPIRING = MaintenanceConfig(merge_small_files_at=4, expire_every_commits=3, retain_last_snapshots=3,
                             max_snapshot_age_seconds=0)


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


@pytest.fixture
def no_waits(monkeypatch):
    import router.catalog.commit as commit

    monkeypatch.setattr(commit, "backoff", lambda attempt, **kw: None)


def local(path: str) -> str:
    return os.path.normpath(urlparse(path).path)


def on_disk(table) -> set[str]:
    """Files under the table's data and metadata directories, metadata JSON files aside."""
    found = set()
    for sub in ("data", "metadata"):
        for directory, _, names in os.walk(local(f"{table.location()}/{sub}")):
            found |= {os.path.join(directory, n) for n in names if not n.endswith(".metadata.json")}
    return found


def referenced(table) -> set[str]:
    """What the table's snapshots reference, read from the files with pyiceberg (no cache of ours):
    manifest lists, their manifests, and the data files live in those."""
    paths = set()
    for snapshot in table.metadata.snapshots:
        paths.add(snapshot.manifest_list)
        for manifest in read_manifest_list(table.io, snapshot.manifest_list):
            paths.add(manifest.manifest_path)
            paths |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(table.io, discard_deleted=False)
                      if e.status != ManifestEntryStatus.DELETED}
    return {local(p) for p in paths}


def batch(config: CatalogConfig, table_id: str, b: int):
    return result_for(config, table_id, "t/0", b * ROWS, ROWS)


def check_snapshots(config: CatalogConfig, table_id: str) -> None:
    """Every snapshot reads (by id) the rows of the batches up to the one it committed."""
    table = load_table(config, table_id, refresh=True)
    for snapshot in table.metadata.snapshots:
        upto = int(snapshot.summary["icerouter.batch-id"])
        ids = table.scan(snapshot_id=snapshot.snapshot_id).to_arrow().column("id").to_pylist()
        assert sorted(ids) == list(range((upto + 1) * ROWS)), snapshot.snapshot_id


@pytest.mark.parametrize("path", ["commit_table", "commit_tables"])
def test_what_stays_on_disk_is_what_the_retained_snapshots_reference(catalog_config, unique_name, path):
    ns = unique_name("n")
    tables = [f"{ns}.a", f"{ns}.b"] if path == "commit_tables" else [f"{ns}.a"]
    for t in tables:
        create_table(catalog_config, t, SCHEMA)
    expired = expired_files = merged = 0
    for b in range(30):
        results = [batch(catalog_config, t, b) for t in tables]
        if path == "commit_tables":
            outcomes = commit_tables(catalog_config, results, JOB, b, maintenance=EXPIRING, where="task")
        else:
            outcomes = [commit_table(catalog_config, results[0], JOB, b, maintenance=EXPIRING)]
        assert [o.status for o in outcomes] == ["committed"] * len(tables)
        expired += sum(o.expired for o in outcomes)
        expired_files += sum(o.expired_files for o in outcomes)
        merged += sum(o.merged for o in outcomes)
    assert expired and merged and expired_files
    for t in tables:
        table = load_table(catalog_config, t, refresh=True)
        assert len(table.metadata.snapshots) <= EXPIRING.retain_last_snapshots + EXPIRING.expire_every_commits
        files = on_disk(table)
        assert files == referenced(table)
        check_snapshots(catalog_config, t)
        check_rows(catalog_config, t, list(range(30 * ROWS)))  # DuckDB and pyiceberg, current rows


def test_a_file_a_retained_snapshot_reads_is_never_deleted(catalog_config, unique_name):
    """No small-file merging, manifests merged every other commit: each expired snapshot's own
    manifest names a data file that a retained snapshot's merged manifest names again. Only manifest
    lists and manifests go; every data file stays, and the table reads every row."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA, properties={"commit.manifest.min-count-to-merge": "2"})
    rule = MaintenanceConfig(expire_every_commits=2, retain_last_snapshots=1, max_snapshot_age_seconds=0,
                             merge_small_files_at=0)
    written, deleted = [], 0
    for b in range(16):
        result = batch(catalog_config, table_id, b)
        written += [local(f.file_path) for f in result.data_files]
        outcome = commit_table(catalog_config, result, JOB, b, maintenance=rule)
        assert outcome.status == "committed"
        deleted += outcome.expired_files
    table = load_table(catalog_config, table_id, refresh=True)
    assert deleted and len(table.metadata.snapshots) < 16
    assert all(os.path.exists(p) for p in written)
    assert on_disk(table) == referenced(table)
    check_snapshots(catalog_config, table_id)
    check_rows(catalog_config, table_id, list(range(16 * ROWS)))


def _fill_until_due(config: CatalogConfig, table_id: str, rule: MaintenanceConfig) -> None:
    """Commits without expiry, so that the next commit with `rule` expires."""
    for b in range(rule.expire_every_commits + rule.retain_last_snapshots):
        assert commit_table(config, batch(config, table_id, b), JOB, b).status == "committed"


def test_a_commit_whose_outcome_is_unknown_deletes_nothing(catalog_config, unique_name, no_waits, monkeypatch):
    """The swap lands but its answer is lost (the connection drops after the catalog committed): the
    commit's expiry is in the table, yet the committer cannot know it; the retry finds its offsets
    held (skipped) and deletes nothing. The same through the one-transaction commit of a task."""
    from router.catalog.sql import SqlCatalog

    ns = unique_name("n")
    rule = MaintenanceConfig(expire_every_commits=2, retain_last_snapshots=1, max_snapshot_age_seconds=0,
                             merge_small_files_at=0)
    real_swap = SqlCatalog.swap_staged

    def swap_then_lose_the_answer(self, staged_commits):
        real_swap(self, staged_commits)
        raise OperationalError("COMMIT", {}, Exception("server closed the connection unexpectedly"))

    for path, tables in (("commit_table", [f"{ns}.a"]), ("commit_tables", [f"{ns}.b", f"{ns}.c"])):
        for t in tables:
            create_table(catalog_config, t, SCHEMA)
            _fill_until_due(catalog_config, t, rule)
        n = rule.expire_every_commits + rule.retain_last_snapshots
        results = [batch(catalog_config, t, n) for t in tables]
        before = {t: on_disk(load_table(catalog_config, t, refresh=True)) for t in tables}
        monkeypatch.setattr(SqlCatalog, "swap_staged", swap_then_lose_the_answer)
        if path == "commit_tables":
            outcomes = commit_tables(catalog_config, results, JOB, n, retries=1, maintenance=rule, where="task")
        else:
            outcomes = [commit_table(catalog_config, results[0], JOB, n, retries=1, maintenance=rule)]
        monkeypatch.undo()
        assert [o.status for o in outcomes] == ["skipped"] * len(tables)
        assert sum(o.expired_files for o in outcomes) == 0
        for t in tables:
            table = load_table(catalog_config, t, refresh=True)
            assert len(table.metadata.snapshots) < n + 1  # the expiry landed
            assert before[t] <= on_disk(table)
            check_rows(catalog_config, t, list(range((n + 1) * ROWS)))


def test_a_failed_commit_deletes_nothing(catalog_config, unique_name, no_waits):
    """The catalog refuses the table's update: the commit fails, nothing of the table is deleted."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    rule = MaintenanceConfig(expire_every_commits=2, retain_last_snapshots=1, max_snapshot_age_seconds=0,
                             merge_small_files_at=0)
    _fill_until_due(catalog_config, table_id, rule)
    n = rule.expire_every_commits + rule.retain_last_snapshots
    result = batch(catalog_config, table_id, n)
    before = on_disk(load_table(catalog_config, table_id, refresh=True))
    undo = _refuse_swaps_of(catalog_config, table_id.rsplit(".", 1)[1])
    try:
        outcome = commit_table(catalog_config, result, JOB, n, retries=1, maintenance=rule)
    finally:
        with get_catalog(catalog_config).engine.begin() as conn:
            for statement in undo.split("; "):
                conn.execute(text(statement))
    assert outcome.status == "failed" and outcome.expired_files == 0
    table = load_table(catalog_config, table_id, refresh=True)
    assert len(table.metadata.snapshots) == n
    assert before <= on_disk(table)
    check_snapshots(catalog_config, table_id)
    # once the catalog takes it, the same commit expires and deletes
    outcome = commit_table(catalog_config, result, JOB, n, maintenance=rule)
    assert outcome.status == "committed" and outcome.expired and outcome.expired_files
    now = referenced(table.refresh())
    left = on_disk(table)
    assert before - now and not (before - now) & left and now <= left
    # what else is left: the manifests and lists of the refused attempts, whose outcome was not known
    assert all("/metadata/" in p for p in left - now)


def test_a_compaction_planned_on_files_the_job_then_deleted_conflicts(catalog_config, unique_name):
    """The driver's compaction plans on its own handle; a job commit then merges the planned files and
    expires every snapshot that read them, deleting them: the compaction is a CompactionConflict
    (the scheduler skips it) and the table is as the job left it, its own files gone."""
    from router.maintenance import compact, plan_compaction

    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    for b in range(6):
        assert commit_table(catalog_config, batch(catalog_config, table_id, b), JOB, b).status == "committed"
    stale = catalog_config.load().load_table(table_id)  # maintenance's own handle
    groups = plan_compaction(stale, 128 * 1024 * 1024)
    assert groups and sum(len(g.files) for g in groups) == 6
    rule = MaintenanceConfig(merge_small_files_at=6, expire_every_commits=1, retain_last_snapshots=1,
                             max_snapshot_age_seconds=0)
    outcome = commit_table(catalog_config, batch(catalog_config, table_id, 6), JOB, 6, maintenance=rule)
    assert outcome.merged >= 2  # its parent, which still reads the merged files, is kept
    outcome = commit_table(catalog_config, batch(catalog_config, table_id, 7), JOB, 7, maintenance=rule)
    assert outcome.expired and outcome.expired_files
    assert not all(os.path.exists(local(f.file_path)) for g in groups for f in g.files)
    with pytest.raises(CompactionConflict):
        compact(stale, groups, 128 * 1024 * 1024)
    table = load_table(catalog_config, table_id, refresh=True)
    assert on_disk(table) == referenced(table)
    check_rows(catalog_config, table_id, list(range(8 * ROWS)))


def test_maintenance_expiry_on_a_handle_older_than_the_jobs_deletions(catalog_config, unique_name):
    """`icerouter maintain`'s expiry (and the driver's scheduled one) read the table before a job commit
    expired snapshots and deleted their files, in another process (no cache of them here): it expires
    what is left by its own rule and deletes exactly what that leaves unreferenced."""
    from router.catalog import manifest_lists, reachable
    from router.maintenance import expire

    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    for b in range(8):
        assert commit_table(catalog_config, batch(catalog_config, table_id, b), JOB, b).status == "committed"
    stale = catalog_config.load().load_table(table_id)
    job_rule = MaintenanceConfig(expire_every_commits=1, retain_last_snapshots=4, max_snapshot_age_seconds=0)
    outcome = commit_table(catalog_config, batch(catalog_config, table_id, 8), JOB, 8, maintenance=job_rule)
    assert outcome.expired == 4 and outcome.expired_files
    reachable._named.clear()
    manifest_lists.clear()
    result = expire(stale, retain_last=1, max_age_seconds=0)
    assert result.expired == 4 and result.deleted_files
    table = load_table(catalog_config, table_id, refresh=True)
    assert len(table.metadata.snapshots) == 1
    assert on_disk(table) == referenced(table)
    check_snapshots(catalog_config, table_id)
    check_rows(catalog_config, table_id, list(range(9 * ROWS)))


def test_merged_rows_are_read_once_after_many_expiries(catalog_config, unique_name):
    """A table merged and expired on most commits keeps its rows: pyiceberg and DuckDB read each once."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    rule = MaintenanceConfig(merge_small_files_at=3, expire_every_commits=1, retain_last_snapshots=1,
                             max_snapshot_age_seconds=0)
    for b in range(20):
        assert commit_table(catalog_config, batch(catalog_config, table_id, b), JOB, b,
                            maintenance=rule).status == "committed"
    table = load_table(catalog_config, table_id, refresh=True)
    assert on_disk(table) == referenced(table)
    rows = check_rows(catalog_config, table_id, list(range(20 * ROWS)))
    assert rows.num_rows == 20 * ROWS and pc.count_distinct(rows.column("id")).as_py() == 20 * ROWS
