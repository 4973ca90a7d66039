"""Format v3 tables the job writes, read row for row by Java Iceberg, DuckDB and pyiceberg.

Deletion vectors (upsert, CDC, sequence_by), row lineage (``_row_id``,
``_last_updated_sequence_number``: Java and DuckDB read them, pyiceberg 0.12 has no metadata
columns) through inline merges and compaction, fan-in, and a v2 table upgraded by `icerouter
maintain` after `icerouter plan` showed it. The tables are written by the executor write path and
the real commit, as in test_reference_reads.py.
"""

from __future__ import annotations

import json

import pytest
from pyiceberg.manifest import FileFormat

import router.cli.demo_cdc as cdc
import router.cli.demo_data as data
from router.catalog import load_table
from router.catalog.format_v3 import referenced_data_file
from router.catalog.snapshot_files import snapshot_files
from router.maintenance import compact, plan_compaction
from router.maintenance.run import maintain_command
from router.planning.plan import plan_command
from tests.duckdb_reader import connect
from tests.javaref.client import assert_readers_agree, rows_of
from tests.javaref.test_reference_reads import catalog_config  # noqa: F401 - the fixture
from tests.router.executor.test_partition import make_dispatcher, run_batch, source_batch
from tests.router.executor.test_upsert import Stream

pytestmark = pytest.mark.slow

MiB = 1 << 20
LINEAGE = ["_row_id", "_last_updated_sequence_number"]


def _committed(report) -> None:
    assert not report.failed and not [o for o in report.outcomes if o.status == "failed"], report.outcomes


def lineage(java_reader, table) -> dict[str, tuple]:
    """Every live row (as canonical JSON of its columns) -> (_row_id, _last_updated_sequence_number),
    read by Java and by DuckDB, which must agree."""
    table = table.refresh()
    columns = [f.name for f in table.schema().fields]
    java = rows_of(java_reader.read(table, columns + LINEAGE))
    location = table.metadata_location.removeprefix("file://")
    con = connect()
    try:
        duck = rows_of(con.execute(f"SELECT *, {', '.join(LINEAGE)} FROM iceberg_scan('{location}')")
                       .to_arrow_table())
    finally:
        con.close()
    assert java == duck, f"Java and DuckDB read different row lineage: {sorted(set(java) ^ set(duck))[:4]}"
    out = {}
    for line in java:
        row = json.loads(line)
        out[json.dumps({c: row[c] for c in columns}, sort_keys=True)] = tuple(row[c] for c in LINEAGE)
    assert len(out) == len(java)
    ids = [v[0] for v in out.values()]
    assert None not in ids and len(set(ids)) == len(ids), "row ids are missing or repeat"
    return out


def vectors_only(table) -> list:
    """The table's delete files: deletion vectors only, at most one live per data file."""
    files = snapshot_files(table.refresh())
    deletes = [d for d, _ in files.deletes]
    assert all(d.file_format == FileFormat.PUFFIN for d in deletes), "a position-delete file on a v3 table"
    referenced = [referenced_data_file(d) for d in deletes]
    assert len(referenced) == len(set(referenced)), "a data file with two live deletion vectors"
    return deletes


@pytest.mark.parametrize("partition_by", [None, ["identity(region)", "bucket(4, id)"]],
                         ids=["unpartitioned", "partitioned"])
def test_v3_cdc_tables_with_deletion_vectors_before_and_after_compaction(java_reader, catalog_config, registry_url,
                                                                         unique_name, partition_by):
    ns = unique_name("v3cdc")
    topic, name = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic)
    route = {"name": "customers", "topic": rf"{ns}\.customers", "table": name, "cdc": "debezium"}
    if partition_by:
        route["partition_by"] = partition_by
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [route],
                                 tables={"allowed_namespaces": [ns], "format_version": 3})
    script = cdc.ChangeScript(seed=11)
    steps = [lambda: list(script.snapshot(40)),
             lambda: [*script.mixed(30), *script.update(3), *script.update(3)],
             lambda: [*script.delete(5), *script.recreate(5), *script.change_key(7), *script.mixed(25)],
             lambda: [*script.update(5), *script.mixed(20)]]
    for batch_id, step in enumerate(steps):
        _committed(run_batch(dispatcher, stream.batches(step()), batch_id)[1])
    table = load_table(catalog_config, name, refresh=True)
    assert table.metadata.format_version == 3
    assert vectors_only(table), "no deletion vectors to apply"
    before = assert_readers_agree(java_reader, table)
    assert len(before) == len(script.rows)
    ids_before = lineage(java_reader, table)

    result = compact(table, plan_compaction(table, MiB), MiB)
    assert result.files_removed and result.rows_deleted and result.removed_delete_files
    table = load_table(catalog_config, name, refresh=True)
    assert assert_readers_agree(java_reader, table) == before
    assert lineage(java_reader, table) == ids_before, "compaction changed the rows' lineage"

    _committed(run_batch(dispatcher, stream.batches([*script.update(), *script.mixed(10)]), len(steps))[1])
    table = load_table(catalog_config, name, refresh=True)
    vectors_only(table)
    assert len(assert_readers_agree(java_reader, table)) == len(script.rows)
    after = lineage(java_reader, table)
    kept = set(after) & set(ids_before)
    assert kept and all(after[r] == ids_before[r] for r in kept), "untouched rows changed their lineage"


