"""A task's tables committed with one catalog transaction (router/catalog/batch_commit.py), on real
SQLite and PostgreSQL catalogs: each table still commits, conflicts or fails alone, exactly once."""

from __future__ import annotations

import pytest
from sqlalchemy import event, text

from router.catalog import create_table, get_catalog, load_table
from router.catalog.batch_commit import commit_tables
from router.config import CatalogConfig
from router.progress import stored_progress
from tests.router.catalog.test_commit import JOB, SCHEMA, ids_in, result_for


@pytest.fixture(params=["sqlite", "postgres"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    if request.param == "sqlite":
        uri = f"sqlite:///{tmp_path / 'c.db'}"
    else:
        uri = request.getfixturevalue("postgres_uri")
    return CatalogConfig(unique_name("c"), {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()})


@pytest.fixture
def no_waits(monkeypatch):
    import router.catalog.commit as commit

    monkeypatch.setattr(commit, "backoff", lambda attempt, **kw: None)


def make_tables(config: CatalogConfig, unique_name, names=("a", "b", "c")) -> list[str]:
    ns = unique_name("n")
    ids = [f"{ns}.{name}" for name in names]
    for table_id in ids:
        create_table(config, table_id, SCHEMA)
    return ids


def catalog_commits(config: CatalogConfig) -> list[int]:
    """A counter of the catalog database's committed transactions from now on."""
    commits: list[int] = []
    event.listen(get_catalog(config).engine, "commit", lambda conn: commits.append(1))
    return commits


def land_elsewhere(config: CatalogConfig, table_id: str, first: int) -> None:
    """Another process's handle commits, so this process's cached handle is stale."""
    import pyarrow as pa

    other = config.load().load_table(table_id)
    other.append(pa.table({"id": pa.array([first], pa.int64()), "body": pa.array(["elsewhere"])}))


def test_tables_commit_in_one_transaction_exactly_once(catalog_config, unique_name):
    ids = make_tables(catalog_config, unique_name)
    results = [result_for(catalog_config, t, "t/0", 0, 5) for t in ids]
    commits = catalog_commits(catalog_config)
    outcomes = commit_tables(catalog_config, results, JOB, 0, where="task")
    assert [(o.table, o.status, o.attempts, o.rows) for o in outcomes] == [(t, "committed", 1, 5) for t in ids]
    assert len(commits) == 1
    for table_id, outcome in zip(ids, outcomes):
        table = load_table(catalog_config, table_id, refresh=True)
        assert outcome.snapshot_id == table.metadata.current_snapshot_id
        assert stored_progress(table, JOB)["offsets"] == {"t/0": 5}
        assert ids_in(catalog_config, table_id) == [0, 1, 2, 3, 4]  # DuckDB reads it
    # the same results again (a retried task): every table holds them, nothing is written twice
    again = commit_tables(catalog_config, results, JOB, 1, where="task")
    assert [o.status for o in again] == ["skipped"] * 3
    assert [ids_in(catalog_config, t) for t in ids] == [[0, 1, 2, 3, 4]] * 3
    # and the next batch commits on top, in one transaction again
    commits.clear()
    outcomes = commit_tables(catalog_config, [result_for(catalog_config, t, "t/0", 5, 3) for t in ids], JOB, 2)
    assert [o.status for o in outcomes] == ["committed"] * 3 and len(commits) == 1
    assert [ids_in(catalog_config, t) for t in ids] == [list(range(8))] * 3


def test_a_table_another_committer_moved_is_retried_alone(catalog_config, unique_name, no_waits):
    ids = make_tables(catalog_config, unique_name)
    results = [result_for(catalog_config, t, "t/0", 0, 5) for t in ids]
    land_elsewhere(catalog_config, ids[1], 100)  # b's cached handle is now behind: its swap loses
    commits = catalog_commits(catalog_config)
    outcomes = commit_tables(catalog_config, results, JOB, 0, where="task")
    assert [(o.status, o.attempts) for o in outcomes] == [("committed", 1), ("committed", 2), ("committed", 1)]
    assert len(commits) == 2  # the shared transaction (a and c) and b's own commit
    assert [ids_in(catalog_config, t) for t in ids] == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 4, 100], [0, 1, 2, 3, 4]]
    for table_id in ids:
        assert stored_progress(load_table(catalog_config, table_id, refresh=True), JOB)["offsets"] == {"t/0": 5}
    # the lost attempt's metadata file is gone: b's metadata directory holds only referenced files
    b = load_table(catalog_config, ids[1], refresh=True)
    referenced = {entry.metadata_file for entry in b.metadata.metadata_log} | {b.metadata_location}
    folder = b.metadata_location.rsplit("/", 1)[0].removeprefix("file://")
    import os

    on_disk = {f"file://{folder}/{name}" for name in os.listdir(folder) if name.endswith(".metadata.json")}
    assert on_disk <= referenced


