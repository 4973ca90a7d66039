"""The one table commit (tasks and driver): same result as pyiceberg's own transaction, expiry inside
the commit, and several processes committing one table (a fan-in table written by several tasks).

Every scenario runs on SQLite, PostgreSQL and the REST catalog (SeaweedFS, S3) and is read back by
DuckDB.
"""

from __future__ import annotations

import json
import multiprocessing

import pyarrow as pa
import pytest
from pyiceberg.schema import Schema
from pyiceberg.types import LongType, NestedField, StringType

from router.catalog import create_table, load_table
from router.catalog.commit import commit_table
from router.catalog.tables import manifest_merge_properties
from router.config import CatalogConfig, MaintenanceConfig
from router.descriptors import TableResult
from router.catalog.datafiles import write_data_files
from router.progress import property_name, stored_progress
from tests.duckdb_reader import read_iceberg

SCHEMA = Schema(NestedField(1, "id", LongType(), required=False), NestedField(2, "body", StringType(), required=False))
JOB = "commit-test"


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog_config(request, tmp_path, unique_name) -> CatalogConfig:
    if request.param == "sqlite":
        props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    elif request.param == "postgres":
        props = {"type": "sql", "uri": request.getfixturevalue("postgres_uri"), "warehouse": (tmp_path / "wh").as_uri()}
    else:
        props = request.getfixturevalue("object_store").rest_catalog_properties()
    return CatalogConfig(unique_name("c"), props)


def result_for(config: CatalogConfig, table_id: str, key: str, first: int, count: int) -> TableResult:
    """Files for rows first..first+count-1 of `key` ("topic/partition"), written but not committed."""
    table = load_table(config, table_id, refresh=True)
    ids = pa.array(range(first, first + count), pa.int64())
    data = pa.table({"id": ids, "body": pa.array([f"{key}:{i}" for i in ids.to_pylist()])})
    return TableResult(table_id, data_files=write_data_files(table, data), rows=count,
                       offsets={key: [first, first + count - 1]})


def ids_in(config: CatalogConfig, table_id: str) -> list[int]:
    return sorted(read_iceberg(load_table(config, table_id, refresh=True)).column("id").to_pylist())


def test_commit_equals_pyiceberg_transaction(catalog_config, unique_name):
    ns = unique_name("n")
    ours, theirs = f"{ns}.ours", f"{ns}.theirs"
    for name in (ours, theirs):
        create_table(catalog_config, name, SCHEMA)
    for batch in range(2):
        outcome = commit_table(catalog_config, result_for(catalog_config, ours, "t/0", batch * 10, 10), JOB, batch)
        assert outcome.status == "committed" and outcome.rows == 10 and outcome.committed_at > 0
        reference = result_for(catalog_config, theirs, "t/0", batch * 10, 10)
        table = catalog_config.load().load_table(theirs)  # pyiceberg's own catalog class, too
        doc = json.dumps({"batch_id": batch, "offsets": {"t/0": batch * 10 + 10}})
        # the snapshot's document also says where its read of t/0 began (offset 0; a result without a
        # task's clock reads as long ago): router/ledger.py
        read = json.dumps({"batch_id": batch, "offsets": {"t/0": batch * 10 + 10}, "reads": {"0": {"t/0": 0}}})
        with table.transaction() as tx:  # pyiceberg's own transaction, the same content
            summary = {"icerouter.job": JOB, "icerouter.batch-id": str(batch), property_name(JOB): read}
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as append:
                for data_file in reference.data_files:
                    append.append_data_file(data_file)
            tx.set_properties({property_name(JOB): doc})

    a, b = load_table(catalog_config, ours, refresh=True), load_table(catalog_config, theirs, refresh=True)
    spread = "commit.manifest.min-count-to-merge"  # by table name (see the merge test below)
    assert a.schema() == b.schema() and a.spec() == b.spec()
    assert {k: v for k, v in a.properties.items() if k != spread} == \
        {k: v for k, v in b.properties.items() if k != spread}
    assert len(a.metadata.snapshots) == len(b.metadata.snapshots) == 2
    drop = {"added-files-size", "total-files-size"}  # file sizes differ by the bodies' table name
    summary = {k: v for k, v in a.current_snapshot().summary.additional_properties.items() if k not in drop}
    assert summary == {k: v for k, v in b.current_snapshot().summary.additional_properties.items() if k not in drop}
    assert a.current_snapshot().parent_snapshot_id == a.metadata.snapshots[0].snapshot_id
    assert ids_in(catalog_config, ours) == ids_in(catalog_config, theirs) == list(range(20))
    assert stored_progress(a, JOB)["offsets"] == {"t/0": 20}


