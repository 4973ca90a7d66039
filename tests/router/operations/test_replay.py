"""`icerouter dlq` against a real registry and real SQLite / PostgreSQL catalogs, no Spark.

The letters are made by the job's own write path (`process_partition` and the commit, as in
tests/router/executor/test_partition.py) under a first configuration; a second configuration
fixes their cause (a route for an unmatched topic, a table's policy relaxed) and `dlq replay`
(a subprocess, as an operator runs it) is SIGKILLed at each of its steps (router/faults.py) and
run again. DuckDB reads the tables: every record once, in the tables the letters were for, the
letters that still fail kept with their new reason.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

import router.cli.demo_data as data
from router.catalog import get_catalog, load_table
from router.config import load_config
from router.driver.dispatcher import Dispatcher
from router.operations.letters import Selection, read_letters
from router.catalog.dead_letter_table import REPLAYS_PROPERTY
from router.ledger import table_ledger
from router.progress import stored_progress
from tests.duckdb_reader import read_iceberg
from tests.router.executor.test_partition import run_batch, source_batch


@pytest.fixture(params=["sqlite", "postgres", "rest"])
def catalog_props(request, tmp_path) -> dict:
    if request.param == "rest":  # an Iceberg REST catalog on S3 (SeaweedFS)
        return request.getfixturevalue("object_store").rest_catalog_properties()
    uri = f"sqlite:///{tmp_path / 'c.db'}" if request.param == "sqlite" else request.getfixturevalue("postgres_uri")
    return {"type": "sql", "uri": uri, "warehouse": (tmp_path / "wh").as_uri()}


def write_config(path, ns: str, registry_url: str, props: dict, fixed: bool, upsert: bool = False,
                 format_version: int = 2) -> str:
    copy = {"name": "copy", "topic": rf"{ns}\.orders", "table": f"{ns}.copy"}
    if upsert:
        copy.update({"mode": "upsert", "key": ["id"]})
    if not fixed:
        copy["evolution"] = {"new_column": "dlq"}  # new columns dead-lettered for this table only
    routes = [{"name": "raw", "topic": rf"{ns}\.orders", "table": f"{ns}.raw"}, copy]
    if fixed:
        routes.append({"name": "misc", "topic": rf"{ns}\.misc", "table": f"{ns}.misc"})
    path.write_text(yaml.safe_dump({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "pattern": rf"{ns}\..*"},
        "registry": {"url": registry_url},
        "catalog": {"name": ns, "properties": props},
        "job": {"name": f"job_{ns}"},
        "tables": {"allowed_namespaces": [ns], "format_version": format_version},
        "routes": routes,
        "dlq": {"table": f"{ns}.dead_letters"},
    }))
    return str(path)


def dlq(config_path: str, *args: str, crash: str | None = None, crash_dir=None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("ICEROUTER_CRASH_AT", None)
    if crash:
        env.update({"ICEROUTER_CRASH_AT": crash, "ICEROUTER_CRASH_DIR": str(crash_dir)})
    return subprocess.run([sys.executable, "-m", "router.cli", "dlq", *args, "--config", config_path],
                          capture_output=True, text=True, timeout=180, env=env)


def out(result: subprocess.CompletedProcess) -> dict:
    """The JSON a command printed; its stderr when it printed none."""
    assert result.stdout.strip(), f"exit {result.returncode}, nothing on stdout; stderr: {result.stderr[-2000:]}"
    return json.loads(result.stdout)


def make_letters(tmp_path, ns: str, registry_url: str, props: dict, upsert: bool = False,
                 format_version: int = 2) -> tuple[str, str]:
    """Letters written by the job's path under the first configuration: (first config, fixed config)."""
    orders, misc = f"{ns}.orders", f"{ns}.misc"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    v2 = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{orders}-v2", data.ORDER_V2))
    created = [(orders, 0, i, v1(data.order(i)), None) for i in range(5)]  # the tables made with v1
    records = [(orders, 0, i, v2(data.order(i, version=2)), None) for i in range(5, 8)]  # a new column
    records += [(orders, 0, 8, v1(data.order(8)), None), (orders, 0, 9, b"garbage", None)]
    records += [(misc, 0, i, v1(data.order(100 + i)), None) for i in range(2)]  # no route yet
    first = write_config(tmp_path / "first.yaml", ns, registry_url, props, fixed=False, upsert=upsert,
                         format_version=format_version)
    fixed = write_config(tmp_path / "fixed.yaml", ns, registry_url, props, fixed=True, upsert=upsert,
                         format_version=format_version)
    dispatcher = Dispatcher(load_config(first))
    for batch_id, batch in enumerate((created, records)):
        _, report = run_batch(dispatcher, [source_batch(batch)], batch_id)
        assert not report.failed
    return first, fixed


