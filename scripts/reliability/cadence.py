"""Commit cadence scenario: a table that commits every `COLD_SECONDS` beside one that commits every batch.

A live `icerouter run` reads a hot topic (every batch) and a cold topic whose route says
`commit_after: COLD_SECONDS`:

1. a first wave, read at once (after a start the age of what waits is unknown);
2. a second wave: the hot table has it within seconds while the cold table holds none of it;
   the status file and `icerouter status` say how many records the cold table holds back;
   then SIGKILL before the cold table's commit, and a restart reads the held wave at once;
3. a third wave waits for the cold table's cadence (its first wait after the restart: its share of
   COLD_SECONDS, at least MIN_FIRST_SHARE), which commits it no sooner than that after it was first
   seen and within a trigger and a batch of COLD_SECONDS; SIGKILL right after that commit;
4. the checkpoint is deleted and the job runs again with --available-now.

After every step DuckDB must find every record once in each table.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import router.cli.demo_data as data
from router.source.cadence import first_share
from scripts import REPO
from scripts.reliability.helpers import (
    JobProcess, Ledger, Tally, create_topics, job_env, load_catalog_from, register, run_job, wait_for,
    write_config,
)
from scripts.reliability.scenarios import Outcome, Services, encode, new_prefix

COLD_SECONDS = 20
#: A table's first wait after a start is a share of its cadence, from its name (router/source/cadence.py
#: `first_share`, which spreads tables read together at a start). The cold table is named so that its
#: share is near 1: the waits observed here are the first after a start, and must be whole cadences to
#: see the records held.
MIN_FIRST_SHARE = 0.95
WAVE = 15  # records per topic and wave
STEPS = ("first wave", "held wave, killed before the cold commit", "restart, killed after the cold commit",
         "checkpoint lost")


def _rows(catalog_props: dict, table: str) -> int:
    from pyiceberg.exceptions import NoSuchTableError

    try:
        snapshot = load_catalog_from(catalog_props).load_table(table).current_snapshot()
    except NoSuchTableError:
        return 0
    return int(snapshot.summary["total-records"]) if snapshot is not None else 0


def commit_cadence(services: Services, workdir: Path) -> Outcome:
    p = new_prefix("cad")
    while first_share(f"{p}.cold_events") < MIN_FIRST_SHARE:
        p = new_prefix("cad")
    hot, cold = f"{p}.hot", f"{p}.cold"
    ops = f"{p}_ops"
    dlq_table = f"{ops}.dead_letters"
    hot_table, cold_table = f"{p}.hot_events", f"{p}.cold_events"
    create_topics(services.bootstrap, [hot, cold], partitions=2)
    reg = services.producer_registry()
    ids = {t: register(reg, f"{t}-value", data.ORDER_V1) for t in (hot, cold)}
    routes = [{"name": "hot", "topic": re.escape(hot), "table": hot_table},
              {"name": "cold", "topic": re.escape(cold), "table": cold_table, "commit_after": COLD_SECONDS}]
    config = write_config(workdir / f"{p}.yaml", bootstrap=services.bootstrap, registry=services.registry,
                          catalog_props=services.catalog_props, job_name=f"job_{p}",
                          topics_pattern=rf"{re.escape(p)}\..*", routes=routes, namespaces=[p, ops],
                          dlq_table=dlq_table, maintenance={"expire_every_commits": 1000})
    ledger = Ledger(dlq_table)
    counter = iter(range(1_000_000))
    outcome = Outcome("commit cadence", p, ledger, None, services.catalog_props)
    tallies, log = {}, workdir / f"{p}.log"

    def wave(topics=(hot, cold)) -> None:
        messages = []
        for topic in topics:
            for _ in range(WAVE):
                n = next(counter)
                messages.append((topic, str(n).encode(), encode(data.ORDER_V1, ids[topic], data.order(n)), None))
        ledger.produce(services.bootstrap, messages,
                       lambda topic, _h: [hot_table] if topic == hot else [cold_table])

    def expected(table: str) -> int:
        return sum(ledger.expected.get(table, {}).values())

    def landed(table: str) -> bool:
        return _rows(services.catalog_props, table) >= expected(table)

    wave()
    job = JobProcess(config, log)
    wait_for(lambda: landed(hot_table) and landed(cold_table), 180, job, "the first wave in both tables")
    tallies[STEPS[0]] = Tally.observe(STEPS[0], ledger, services.catalog_props)

    produced = time.time()
    wave()
    wait_for(lambda: landed(hot_table), 60, job, "the second wave in the hot table")
    outcome.facts["hot_seconds"] = time.time() - produced
    time.sleep(3)  # two more triggers: the cold partitions are still held
    outcome.facts["cold_rows_while_held"] = _rows(services.catalog_props, cold_table)
    status = json.loads(Path(workdir / f"status_job_{p}.json").read_text())
    outcome.facts["status_waiting"] = status.get("waiting", {}).get(cold_table)
    cli = subprocess.run([sys.executable, "-m", "router.cli", "status", "--config", str(config), "--format", "json"],
                         env=job_env(), capture_output=True, text=True, timeout=120, cwd=REPO)
    tables = {t["table"]: t for t in json.loads(cli.stdout or "{}").get("tables", [])}
    outcome.facts["cli_waiting"] = (tables.get(cold_table) or {}).get("waiting")
    outcome.facts["held_seconds"] = time.time() - produced
    outcome.runs.append(job.kill())

    job = JobProcess(config, log)
    wait_for(lambda: landed(cold_table), 180, job, "the held wave in the cold table after the restart")
    tallies[STEPS[1]] = Tally.observe(STEPS[1], ledger, services.catalog_props)
    time.sleep(2)  # the restart's first batch is done: its plan found nothing waiting
    produced = time.time()
    wave((cold,))
    wait_for(lambda: landed(cold_table), COLD_SECONDS + 30, job, "the cold table's commit", interval=0.25)
    outcome.facts["cold_seconds"] = time.time() - produced
    outcome.runs.append(job.kill())
    tallies[STEPS[2]] = Tally.observe(STEPS[2], ledger, services.catalog_props)

    wave()
    shutil.rmtree(workdir / f"checkpoint_job_{p}", ignore_errors=True)
    outcome.runs.append(run_job(config, "--available-now", log=log).returncode)
    tallies[STEPS[3]] = Tally.observe(STEPS[3], ledger, services.catalog_props)
    outcome.facts["tallies"] = tallies
    outcome.tally = tallies[STEPS[3]]
    outcome.log = log.read_text(errors="replace")
    outcome.facts["expected"] = {hot_table: expected(hot_table), cold_table: expected(cold_table)}
    outcome.facts["tables"] = (hot_table, cold_table)
    return outcome