def test_snapshot_expiry_rides_in_the_commit(catalog_config, unique_name):
    """No extra commit and no per-process counter: the table's metadata decides, whoever commits."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    rule = MaintenanceConfig(expire_every_commits=3, retain_last_snapshots=2, max_snapshot_age_seconds=0)
    expired, counts = [], []
    for batch in range(12):
        outcome = commit_table(catalog_config, result_for(catalog_config, table_id, "t/0", batch * 5, 5), JOB,
                               batch, maintenance=rule)
        assert outcome.status == "committed"
        expired.append(outcome.expired)
        counts.append(len(load_table(catalog_config, table_id, refresh=True).metadata.snapshots))
    assert max(counts) <= rule.retain_last_snapshots + rule.expire_every_commits
    assert sum(expired) == 12 - counts[-1] and all(e in (0, 3) for e in expired)
    table = load_table(catalog_config, table_id, refresh=True)
    assert stored_progress(table, JOB)["offsets"] == {"t/0": 60}
    assert ids_in(catalog_config, table_id) == list(range(60))


def test_a_table_rolled_back_before_it_had_a_partition_holds_none_of_it(catalog_config, unique_name):
    """The rolled-back snapshot's offsets lack partition 0; the table then reads as holding none of it
    (next offset 0), so the job gives those rows back instead of starting the partition where the
    other tables stand, and a commit of them is accepted, once."""
    table_id = f"{unique_name('n')}.t"
    create_table(catalog_config, table_id, SCHEMA)
    assert commit_table(catalog_config, result_for(catalog_config, table_id, "t/1", 0, 4), JOB, 0).status == "committed"
    first = load_table(catalog_config, table_id, refresh=True).metadata.current_snapshot_id

    def both() -> TableResult:
        result = result_for(catalog_config, table_id, "t/0", 0, 5)
        result.merge(result_for(catalog_config, table_id, "t/1", 4, 3))
        return result

    assert commit_table(catalog_config, both(), JOB, 1).status == "committed"
    assert stored_progress(load_table(catalog_config, table_id, refresh=True), JOB)["offsets"] == {"t/0": 5, "t/1": 7}
    catalog_config.load().load_table(table_id).manage_snapshots().rollback_to_snapshot(first).commit()

    table = load_table(catalog_config, table_id, refresh=True)
    assert json.loads(table.properties[property_name(JOB)])["offsets"] == {"t/0": 5, "t/1": 7}  # the property moved on
    assert stored_progress(table, JOB)["offsets"] == {"t/0": 0, "t/1": 4}
    assert commit_table(catalog_config, both(), JOB, 2).status == "committed"
    assert commit_table(catalog_config, both(), JOB, 3).status == "skipped"
    bodies = sorted(read_iceberg(load_table(catalog_config, table_id, refresh=True)).column("body").to_pylist())
    assert bodies == sorted([f"t/0:{i}" for i in range(5)] + [f"t/1:{i}" for i in range(7)])


def _commit_partition(config: CatalogConfig, table_id: str, partition: int, batches: int) -> list[str]:
    statuses = []
    for batch in range(batches):
        result = result_for(config, table_id, f"t/{partition}", batch * 4, 4)
        statuses.append(commit_table(config, result, JOB, batch, retries=20, where="task").status)
    return statuses


def test_manifests_are_merged_unless_the_table_says_otherwise(catalog_config, unique_name):
    ns = unique_name("n")
    older, opted_out = f"{ns}.older", f"{ns}.opted_out"
    # a table made before merging was a default, and one whose owner turned it off
    create_table(catalog_config, opted_out, SCHEMA, properties={"commit.manifest-merge.enabled": "false"})
    catalog_config.load().create_table(older, schema=SCHEMA, properties={"commit.retry.num-retries": "0"})
    for batch in range(40):
        for name in (older, opted_out):
            outcome = commit_table(catalog_config, result_for(catalog_config, name, "t/0", batch * 3, 3), JOB, batch)
            assert outcome.status == "committed", outcome.error

    def manifests(name):
        table = load_table(catalog_config, name, refresh=True)
        return table, table.current_snapshot().manifests(table.io)

    table, merged = manifests(older)
    assert table.properties["commit.manifest-merge.enabled"] == "true"  # added by the first commit
    assert table.properties["commit.manifest.min-count-to-merge"] == \
        manifest_merge_properties(older)["commit.manifest.min-count-to-merge"]
    assert len(merged) < 32 and sum(m.added_files_count + m.existing_files_count for m in merged) == 40
    table, unmerged = manifests(opted_out)
    assert table.properties["commit.manifest-merge.enabled"] == "false" and len(unmerged) == 40
    for name in (older, opted_out):
        assert ids_in(catalog_config, name) == list(range(120))
        assert stored_progress(load_table(catalog_config, name), JOB)["offsets"] == {"t/0": 120}


def test_tables_created_together_merge_their_manifests_in_different_batches(catalog_config, unique_name):
    """Tables created in one batch and committed every batch would all merge in the same batch,
    one in ~32: each table's count is spread over 24-40 by its name, the same for the same name."""
    ns = unique_name("n")
    names = [f"{ns}.t{i}" for i in range(6)]
    counts = {}
    for name in names:
        table = create_table(catalog_config, name, SCHEMA)
        counts[name] = int(table.properties["commit.manifest.min-count-to-merge"])
        assert manifest_merge_properties(name)["commit.manifest.min-count-to-merge"] == str(counts[name])
    assert all(24 <= c <= 40 for c in counts.values()) and len(set(counts.values())) > 1
    merged_in: dict[str, int] = {}
    for batch in range(42):
        for name in names:
            assert commit_table(catalog_config, result_for(catalog_config, name, "t/0", batch, 1), JOB,
                                batch).status == "committed"
            table = load_table(catalog_config, name)
            if name not in merged_in and len(table.current_snapshot().manifests(table.io)) < batch + 1:
                merged_in[name] = batch
    assert set(merged_in) == set(names)
    assert all(merged_in[n] == counts[n] - 1 for n in names)  # the commit that makes `count` manifests merges
    assert len(set(merged_in.values())) > 1
    assert ids_in(catalog_config, names[0]) == list(range(42))