def rows_of(config, table: str, columns: tuple[str, ...]) -> list[tuple]:
    """The table's rows as DuckDB reads them (local files or S3), sorted."""
    rows = read_iceberg(load_table(config.catalog, table, refresh=True)).select(list(columns)).to_pylist()
    return sorted(tuple(r[c] for c in columns) for r in rows)


def offsets_in(config, table: str) -> list[tuple]:
    return rows_of(config, table, ("_kafka_topic", "_kafka_offset"))


def letters_of(config) -> list[tuple]:
    letters = read_letters(config.catalog, config.dlq.table, Selection(),
                           columns=("topic", "offset", "error_class", "table_name"))
    return sorted(tuple(r.values()) for r in letters.to_pylist())


def check_read_only_commands(fixed: str, config, before: list[tuple], orders: str, misc: str, copy: str) -> None:
    """`dlq summary`, `dlq list` and `dlq replay --dry-run` over the letters `make_letters` wrote: what they
    report, and that they change nothing."""
    summary = dlq(fixed, "summary", "--format", "json")
    assert summary.returncode == 0, summary.stderr
    assert out(summary)["by_reason"] == {"evolution_violation": 3, "unmatched": 2, "wire_format": 1}
    listed = dlq(fixed, "list", "--reason", "unmatched")
    assert listed.returncode == 0 and len(listed.stdout.splitlines()) == 2 and f"{misc}/0@0 unmatched" in listed.stdout

    dry = dlq(fixed, "replay", "--all", "--dry-run", "--format", "json")
    assert dry.returncode == 1, dry.stderr  # the garbage record would still fail
    plan = out(dry)
    assert plan["rows_by_table"] == {copy: 3, misc: 2} and plan["still_failing"] == {"wire_format": 1}
    assert letters_of(config) == before and offsets_in(config, copy)[-1] == (orders, 8)  # nothing changed


#: every step killed on SQLite; PostgreSQL and REST run the uninterrupted replay and one killed between its tables
CRASHES = [("sqlite", None), ("sqlite", "replay_write:1"), ("sqlite", "replay_table:1"),
           ("sqlite", "replay_table:2"), ("sqlite", "replay_letters:1"), ("postgres", None),
           ("postgres", "replay_table:1"), ("rest", None), ("rest", "replay_table:1")]


@pytest.mark.parametrize("catalog_props, crash", CRASHES, indirect=["catalog_props"])
def test_replay_lands_each_letter_once_whatever_step_it_is_killed_at(tmp_path, registry_url, catalog_props,
                                                                    unique_name, crash):
    ns = unique_name("r")
    first, fixed = make_letters(tmp_path, ns, registry_url, catalog_props)
    config = load_config(fixed)
    orders, misc = f"{ns}.orders", f"{ns}.misc"
    raw, copy = f"{ns}.raw", f"{ns}.copy"
    before = letters_of(config)
    assert before == sorted([(misc, 0, "unmatched", None), (misc, 1, "unmatched", None),
                             (orders, 5, "evolution_violation", copy), (orders, 6, "evolution_violation", copy),
                             (orders, 7, "evolution_violation", copy), (orders, 9, "wire_format", None)])
    assert offsets_in(config, copy) == [(orders, o) for o in (0, 1, 2, 3, 4, 8)]
    raw_before = offsets_in(config, raw)
    progress_before = {t: stored_progress(load_table(config.catalog, t, refresh=True), config.job.name)
                       for t in (raw, copy, config.dlq.table)}

    if crash is None:  # the same letters whatever the crash: the read-only commands are checked once per catalog
        check_read_only_commands(fixed, config, before, orders, misc, copy)
    else:
        killed = dlq(fixed, "replay", "--all", crash=crash, crash_dir=tmp_path)
        assert killed.returncode == -9, killed.stdout + killed.stderr
    done = dlq(fixed, "replay", "--all", "--format", "json")
    assert done.returncode == 1, done.stderr
    again = dlq(fixed, "replay", "--all", "--format", "json")  # a third run changes nothing
    assert again.returncode == 1 and out(again)["selected"] == 1

    assert offsets_in(config, copy) == [(orders, o) for o in range(9)]  # every record once
    assert offsets_in(config, raw) == raw_before  # the letters were for copy: raw took nothing again
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1)]
    assert [r[:3] for r in letters_of(config)] == [(orders, 9, "wire_format")]
    replays = json.loads(load_table(config.catalog, config.dlq.table, refresh=True).properties[
        REPLAYS_PROPERTY.format(job=config.job.name)])
    assert replays["landed"] == 5 and replays["still_failing"] >= 2 and replays["runs"] >= 2
    taken = table_ledger(load_table(config.catalog, copy, refresh=True), config.job.name).replayed
    assert taken == {f"{orders}/0": [[5, 7]]}
    for table in (raw, copy, config.dlq.table):  # the job's own offsets are as they were
        after = stored_progress(load_table(config.catalog, table, refresh=True), config.job.name)
        assert after["offsets"] == progress_before[table]["offsets"]
        assert after.get("settled") == progress_before[table].get("settled")


