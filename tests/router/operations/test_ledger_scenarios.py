"""The job and `dlq replay` share one ledger per table (router/ledger.py): every record once, in any order.

The letters are made by the job's own write path (as in test_replay.py) and the job's start is
decided by its own function (`plan_resume`), then the batch it would read runs through the same
path; `dlq replay` runs as a subprocess, SIGKILLed at its steps and run again. DuckDB reads the
tables. Scenarios: a route added for dead-lettered records (replay first, then the job; the job
first, then the replay), a header-named route renamed before its letters are replayed, a route
removed (its letters stay), a rollback past a replay, and the dry run against the replay on upsert
letters.
"""

from __future__ import annotations

import json

import pytest
import yaml

import router.cli.demo_data as data
from router.catalog import load_table
from router.catalog.dead_letter_table import REPLAYS_PROPERTY
from router.config import load_config
from router.driver.dispatcher import Dispatcher
from router.driver.resume import plan_resume
from router.ledger import table_ledger
from tests.router.executor.test_partition import run_batch, source_batch
from tests.router.operations.test_replay import (  # noqa: F401 (fixture)
    catalog_props, dlq, letters_of, make_letters, offsets_in, out, rows_of, upsert_letters, write_config,
)

#: every step of the replay killed on SQLite, one on PostgreSQL
KILLS = [("sqlite", None), ("sqlite", "replay_write:1"), ("sqlite", "replay_table:1"),
         ("sqlite", "replay_letters:1"), ("postgres", "replay_table:1")]


def replay_all(config_path: str, tmp_path, crash: str | None, *args: str) -> dict:
    """`dlq replay --all`, first killed at `crash` when given, then run to its end: its JSON report."""
    if crash is not None:
        killed = dlq(config_path, "replay", "--all", *args, crash=crash, crash_dir=tmp_path)
        assert killed.returncode == -9, killed.stdout + killed.stderr
    done = dlq(config_path, "replay", "--all", "--format", "json", *args)
    assert done.returncode in (0, 1), done.stderr
    return out(done)


def job_start(config_path: str, records: list[tuple], batch_id: int) -> dict:
    """The job's start on `config_path` (its own decision of where each partition starts reading), then
    one batch of what that start reads among `records`; the tables' start plan is returned."""
    config = load_config(config_path)
    keys = sorted({(t, p) for t, p, *_ in records})
    end = {f"{t}/{p}": max(o for t2, p2, o, *_ in records if (t2, p2) == (t, p)) + 1 for t, p in keys}
    plan = plan_resume(config, keys, {k: 0 for k in end}, end)
    start = {k: min(plan.resume.get(k, end[k]), plan.backfill.get(k, end[k])) for k in end}
    batch = [r for r in records if r[2] >= start[f"{r[0]}/{r[1]}"]]
    if batch:
        _, report = run_batch(Dispatcher(config), [source_batch(batch)], batch_id)
        assert not report.failed
    return plan.backfills


def misc_records(registry_url: str, ns: str) -> list[tuple]:
    """The records of the topic no route took in `make_letters` (its offsets 0 and 1)."""
    misc = f"{ns}.misc"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{misc}-value", data.ORDER_V1))
    return [(misc, 0, i, v1(data.order(100 + i)), None) for i in range(2)]


@pytest.mark.parametrize("catalog_props, crash", KILLS, indirect=["catalog_props"])
def test_a_route_added_then_replay_then_job_writes_each_record_once(tmp_path, registry_url, catalog_props,
                                                                   unique_name, crash):
    ns = unique_name("a")
    _, fixed = make_letters(tmp_path, ns, registry_url, catalog_props)
    config, misc = load_config(fixed), f"{ns}.misc"
    report = replay_all(fixed, tmp_path, crash)
    assert report["still_failing"] == {"wire_format": 1}
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1)]
    ledger = table_ledger(load_table(config.catalog, misc, refresh=True), config.job.name)
    assert ledger.replayed == {f"{misc}/0": [[0, 1]]} and not ledger.job_committed

    backfills = job_start(fixed, misc_records(registry_url, ns), 2)  # the job meets a table only a replay wrote
    assert backfills[misc] == {f"{misc}/0": (2, 2)}  # new to the job: its backfill starts past what it holds
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1)]  # and the ledger kept it from writing them again
    ledger = table_ledger(load_table(config.catalog, misc, refresh=True), config.job.name)
    assert ledger.positions() == {f"{misc}/0": 2} and ledger.replayed == {f"{misc}/0": [[0, 1]]}
    assert letters_of(config) == [(f"{ns}.orders", 9, "wire_format", None)]


