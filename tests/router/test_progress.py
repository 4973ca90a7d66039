"""Exactly-once by offsets: replays, partial overlaps, dead letters and start positions.

Real registry, real SQLite / PostgreSQL catalogs, DuckDB reads back; no Spark (the
executor write path runs as `mapInArrow` would call it, commits run the real code).
"""

from __future__ import annotations

import dataclasses
import json
import pickle

import pyarrow as pa
import pytest

import router.cli.demo_data as data
from router.driver.commits import commit_all
from router.catalog.dead_letter_table import ensure_dead_letter_table
from router.progress import property_name, stored_progress, tp_keys
from router.driver.resume import plan_resume
from router.source.offsets import ResumePlan, resume_start, split_key, tp_key
from router.source.rewind import batch_ranges, next_end, open_rewinds
from router.catalog import load_table
from router.descriptors import STATS_ROW, TableResult
from router.executor.tasks import process_partition
from router.ledger import table_ledger
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch  # noqa: F401


def orders(enc, topic, offsets, partition=0):
    return source_batch([(topic, partition, i, enc(data.order(i)), None) for i in offsets])


@pytest.fixture
def orders_job(catalog_config, registry_url, unique_name):  # noqa: F811
    ns = unique_name("x")
    topic = f"{ns}.orders"
    enc = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    routes = [{"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"},
              {"name": "copy", "topic": rf"{ns}\.orders", "table": f"{ns}.copy"}]
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, routes)
    return dispatcher, enc, topic, f"{ns}.{ns}_orders", f"{ns}.copy", f"{ns}.dead_letters"


def test_replay_under_another_batch_id_writes_nothing(orders_job, catalog_config):  # noqa: F811
    dispatcher, enc, topic, table, _, _ = orders_job
    run_batch(dispatcher, [orders(enc, topic, range(5))], 7)
    results, report = run_batch(dispatcher, [orders(enc, topic, range(5))], 0)  # a new checkpoint restarts at 0
    assert results[table].written == 0 and results[table].replayed == 5
    assert [o.status for o in report.outcomes if o.table == table] == []  # nothing to commit, nothing tried
    assert [r[0] for r in read(catalog_config, table, "_kafka_offset")] == [0, 1, 2, 3, 4]
    stored = json.loads(load_table(catalog_config, table, refresh=True).properties[property_name("icerouter")])
    assert stored == {"batch_id": 7, "offsets": {f"{topic}/0": 5}}
    reads = table_ledger(load_table(catalog_config, table, refresh=True), "icerouter").reads
    assert [starts[f"{topic}/0"] for starts in reads.values()] == [0]  # one read, from 0: nothing read again


def test_partial_overlap_writes_exactly_the_missing_rows(orders_job, catalog_config):  # noqa: F811
    dispatcher, enc, topic, table, copy, _ = orders_job
    run_batch(dispatcher, [orders(enc, topic, range(5))], 3)
    results, report = run_batch(dispatcher, [orders(enc, topic, range(10)), orders(enc, topic, range(4), 1)], 1)
    assert results[table].written == 9 and results[table].replayed == 5
    for name in (table, copy):
        got = read(catalog_config, name, "_kafka_partition, _kafka_offset", "_kafka_partition, _kafka_offset")
        assert got == [(0, i) for i in range(10)] + [(1, i) for i in range(4)]
        assert stored_progress(load_table(catalog_config, name, refresh=True), "icerouter")["offsets"] == \
            {f"{topic}/0": 10, f"{topic}/1": 4}


def test_commit_refuses_rows_the_table_already_holds(orders_job, catalog_config):  # noqa: F811
    """Files written before the table moved on (a second job under the same name) never commit twice."""
    dispatcher, enc, topic, table, _, _ = orders_job
    stale = written_not_committed(dispatcher, [orders(enc, topic, range(8))])
    run_batch(dispatcher, [orders(enc, topic, range(5))], 1)
    report = commit_all(dispatcher.config.catalog, [stale[table]], "icerouter", 2)
    assert report.outcomes[0].status == "failed" and "already holds part" in report.outcomes[0].error
    run_batch(dispatcher, [orders(enc, topic, range(5, 8))], 3)
    report = commit_all(dispatcher.config.catalog, [stale[table]], "icerouter", 4)
    assert report.outcomes[0].status == "skipped"
    assert [r[0] for r in read(catalog_config, table, "_kafka_offset")] == list(range(8))