def upsert_letters(tmp_path, registry_url, ns: str, props: dict, batches: list[list[tuple]]) -> str:
    """An upsert table's letters made by the job's path: each batch a list of (offset, key, schema version);
    version 2 (a new column) is dead-lettered under the first configuration. The fixed configuration."""
    orders = f"{ns}.orders"
    v1 = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{orders}-value", data.ORDER_V1))
    v2 = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{orders}-v2", data.ORDER_V2))

    def rec(offset, key, version):
        record = data.order(offset, version=version)
        record["id"] = key
        return (orders, 0, offset, (v1 if version == 1 else v2)(record), None)

    first = write_config(tmp_path / "first.yaml", ns, registry_url, props, fixed=False, upsert=True)
    fixed = write_config(tmp_path / "fixed.yaml", ns, registry_url, props, fixed=True, upsert=True)
    dispatcher = Dispatcher(load_config(first))
    for batch_id, batch in enumerate(batches):
        _, report = run_batch(dispatcher, [source_batch([rec(*r) for r in batch])], batch_id)
        assert not report.failed
    return fixed


def test_upsert_replay_keeps_newer_rows(tmp_path, registry_url, catalog_props, unique_name):
    ns = unique_name("u")
    orders = f"{ns}.orders"
    # key 1: a letter at offset 3, a newer row at offset 7; key 2: a row at offset 1, a letter at offset 4
    fixed = upsert_letters(tmp_path, registry_url, ns, catalog_props,
                           [[(1, 2, 1)], [(3, 1, 2), (4, 2, 2), (7, 1, 1)]])
    config = load_config(fixed)
    copy = f"{ns}.copy"
    assert rows_of(config, copy, ("id", "_kafka_offset")) == [(1, 7), (2, 1)]
    assert [r[:2] for r in letters_of(config)] == [(orders, 3), (orders, 4)]
    done = dlq(fixed, "replay", "--table", copy, "--format", "json")
    assert done.returncode == 0, done.stderr
    report = out(done)
    assert report["landed"] == 2 and report["superseded"] == 1
    assert rows_of(config, copy, ("id", "_kafka_offset")) == [(1, 7), (2, 4)]  # the newer row of key 1 stays
    assert letters_of(config) == []
    assert dlq(fixed, "replay", "--all").returncode == 0  # nothing left