@pytest.mark.parametrize("catalog_props, crash", KILLS, indirect=["catalog_props"])
def test_a_route_added_then_job_then_replay_writes_each_record_once(tmp_path, registry_url, catalog_props,
                                                                   unique_name, crash):
    """The order docs/operations-dlq.md gives: fix, restart the job (its backfill writes the records),
    replay: the letters land as held, nothing is written twice, the letter that cannot land stays."""
    ns = unique_name("b")
    _, fixed = make_letters(tmp_path, ns, registry_url, catalog_props)
    config, misc, copy = load_config(fixed), f"{ns}.misc", f"{ns}.copy"
    backfills = job_start(fixed, misc_records(registry_url, ns), 2)
    assert backfills[misc] == {f"{misc}/0": (0, 2)}
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1)]

    dry = dlq(fixed, "replay", "--all", "--dry-run", "--format", "json")
    assert dry.returncode == 1, dry.stderr
    predicted = out(dry)
    assert predicted["rows_by_table"] == {copy: 3}  # misc holds its records: nothing would be written there
    report = replay_all(fixed, tmp_path, crash)
    if crash is None:
        assert report["rows_by_table"] == predicted["rows_by_table"]
        assert report["landed"] == predicted["landed"] == 5
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1)]
    assert offsets_in(config, copy) == [(f"{ns}.orders", o) for o in range(9)]
    assert letters_of(config) == [(f"{ns}.orders", 9, "wire_format", None)]
    replays = json.loads(load_table(config.catalog, config.dlq.table, refresh=True).properties[
        REPLAYS_PROPERTY.format(job=config.job.name)])
    assert replays["landed"] == 5


def test_a_record_the_job_read_before_its_letter_is_not_held(tmp_path, registry_url, unique_name):
    """A letter from before routing (a schema id the registry did not know yet) for tables that had read
    past it: their progress passed the record without it, so once the schema is registered the replay
    writes it to both tables of the fan-out."""
    ns = unique_name("w")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    orders = f"{ns}.orders"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    late_schema = {**data.ORDER_V1, "name": f"Late{ns}"}  # the same fields under a new name: a new id
    probe = data.register(registry_url, f"{ns}.probe-value", {**data.ORDER_V1, "name": f"Probe{ns}"})
    late_id = probe + 1  # the emulator numbers schemas in turn: the id the late schema will get
    unknown = b"\x00" + late_id.to_bytes(4, "big") + v1(data.order(1))[5:]
    path = write_config(tmp_path / "c.yaml", ns, registry_url, props, fixed=True)
    run_batch(Dispatcher(load_config(path)), [source_batch([(orders, 0, 0, v1(data.order(0)), None),
                                                             (orders, 0, 1, unknown, None),
                                                             (orders, 0, 2, v1(data.order(2)), None)])], 0)
    config = load_config(path)
    assert [r[:3] for r in letters_of(config)] == [(orders, 1, "schema_not_found")]
    assert data.register(registry_url, f"{ns}.late-value", late_schema) == late_id
    report = replay_all(path, tmp_path, None)
    assert report["landed"] == 1 and report["rows_by_table"] == {f"{ns}.raw": 1, f"{ns}.copy": 1}
    for table in (f"{ns}.raw", f"{ns}.copy"):
        assert offsets_in(config, table) == [(orders, 0), (orders, 1), (orders, 2)]
    assert letters_of(config) == []