def test_processes_committing_one_table_each_commit_exactly_once(catalog_config, unique_name):
    """Two tasks' worth of commits to one fan-in table at once: the catalog's compare-and-swap makes
    one of each pair retry; nothing is lost, nothing is written twice, both offsets are kept."""
    table_id = f"{unique_name('n')}.fan_in"
    create_table(catalog_config, table_id, SCHEMA)
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        runs = pool.starmap(_commit_partition, [(catalog_config, table_id, p, 6) for p in (0, 1)])
    assert runs == [["committed"] * 6] * 2
    table = load_table(catalog_config, table_id, refresh=True)
    assert stored_progress(table, JOB)["offsets"] == {"t/0": 24, "t/1": 24}
    rows = read_iceberg(table)
    assert rows.num_rows == 48
    assert sorted(rows.column("body").to_pylist()) == sorted(f"t/{p}:{i}" for p in (0, 1) for i in range(24))
    # a second attempt of one of those tasks (a Spark retry) finds everything held and commits nothing
    again = result_for(catalog_config, table_id, "t/1", 20, 4)
    assert commit_table(catalog_config, again, JOB, 9).status == "skipped"
    assert read_iceberg(load_table(catalog_config, table_id, refresh=True)).num_rows == 48


def test_a_lost_swap_is_retried_at_once_and_repeated_losses_back_off(catalog_config, unique_name, monkeypatch):
    """Another committer landing first (compaction, another task of a fan-in table) costs a refresh,
    not a sleep; a second loss in a row backs off. Nothing is appended twice either way."""
    import router.catalog.commit as commit

    name = f"{unique_name('n')}.t"
    create_table(catalog_config, name, SCHEMA)
    waits: list[int] = []
    monkeypatch.setattr(commit, "backoff", lambda attempt, **kw: waits.append(attempt))

    def land_elsewhere(first: int) -> None:
        """Another process's handle commits, so the cached handle of this process is stale."""
        other = catalog_config.load().load_table(name)
        other.append(pa.table({"id": pa.array([first], pa.int64()), "body": pa.array(["elsewhere"])}))

    mine = result_for(catalog_config, name, "t/0", 0, 5)
    land_elsewhere(100)
    outcome = commit_table(catalog_config, mine, JOB, 0)
    assert (outcome.status, outcome.attempts, waits) == ("committed", 2, [])

    mine = result_for(catalog_config, name, "t/0", 5, 5)
    landings = iter([200, 300])
    real_load = commit.load_table

    def load_then_lose(config, identifier, refresh=False):
        table = real_load(config, identifier, refresh=refresh)
        first = next(landings, None)
        if first is not None:  # someone lands between this refresh and the swap, twice
            land_elsewhere(first)
        return table

    monkeypatch.setattr(commit, "load_table", load_then_lose)
    outcome = commit_table(catalog_config, mine, JOB, 1)
    assert (outcome.status, outcome.attempts, waits) == ("committed", 3, [1])
    assert ids_in(catalog_config, name) == [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 100, 200, 300]