def written_not_committed(dispatcher, batches) -> dict[str, TableResult]:
    results: dict[str, TableResult] = {}
    for batch in batches:
        ctx = dataclasses.replace(dispatcher.context(0), commit_in_tasks=False)  # the driver would commit these
        for out in process_partition(iter([batch]), ctx):
            for name, blob in zip(out.column("table").to_pylist(), out.column("descriptor").to_pylist()):
                if name != STATS_ROW:
                    results.setdefault(name, TableResult(name)).merge(pickle.loads(blob))
    return results


def settle(dispatcher, settled: dict, batch_id: int) -> None:
    """What the dispatcher commits last in every batch: the dead-letter table's settled offsets."""
    dlq = dispatcher.config.dlq.table
    ensure_dead_letter_table(dispatcher.config.catalog, dlq)
    report = commit_all(dispatcher.config.catalog, [TableResult(dlq, settled=settled)], "icerouter", batch_id)
    assert report.outcomes[0].status == "committed"


def test_dead_letters_exactly_once_across_replays(orders_job, catalog_config):  # noqa: F811
    dispatcher, enc, topic, _, _, dlq = orders_job

    def batch(offsets, bad):
        return source_batch([(topic, 0, i, b"not framed" if i in bad else enc(data.order(i)), None)
                             for i in offsets])

    run_batch(dispatcher, [batch(range(6), {2, 4})], 5)
    results, _ = run_batch(dispatcher, [batch(range(9), {2, 4, 7})], 0)  # replay + 3 new records
    assert results[dlq].rows == 1 and results[dlq].replayed == 2
    letters = read(catalog_config, dlq, "\"offset\", error_class", "\"offset\"")
    assert letters == [(2, "wire_format"), (4, "wire_format"), (7, "wire_format")]


def test_start_positions_follow_the_tables(orders_job, catalog_config):  # noqa: F811
    dispatcher, enc, topic, table, copy, _ = orders_job
    run_batch(dispatcher, [orders(enc, topic, range(5)), orders(enc, topic, range(3), 1)], 0)
    settle(dispatcher, {f"{topic}/0": [0, 4], f"{topic}/1": [0, 2]}, 0)
    run_batch(dispatcher, [orders(enc, topic, range(5, 9))], 1)
    settle(dispatcher, {f"{topic}/0": [5, 8]}, 1)
    assert stored_progress(load_table(catalog_config, dispatcher.config.dlq.table, refresh=True),
                           "icerouter")["settled"] == {f"{topic}/0": 9, f"{topic}/1": 3}
    # one table behind the other (restored from its first snapshot)
    behind = load_table(catalog_config, copy, refresh=True)
    first = min(behind.metadata.snapshots, key=lambda s: s.sequence_number)
    # each task commits its partition: the first snapshot holds one of the two
    held_first = json.loads(first.summary[property_name("icerouter")])["offsets"]
    assert len(held_first) == 1 and held_first.get(f"{topic}/0", 5) == 5 and held_first.get(f"{topic}/1", 3) == 3
    behind.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
    config = dispatcher.config
    parts = [(topic, 0), (topic, 1), (topic, 2)]
    plan = plan_resume(config, parts, {f"{topic}/0": 0, f"{topic}/1": 0, f"{topic}/2": 0},
                       {f"{topic}/0": 20, f"{topic}/1": 3, f"{topic}/2": 4})
    # the restored table holds what its first snapshot says, and none of the other partition
    assert plan.resume[f"{topic}/0"] == held_first.get(f"{topic}/0", 0)
    assert plan.resume[f"{topic}/1"] == held_first.get(f"{topic}/1", 0)
    # rolled back since the job's last commit to it: read again in the first batch, past a checkpoint too
    assert plan.backfill == {f"{topic}/0": held_first.get(f"{topic}/0", 0), f"{topic}/1": held_first.get(f"{topic}/1", 0)}
    assert first_batch_from({f"{topic}/0": 9, f"{topic}/1": 3}, {f"{topic}/0": 20, f"{topic}/1": 3}, plan) \
        == {f"{topic}/0": held_first.get(f"{topic}/0", 0), f"{topic}/1": held_first.get(f"{topic}/1", 0)}
    assert f"{topic}/2" not in plan.resume  # no table holds it: the configured start applies
    assert any(f"{copy}" in note for note in plan.notes)


def first_batch_from(checkpoint: dict, latest: dict, plan: ResumePlan) -> dict:
    """Where the first batch after a start reads each partition from, as the source plans it."""
    opened = open_rewinds(checkpoint, plan.backfill)
    end, _ = next_end(checkpoint, latest, None, "turns", None, opened)
    begin, until = batch_ranges(checkpoint, end, opened)
    return resume_start(begin, until, plan, keep=set(opened))