def test_a_table_that_cannot_commit_fails_alone(catalog_config, unique_name, no_waits):
    """b is dropped from the catalog behind this process's back: its swap finds no row; a and c commit."""
    ids = make_tables(catalog_config, unique_name)
    results = [result_for(catalog_config, t, "t/0", 0, 5) for t in ids]
    catalog_config.load().drop_table(ids[1])
    outcomes = commit_tables(catalog_config, results, JOB, 0, retries=2, where="task")
    assert [o.status for o in outcomes] == ["committed", "failed", "committed"]
    assert "NoSuchTableError" in outcomes[1].error
    assert [ids_in(catalog_config, t) for t in (ids[0], ids[2])] == [[0, 1, 2, 3, 4]] * 2


def _refuse_swaps_of(config: CatalogConfig, table_name: str) -> str:
    """A trigger in the catalog database that fails every update of one table's row (as a catalog
    that refuses the write would); returns the SQL that removes it."""
    engine = get_catalog(config).engine
    where = f"NEW.catalog_name = '{config.name}' AND NEW.table_name = '{table_name}'"
    trigger = f"refuse_{config.name}"
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.execute(text(f"CREATE TRIGGER {trigger} BEFORE UPDATE ON iceberg_tables WHEN {where} "
                              "BEGIN SELECT RAISE(ABORT, 'swap refused'); END"))
            return f"DROP TRIGGER {trigger}"
        conn.execute(text(f"CREATE FUNCTION {trigger}() RETURNS trigger AS $$ BEGIN "
                          "RAISE EXCEPTION 'swap refused'; END $$ LANGUAGE plpgsql"))
        conn.execute(text(f"CREATE TRIGGER {trigger} BEFORE UPDATE ON iceberg_tables FOR EACH ROW "
                          f"WHEN ({where}) EXECUTE FUNCTION {trigger}()"))
        return f"DROP TRIGGER {trigger} ON iceberg_tables; DROP FUNCTION {trigger}()"


def test_a_failing_swap_fails_its_table_alone_and_nothing_is_lost(catalog_config, unique_name, no_waits):
    """The catalog refuses b's update: the shared transaction rolls back, every table commits alone,
    b fails; once the catalog takes it again, b's rows are committed once, and nobody's twice."""
    ids = make_tables(catalog_config, unique_name)
    results = [result_for(catalog_config, t, "t/0", 0, 5) for t in ids]
    undo = _refuse_swaps_of(catalog_config, ids[1].rsplit(".", 1)[1])
    try:
        outcomes = commit_tables(catalog_config, results, JOB, 0, retries=1, where="task")
    finally:
        with get_catalog(catalog_config).engine.begin() as conn:
            for statement in undo.split("; "):
                conn.execute(text(statement))
    assert [o.status for o in outcomes] == ["committed", "failed", "committed"]
    assert "swap refused" in outcomes[1].error
    assert stored_progress(load_table(catalog_config, ids[1], refresh=True), JOB).get("offsets", {}) == {}
    # the driver (or the next batch) commits what b failed to, together with the same results again
    outcomes = commit_tables(catalog_config, results, JOB, 1, where="task")
    assert [o.status for o in outcomes] == ["skipped", "committed", "skipped"]
    for table_id in ids:
        assert ids_in(catalog_config, table_id) == [0, 1, 2, 3, 4]
        assert stored_progress(load_table(catalog_config, table_id, refresh=True), JOB)["offsets"] == {"t/0": 5}


def test_a_crash_drill_at_table_commits_commits_table_by_table(catalog_config, unique_name, tmp_path):
    """The drill's SIGKILL comes right after the N-th table commit, others not yet committed: so
    under the drill the tables are committed one transaction each (a count far off: no kill here)."""
    import os

    ids = make_tables(catalog_config, unique_name)
    commits = catalog_commits(catalog_config)
    drill = ("commit:1000", os.getpid(), str(tmp_path))
    outcomes = commit_tables(catalog_config, [result_for(catalog_config, t, "t/0", 0, 5) for t in ids], JOB, 0,
                             drill=drill, where="task")
    assert [o.status for o in outcomes] == ["committed"] * 3 and len(commits) == 3
    assert (tmp_path / f"icerouter-crash-commit-{os.getpid()}").read_text() == "3"