@pytest.mark.parametrize("catalog_props, crash", KILLS[:2] + KILLS[3:], indirect=["catalog_props"])
def test_letters_of_a_renamed_route_land_through_the_routes_that_match_now(tmp_path, registry_url, catalog_props,
                                                                          unique_name, crash):
    """Letters of a header-named route whose namespace was refused; the fixed config allows it and
    renames the route: the letters land in the table the renamed route names, the fan-out table that
    took the records then takes nothing again. A route removed instead: the letters stay, saying so."""
    ns, tenant = unique_name("h"), unique_name("t")
    orders = f"{ns}.orders"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    records = [(orders, 0, i, v1(data.order(i)), [("tenant", tenant.encode())]) for i in range(3)]

    def config_file(name: str, routes: list, namespaces: list) -> str:
        raw = yaml.safe_load(open(write_config(tmp_path / name, ns, registry_url, catalog_props, fixed=True)).read())
        raw["routes"] = [{"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.raw"}, *routes]
        raw["tables"]["allowed_namespaces"] = namespaces
        (tmp_path / name).write_text(yaml.safe_dump(raw))
        return str(tmp_path / name)

    by_tenant = {"topic": rf"{ns}\.orders", "table": "{header.tenant}.events"}
    first = config_file("first.yaml", [{"name": "tenants", **by_tenant}], [ns])
    renamed = config_file("renamed.yaml", [{"name": "per-tenant", **by_tenant}], [ns, tenant])
    removed = config_file("removed.yaml", [], [ns, tenant])
    run_batch(Dispatcher(load_config(first)), [source_batch(records)], 0)
    config = load_config(first)
    assert [r[2:] for r in letters_of(config)] == [("TableNameError", None)] * 3
    assert offsets_in(config, f"{ns}.raw") == [(orders, 0), (orders, 1), (orders, 2)]

    gone = dlq(removed, "replay", "--all", "--format", "json")  # no route names a table for them now
    assert gone.returncode == 1, gone.stderr
    assert out(gone)["still_failing"] == {"replay_unrouted": 3} and out(gone)["landed"] == 0
    dry_gone = dlq(removed, "replay", "--all", "--dry-run", "--format", "json")
    assert dry_gone.returncode == 1 and out(dry_gone)["still_failing"] == {"replay_unrouted": 3}
    assert [r[2] for r in letters_of(config)] == ["replay_unrouted"] * 3  # kept, with the reason

    report = replay_all(renamed, tmp_path, crash)
    assert report["still_failing"] == {} and report["rows_by_table"].get(f"{ns}.raw") is None
    assert offsets_in(config, f"{tenant}.events") == [(orders, 0), (orders, 1), (orders, 2)]
    assert offsets_in(config, f"{ns}.raw") == [(orders, 0), (orders, 1), (orders, 2)]  # fan-out: not again
    assert letters_of(config) == []


@pytest.mark.parametrize("catalog_props", ["sqlite", "postgres"], indirect=True)
def test_a_rollback_past_a_replay_gives_its_records_back_to_the_job(tmp_path, registry_url, catalog_props,
                                                                    unique_name):
    ns = unique_name("k")
    _, fixed = make_letters(tmp_path, ns, registry_url, catalog_props)
    config, orders, copy = load_config(fixed), f"{ns}.orders", f"{ns}.copy"
    before_replay = load_table(config.catalog, copy, refresh=True).metadata.current_snapshot_id
    replay_all(fixed, tmp_path, None)
    assert offsets_in(config, copy) == [(orders, o) for o in range(9)]
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    later = [(orders, 0, o, v1(data.order(o)), None) for o in (10, 11)]
    run_batch(Dispatcher(config), [source_batch(later)], 2)
    config.catalog.load().load_table(copy).manage_snapshots().rollback_to_snapshot(before_replay).commit()
    assert offsets_in(config, copy) == [(orders, o) for o in (0, 1, 2, 3, 4, 8)]  # the replay's rows went too

    ledger = table_ledger(load_table(config.catalog, copy, refresh=True), config.job.name)
    assert ledger.gaps == {f"{orders}/0": [[5, 7]]} and ledger.rewind_from() == {f"{orders}/0": 5}
    v2 = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{orders}-v2", data.ORDER_V2))
    everything = [(orders, 0, i, v1(data.order(i)), None) for i in range(5)]
    everything += [(orders, 0, i, v2(data.order(i, version=2)), None) for i in range(5, 8)]
    everything += [(orders, 0, 8, v1(data.order(8)), None), (orders, 0, 9, b"garbage", None), *later]
    backfills = job_start(fixed, everything, 3)
    assert backfills[copy] == {f"{orders}/0": (5, 12)}
    assert offsets_in(config, copy) == [(orders, o) for o in (*range(9), 10, 11)]  # each once, none lost
    assert table_ledger(load_table(config.catalog, copy, refresh=True), config.job.name).gaps == {}
    assert [r[:3] for r in letters_of(config)] == [(orders, 9, "wire_format")]  # not dead-lettered twice
    assert replay_all(fixed, tmp_path, None)["landed"] == 0
    assert offsets_in(config, copy) == [(orders, o) for o in (*range(9), 10, 11)]