def test_new_route_backfills_from_the_configured_start(orders_job, catalog_config, registry_url):  # noqa: F811
    dispatcher, enc, topic, table, copy, _ = orders_job
    run_batch(dispatcher, [orders(enc, topic, range(10))], 0)
    routes = [{"name": r.name, "topic": r.topic, "table": r.table} for r in dispatcher.config.routes]
    ns = table.split(".")[0]
    grown = make_dispatcher(catalog_config, registry_url, ns, routes + [
        {"name": "late", "topic": rf"{ns}\.orders", "table": f"{ns}.late"}])
    plan = plan_resume(grown.config, [(topic, 0)], {f"{topic}/0": 2}, {f"{topic}/0": 10})
    assert plan.backfill == {f"{topic}/0": 2} and plan.resume == {f"{topic}/0": 2}  # retention removed 0..1
    # with a checkpoint at 10, the first batch reads the new table's backlog, later ones do not rewind
    assert first_batch_from({f"{topic}/0": 10}, {f"{topic}/0": 12}, plan) == {f"{topic}/0": 2}
    assert resume_start({f"{topic}/0": 12}, {f"{topic}/0": 14}, plan) == {f"{topic}/0": 12}
    results, _ = run_batch(grown, [orders(enc, topic, range(2, 12))], 0)
    assert results[f"{ns}.late"].written == 10 and results[table].written == 2 and results[table].replayed == 8
    assert [r[0] for r in read(catalog_config, table, "_kafka_offset")] == list(range(12))


def test_resume_start_skips_ahead_of_an_old_checkpoint():
    plan = ResumePlan({"t/0": 50, "t/1": 5}, {})
    assert resume_start({"t/0": 10, "t/1": 8}, {"t/0": 40, "t/1": 9}, plan) == {"t/0": 40, "t/1": 8}
    assert ResumePlan.from_json(plan.to_json()).resume == plan.resume


def test_keys_of_rows_are_the_keys_of_their_partitions():
    topics, partitions = ["orders", "a.b-c_d", "orders"], [0, 12, 3]
    keys = tp_keys(pa.array(topics), pa.array(partitions, pa.int32())).to_pylist()
    assert keys == [tp_key(t, p) for t, p in zip(topics, partitions)] == ["orders/0", "a.b-c_d/12", "orders/3"]
    assert [split_key(k) for k in keys] == list(zip(topics, partitions))
    letters = tp_keys(pa.array(topics), pa.array(partitions), pa.array(["db.t", None, "db.u"])).to_pylist()
    assert letters == ["db.t|orders/0", "|a.b-c_d/12", "db.u|orders/3"]


@pytest.mark.parametrize("rows", [1, 30, 255, 256, 5_000])
def test_row_helpers_equal_the_arrow_paths(rows):
    """`cover_rows` and `trim_rows` loop in Python under SMALL_ROWS rows: the same ranges and masks
    as the Arrow paths (string keys, group-by, dictionary encoding) they stand for."""
    import random

    import router.progress as progress

    rng = random.Random(rows)
    topics = pa.array([f"t{rng.randint(0, 3)}" for _ in range(rows)]).dictionary_encode()
    partitions = pa.array([rng.randint(0, 11) for _ in range(rows)], pa.int32())
    offsets = pa.array([rng.randint(0, 10_000) for _ in range(rows)], pa.int64())
    keys = tp_keys(topics, partitions)
    expected: dict = {"t0/0": [5, 20_000]}
    for key, offset in zip(keys.to_pylist(), offsets.to_pylist()):
        lo, hi = expected.get(key, [offset, offset])
        expected[key] = [min(lo, offset), max(hi, offset)]
    into, arrow = {"t0/0": [5, 20_000]}, {"t0/0": [5, 20_000]}
    progress.cover_rows(topics, partitions, offsets, into)
    progress.cover(keys, offsets, arrow)
    assert into == arrow == expected
    for stored in ({}, {"t9/0": 3}, {"t1/10": 5_000, "t2/3": 0}, {"t0/1": 10_001, "t3/11": 2_500}):
        mine, theirs = progress.trim_rows(topics, partitions, offsets, stored), progress.trim_mask(keys, offsets, stored)
        assert (mine is None) == (theirs is None)
        if mine is not None:
            assert mine.to_pylist() == theirs.to_pylist() and not all(mine.to_pylist())