def test_replay_needs_a_selection_and_a_catalog(tmp_path, registry_url, unique_name):
    ns = unique_name("r")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    fixed = write_config(tmp_path / "fixed.yaml", ns, registry_url, props, fixed=True)
    refused = dlq(fixed, "replay")
    assert refused.returncode == 2 and "give a selection" in refused.stderr
    assert dlq(fixed, "replay", "--since", "yesterday").returncode == 2
    missing = dlq(fixed, "replay", "--all")  # a catalog that does not exist (a mistyped path) is never created
    assert missing.returncode == 3 and "does not exist (no file" in missing.stderr and not (tmp_path / "c.db").exists()
    get_catalog(load_config(fixed).catalog)  # the job's first run creates it
    empty = dlq(fixed, "replay", "--all")
    assert empty.returncode == 0 and "replay of 0 dead letter(s)" in empty.stdout
    pg = {"type": "sql", "uri": "postgresql+psycopg2://u:s3cret@127.0.0.1:9/db", "warehouse": (tmp_path / "wh").as_uri()}
    down = write_config(tmp_path / "down.yaml", ns, registry_url, pg, fixed=True)
    result = dlq(down, "summary")
    assert result.returncode == 3 and "could not reach the Iceberg catalog" in result.stderr
    assert "s3cret" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_a_letter_that_lands_in_one_table_and_fails_in_another(tmp_path, registry_url, unique_name):
    """An unmatched record replayed after two routes were added: one table takes it, the other's
    policy refuses it; the letter is replaced by one for the refusing table alone, whose own replay
    later lands there without writing the first table's row again."""
    ns = unique_name("r")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    first, _ = make_letters(tmp_path, ns, registry_url, props)
    misc, copy = f"{ns}.misc", f"{ns}.copy"
    v2 = data.Encoder(data.ORDER_V2, data.register(registry_url, f"{misc}-v2", data.ORDER_V2))
    run_batch(Dispatcher(load_config(first)), [source_batch([(misc, 0, 2, v2(data.order(102, version=2)), None)])], 2)
    config_of = {}
    for name, strict in (("both.yaml", True), ("relaxed.yaml", False)):
        raw = yaml.safe_load(open(first).read())
        raw["routes"] = [r for r in raw["routes"] if r["name"] == "raw"] + [
            {"name": "misc", "topic": rf"{ns}\.misc", "table": misc},
            {"name": "misc-copy", "topic": rf"{ns}\.misc", "table": copy,
             **({"evolution": {"new_column": "dlq"}} if strict else {})}]
        (tmp_path / name).write_text(yaml.safe_dump(raw))
        config_of[name] = str(tmp_path / name)
    config = load_config(config_of["both.yaml"])

    done = dlq(config_of["both.yaml"], "replay", "--topic", misc, "--format", "json")
    assert done.returncode == 1, done.stderr  # misc 2 still fails for copy (a new column)
    assert out(done)["still_failing"] == {"evolution_violation": 1}
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1), (misc, 2)]
    assert (misc, 0) in offsets_in(config, copy) and (misc, 2) not in offsets_in(config, copy)
    assert [r for r in letters_of(config) if r[0] == misc] == [(misc, 2, "evolution_violation", copy)]

    again = dlq(config_of["relaxed.yaml"], "replay", "--topic", misc)
    assert again.returncode == 0, again.stdout + again.stderr
    assert offsets_in(config, misc) == [(misc, 0), (misc, 1), (misc, 2)]  # misc took nothing again
    assert [o for t, o in offsets_in(config, copy) if t == misc] == [0, 1, 2]
    assert [r for r in letters_of(config) if r[0] == misc] == []


def test_jobs_sharing_a_dead_letter_table_see_their_own_letters(tmp_path, registry_url, unique_name):
    ns = unique_name("r")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    _, fixed = make_letters(tmp_path, ns, registry_url, props)
    other = tmp_path / "other.yaml"
    raw = yaml.safe_load(open(fixed).read())
    raw["job"]["name"] = "another_job"
    other.write_text(yaml.safe_dump(raw))
    summary = dlq(str(other), "summary", "--format", "json")
    assert summary.returncode == 0 and out(summary)["total"] == 0
    untouched = dlq(str(other), "replay", "--all", "--format", "json")
    assert untouched.returncode == 0 and out(untouched)["selected"] == 0
    assert out(dlq(fixed, "summary", "--format", "json"))["total"] == 6


def test_list_and_summary_select_by_time_table_and_reason(tmp_path, registry_url, unique_name):
    ns = unique_name("r")
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}", "warehouse": (tmp_path / "wh").as_uri()}
    _, fixed = make_letters(tmp_path, ns, registry_url, props)
    assert out(dlq(fixed, "summary", "--since", "1h", "--format", "json"))["total"] == 6
    assert out(dlq(fixed, "summary", "--until", "1h", "--format", "json"))["total"] == 0
    assert out(dlq(fixed, "summary", "--since", "2000-01-01T00:00:00", "--until", "2999-01-01", "--format",
                   "json"))["total"] == 6
    by_table = out(dlq(fixed, "summary", "--table", f"{ns}.copy", "--format", "json"))
    assert by_table["by_reason"] == {"evolution_violation": 3} and by_table["by_topic"] == {f"{ns}.orders": 3}
    listed = out(dlq(fixed, "list", "--reason", "wire_format", "--format", "json"))
    assert listed["total"] == 1 and listed["letters"][0]["offset"] == 9 and "value" not in listed["letters"][0]
    limited = dlq(fixed, "list", "--limit", "2")
    assert limited.returncode == 0 and limited.stdout.splitlines()[-1] == "... 4 more (--limit 0 shows all)"