@pytest.mark.parametrize("crash", [None, "replay_table:1"])
def test_the_dry_run_decides_upsert_letters_as_the_replay_does(tmp_path, registry_url, unique_name, crash):
    """Key 1: a letter at offset 3, a newer live row at 7 (superseded); key 2: letters at 4 and 5, reduced
    to one image. The dry run's counts are the replay's, and the recorded counts do not depend on the
    step a run was killed at."""
    ns = unique_name("u")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    orders, copy = f"{ns}.orders", f"{ns}.copy"
    fixed = upsert_letters(tmp_path, registry_url, ns, props,
                           [[(1, 2, 1)], [(3, 1, 2), (4, 2, 2), (5, 2, 2), (7, 1, 1)]])
    config = load_config(fixed)
    assert [r[:2] for r in letters_of(config)] == [(orders, 3), (orders, 4), (orders, 5)]
    dry = dlq(fixed, "replay", "--all", "--dry-run", "--format", "json")
    assert dry.returncode == 0, dry.stderr
    predicted = out(dry)
    assert (predicted["rows_by_table"], predicted["landed"], predicted["superseded"]) == ({copy: 1}, 3, 1)
    assert rows_of(config, copy, ("id", "_kafka_offset")) == [(1, 7), (2, 1)]  # the dry run changed nothing

    report = replay_all(fixed, tmp_path, crash)
    if crash is None:
        assert (report["rows_by_table"], report["landed"], report["superseded"]) == ({copy: 1}, 3, 1)
    assert rows_of(config, copy, ("id", "_kafka_offset")) == [(1, 7), (2, 5)]
    replays = json.loads(load_table(config.catalog, config.dlq.table, refresh=True).properties[
        REPLAYS_PROPERTY.format(job=config.job.name)])
    assert (replays["landed"], replays["superseded"], replays["still_failing"]) == (3, 1, 0)


@pytest.mark.parametrize("catalog_props", ["sqlite", "postgres"], indirect=True)
def test_compaction_and_a_lost_checkpoint_after_a_replay_keep_every_record_once(tmp_path, registry_url,
                                                                               catalog_props, unique_name):
    """After a replay, `maintain` compacts the table and expires its older snapshots: the ledger moves
    with the compaction's snapshot. Then the job starts with no checkpoint and reads the topic from its
    start (where its tables send it): nothing is written twice, and a second replay finds nothing."""
    from router.config import MaintenanceConfig
    from router.maintenance.run import maintain_table

    ns = unique_name("c")
    _, fixed = make_letters(tmp_path, ns, registry_url, catalog_props)
    config, orders, copy = load_config(fixed), f"{ns}.orders", f"{ns}.copy"
    replay_all(fixed, tmp_path, None)
    table = load_table(config.catalog, copy, refresh=True)
    maintain_table(table, MaintenanceConfig(retain_last_snapshots=1, max_snapshot_age_seconds=0,
                                            orphan_min_age_seconds=3600))
    table = load_table(config.catalog, copy, refresh=True)
    assert table.current_snapshot().summary.operation.value == "replace" and len(table.metadata.snapshots) == 1
    assert table_ledger(table, config.job.name).replayed == {f"{orders}/0": [[5, 7]]}

    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    v2 = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{orders}-v2", data.ORDER_V2))
    everything = [(orders, 0, i, v1(data.order(i)), None) for i in range(5)]
    everything += [(orders, 0, i, v2(data.order(i, version=2)), None) for i in range(5, 8)]
    everything += [(orders, 0, 8, v1(data.order(8)), None), (orders, 0, 9, b"garbage", None),
                   (orders, 0, 10, v1(data.order(10)), None)]
    raw_before = offsets_in(config, f"{ns}.raw")
    start = plan_resume(config, [(orders, 0)], {f"{orders}/0": 0}, {f"{orders}/0": 11})
    assert not start.backfill, start.notes  # the compacted table is not taken for one rolled back
    # a lost checkpoint and a source that reads the partition again from 0 (the tables trim what they hold)
    _, report = run_batch(Dispatcher(config), [source_batch(everything)], 0)
    assert not report.failed
    assert offsets_in(config, copy) == [(orders, o) for o in (*range(9), 10)]
    assert offsets_in(config, f"{ns}.raw") == [*raw_before, (orders, 10)]
    assert [r[:3] for r in letters_of(config)] == [(orders, 9, "wire_format")]
    assert replay_all(fixed, tmp_path, None)["landed"] == 0
    assert offsets_in(config, copy) == [(orders, o) for o in (*range(9), 10)]