def test_files_written_before_the_partition_spec_evolved_commit_under_their_own_spec(catalog_config, unique_name):
    """A task wrote its files, then another task evolved the table's spec before this commit: the files
    are listed in a manifest of the spec they were written in, so every reader prunes them right."""
    from pyiceberg.expressions import EqualTo
    from pyiceberg.transforms import BucketTransform

    table_id = f"{unique_name('l')}.t"
    create_table(catalog_config, table_id, SCHEMA, partition_by=["identity(body)"])
    early = result_for(catalog_config, table_id, "t/0", 0, 10)  # identity(body) files, not committed
    with load_table(catalog_config, table_id, refresh=True).update_spec() as update:  # the other task
        update.remove_field("body")
        update.add_field("id", BucketTransform(4), "id_bucket")
    outcome = commit_table(catalog_config, early, JOB, 0)
    assert outcome.status == "committed"
    later = result_for(catalog_config, table_id, "t/0", 10, 10)
    assert {f.spec_id for f in later.data_files} == {1}
    assert commit_table(catalog_config, later, JOB, 1).status == "committed"

    table = load_table(catalog_config, table_id, refresh=True)
    manifests = table.current_snapshot().manifests(table.io)
    assert {m.partition_spec_id for m in manifests} == {0, 1}
    early_values = {e.data_file.partition[0] for m in manifests if m.partition_spec_id == 0
                    for e in m.fetch_manifest_entry(table.io)}
    assert early_values == {f"t/0:{i}" for i in range(10)}  # identity(body) values, read as spec 0 has them
    assert sorted(read_iceberg(table).column("id").to_pylist()) == list(range(20))
    for i in (3, 13):  # each found through its own spec's partition values
        assert table.scan(row_filter=EqualTo("body", f"t/0:{i}")).to_arrow().column("id").to_pylist() == [i]