def test_v3_append_fan_in_keeps_row_ids_through_merges_and_compaction(java_reader, catalog_config, registry_url,
                                                                      unique_name):
    """A fan-in table of three topics whose small files are merged inline at every second commit:
    each row keeps the _row_id and sequence number it got when first committed."""
    ns = unique_name("v3fan")
    clicks = [f"{ns}.clicks_{i}" for i in range(3)]
    click = data.Encoder(data.CLICK, data.register(registry_url, f"{ns}.clicks-value", data.CLICK))
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "fan-in", "topic": rf"{ns}\.clicks_.*", "table": f"{ns}.clicks", "format_version": 3}],
        maintenance={"merge_small_files_at": 2})
    seen: dict[str, tuple] = {}
    offset = 0
    for batch_id in range(5):
        records = [(clicks[(offset + i) % 3], 0, offset + i, click(data.click(offset + i)), None) for i in range(9)]
        offset += 9
        _committed(run_batch(dispatcher, [source_batch(records)], batch_id)[1])
        table = load_table(catalog_config, f"{ns}.clicks", refresh=True)
        now = lineage(java_reader, table)
        assert all(now[r] == v for r, v in seen.items()), f"a row's lineage changed in batch {batch_id}"
        seen = now
    table = load_table(catalog_config, f"{ns}.clicks", refresh=True)
    assert table.metadata.format_version == 3
    assert [s for s in table.metadata.snapshots if s.summary.operation.value == "overwrite"], "no inline merge"
    rows = assert_readers_agree(java_reader, table)
    # 45 rows, each with its own id (a merged file's rows keep theirs; the ids its file inherits go unused)
    assert len(rows) == len(seen) == 45
    result = compact(table, plan_compaction(table, MiB), MiB)
    assert result.files_removed >= 2 and result.files_added == 1
    table = load_table(catalog_config, f"{ns}.clicks", refresh=True)
    assert assert_readers_agree(java_reader, table) == rows
    assert lineage(java_reader, table) == seen


def test_v3_stale_changes_are_deleted_by_vectors_in_their_own_snapshot(java_reader, catalog_config, registry_url,
                                                                        unique_name):
    """sequence_by across batches (router/catalog/sequence.py) on a v3 table: a stale change's image is
    deleted by a deletion vector of the snapshot that adds it, which Java must apply."""
    from tests.router.executor.test_sequence_across_batches import Topics, event

    ns = unique_name("v3sq")
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, [
        {"name": "seq", "topic": r"db[12]\.customers", "table": f"{ns}.seq", "cdc": "debezium",
         "format": "connect_json", "sequence_by": "source.lsn", "format_version": 3}])
    t = Topics()
    for batch_id, batch in enumerate([
            t.batch(("db1.customers", event("c", 1, 10, None, 10)), ("db1.customers", event("c", 2, 11, None, 11))),
            t.batch(("db2.customers", event("u", 1, 5, 1, 5)), ("db2.customers", event("d", 2, 6, 2, None)))]):
        _committed(run_batch(dispatcher, batch, batch_id)[1])
    seq = load_table(catalog_config, f"{ns}.seq", refresh=True)
    assert seq.metadata.format_version == 3 and vectors_only(seq)
    assert [r.split("v")[-1][:2] for r in assert_readers_agree(java_reader, seq)] == ["10", "11"]


def test_a_v2_cdc_table_upgraded_by_maintain_after_plan_showed_it(java_reader, catalog_config, registry_url,
                                                                  unique_name):
    """The route asks for v3 after its table was made as v2 with position deletes: plan shows the
    upgrade, the job goes on writing v2, `maintain` upgrades it, and then the job writes deletion
    vectors merged with the old position deletes; every reader reads the same rows throughout."""
    ns = unique_name("v3up")
    topic, name = f"{ns}.customers", f"{ns}.customers"
    stream = Stream(registry_url, topic)
    route = {"name": "customers", "topic": rf"{ns}\.customers", "table": name, "cdc": "debezium"}
    script = cdc.ChangeScript(seed=5)
    v2 = make_dispatcher(catalog_config, registry_url, ns, [route])
    _committed(run_batch(v2, stream.batches(list(script.snapshot(30))), 0)[1])
    _committed(run_batch(v2, stream.batches([*script.mixed(20), *script.delete()]), 1)[1])
    rows_then = len(script.rows)
    table = load_table(catalog_config, name, refresh=True)
    assert table.metadata.format_version == 2
    assert {d.file_format for d, _ in snapshot_files(table).deletes} == {FileFormat.PARQUET}
    before = assert_readers_agree(java_reader, table)

    v3 = make_dispatcher(catalog_config, registry_url, ns, [{**route, "format_version": 3}])
    output, blocked, _ = plan_command(v3.config, subjects=[f"{topic}-value"])
    assert not blocked and "table format: format v2 -> v3" in output, output
    _committed(run_batch(v3, stream.batches([*script.update(), *script.update()]), 2)[1])  # the job does not upgrade
    table = load_table(catalog_config, name, refresh=True)
    assert table.metadata.format_version == 2
    assert "would upgrade" in maintain_command(v3.config, name, dry_run=True)
    assert load_table(catalog_config, name, refresh=True).metadata.format_version == 2

    report = maintain_command(v3.config, name)
    assert "upgraded: format v2 -> v3" in report, report
    table = load_table(catalog_config, name, refresh=True)
    assert table.metadata.format_version == 3
    assert len(assert_readers_agree(java_reader, table)) == len(script.rows)
    assert len(before) == rows_then

    _committed(run_batch(v3, stream.batches([*script.update(), *script.update(), *script.mixed(15)]), 3)[1])
    table = load_table(catalog_config, name, refresh=True)
    formats = {d.file_format for d, _ in snapshot_files(table).deletes}
    assert FileFormat.PUFFIN in formats  # new deletes are vectors; old position-delete files may remain
    assert len(assert_readers_agree(java_reader, table)) == len(script.rows)
    lineage(java_reader, table)
    compact(table, plan_compaction(table, MiB), MiB)
    table = load_table(catalog_config, name, refresh=True)
    assert len(assert_readers_agree(java_reader, table)) == len(script.rows)
    assert "format v3" not in plan_command(v3.config, subjects=[f"{topic}-value"])[0]  # nothing left to change


def test_v3_dead_letters_replayed_compacted_and_expired(java_reader, tmp_path, registry_url, unique_name):
    """`tables.format_version: 3` makes the dead-letter table v3 too: a replay deletes the letters it
    landed with a deletion vector; Java, DuckDB and pyiceberg read it and the table the letters
    landed in alike, after the replay, after compaction and after expiry."""
    from router.catalog.expiry import expire_snapshots
    from router.config import load_config
    from tests.router.operations.test_replay import dlq, make_letters

    ns = unique_name("v3dl")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    _, fixed = make_letters(tmp_path, ns, registry_url, props, format_version=3)
    config = load_config(fixed)
    letters = load_table(config.catalog, config.dlq.table, refresh=True)
    assert letters.metadata.format_version == 3 and len(assert_readers_agree(java_reader, letters)) == 6
    replay = dlq(fixed, "replay", "--all", "--format", "json")
    assert replay.returncode == 1, replay.stderr  # the garbage record fails again and stays
    copy = load_table(config.catalog, f"{ns}.copy", refresh=True)
    assert copy.metadata.format_version == 3
    assert sorted(json.loads(r)["_kafka_offset"] for r in assert_readers_agree(java_reader, copy)) == list(range(9))
    letters = load_table(config.catalog, config.dlq.table, refresh=True)
    assert vectors_only(letters), "the replay deleted no letter"
    left = assert_readers_agree(java_reader, letters)
    assert [json.loads(r)["error_class"] for r in left] == ["wire_format"]
    result = compact(letters, plan_compaction(letters, MiB), MiB)
    assert result.files_removed >= 1
    assert assert_readers_agree(java_reader, letters) == left and not vectors_only(letters)
    assert expire_snapshots(letters, retain_last=1, max_age_seconds=0) >= 1
    assert assert_readers_agree(java_reader, load_table(config.catalog, config.dlq.table, refresh=True)) == left
