"""Checkpoint scenarios: the tables, not the Spark checkpoint, decide what was written.

One job, one topic fanned out to three tables plus a plain topic, bad records
among the good ones (dead letters), run with --available-now after each step:

1. first run (its good records all in one partition); a copy of its checkpoint is kept;
2. more records arrive, the checkpoint is deleted, the job starts again;
3. more records, the checkpoint is replaced by the old copy;
4. one fan-out table is rolled back to its first snapshot and the job starts
   with a fresh checkpoint (that table is behind the others, and holds nothing
   of the partition the first run did not write to);
5. another fan-out table is rolled back the same way and the job restarts on
   its checkpoint, which is past the rows that table lost;
6. a route to a new table is added (backfilled from the earliest offset) and
   the job restarts on its checkpoint.

After every step DuckDB must find every record once in each of its tables and
every bad record once in the dead-letter table.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import router.cli.demo_data as data
from router.routing import normalise_identifier_part
from scripts.reliability.helpers import (
    Ledger, Tally, create_topics, load_catalog_from, register, run_job, write_config,
)
from scripts.reliability.scenarios import Outcome, Services, encode, new_prefix

STEPS = ("first run", "checkpoint deleted", "older checkpoint", "table behind, fresh checkpoint",
         "table behind, checkpoint kept", "route added")
GOOD, BAD = 12, 2  # per topic and step


def checkpoint_loss(services: Services, workdir: Path, verbose: bool = False) -> Outcome:
    p = new_prefix("cp")
    fan, solo = f"{p}.fan", f"{p}.solo"
    ops = f"{p}_ops"
    dlq_table = f"{ops}.dead_letters"
    fan_tables = [f"{p}.a", f"{p}.b", f"{p}.c"]
    solo_table = f"{p}.{normalise_identifier_part(solo)}"
    create_topics(services.bootstrap, [fan, solo], partitions=2)
    reg = services.producer_registry()
    ids = {t: register(reg, f"{t}-value", data.ORDER_V1) for t in (fan, solo)}
    routes = [{"name": f"fan_{t[-1]}", "topic": re.escape(fan), "table": t} for t in fan_tables]
    routes.append({"name": "solo", "topic": re.escape(solo), "table": f"{p}.{{topic}}"})

    def config(extra_routes=()):
        return write_config(
            workdir / f"{p}.yaml", bootstrap=services.bootstrap, registry=services.registry,
            catalog_props=services.catalog_props, job_name=f"job_{p}", topics_pattern=rf"{re.escape(p)}\..*",
            routes=routes + list(extra_routes), namespaces=[p, ops], dlq_table=dlq_table,
            maintenance={"expire_every_commits": 1000})

    ledger = Ledger(dlq_table)
    counter = iter(range(1_000_000))
    fan_targets = list(fan_tables)

    fan_partitions: list[set] = []  # per step, the partitions the fan topic's good records went to

    def produce() -> dict:
        """GOOD + BAD records per topic; returns what this step must write.

        The first step's good records share one key, so they land in one partition: the
        table rolled back to its first snapshot then holds none of the other partition.
        """
        before = {t: sum(c.values()) for t, c in ledger.expected.items()}
        first = not fan_partitions
        for topic, tables in ((fan, fan_targets), (solo, [solo_table])):
            good = []
            for _ in range(GOOD):
                n = next(counter)
                good.append((topic, b"first run" if first else str(n).encode(),
                             encode(data.ORDER_V1, ids[topic], data.order(n)), None))
            coords = ledger.produce(services.bootstrap, good, lambda t, h, tables=tables: tables)
            if topic == fan:
                fan_partitions.append({partition for _, partition, _ in coords})
            bad = [(topic, b"bad", b"not framed", None) for _ in range(BAD)]
            ledger.produce(services.bootstrap, bad, lambda t, h: ("dlq", "wire_format"))
        after = {t: sum(c.values()) for t, c in ledger.expected.items()}
        return {t: after[t] - before.get(t, 0) for t in after}

    cfg = config()
    checkpoint = workdir / f"checkpoint_job_{p}"
    status = workdir / f"status_job_{p}.json"
    log = workdir / f"{p}.log"
    runs, tallies, written = [], {}, {}

    def run(step: str, new: dict, config_path: Path = cfg) -> None:
        res = run_job(config_path, "--available-now", env=services.registry_env, log=log, verbose=verbose)
        runs.append(res)
        tallies[step] = Tally.observe(step, ledger, services.catalog_props)
        body = json.loads(status.read_text()) if status.exists() else {}
        written[step] = {"expected_rows": sum(n for t, n in new.items() if t != dlq_table),
                         "expected_dead_letters": new.get(dlq_table, 0),
                         "rows": body.get("totals", {}).get("rows"),
                         "dead_letters": body.get("totals", {}).get("dead_letters")}
        status.unlink(missing_ok=True)

    run(STEPS[0], produce())
    old_copy = workdir / f"checkpoint_copy_{p}"
    shutil.copytree(checkpoint, old_copy)

    new = produce()
    shutil.rmtree(checkpoint)
    run(STEPS[1], new)

    new = produce()
    shutil.rmtree(checkpoint)
    shutil.copytree(old_copy, checkpoint)
    run(STEPS[2], new)

    def roll_back(table_id: str) -> int:
        """Back to its first snapshot; returns how many rows the table lost."""
        behind = load_catalog_from(services.catalog_props).load_table(table_id)
        first = min(behind.metadata.snapshots, key=lambda s: s.sequence_number)
        behind.manage_snapshots().rollback_to_snapshot(first.snapshot_id).commit()
        return sum(ledger.expected[table_id].values()) - int(first.summary["total-records"])

    rolled_back = roll_back(fan_tables[1])
    new = produce()
    new[fan_tables[1]] += rolled_back
    shutil.rmtree(checkpoint)
    run(STEPS[3], new)

    rolled_back_kept = roll_back(fan_tables[2])
    new = produce()
    new[fan_tables[2]] += rolled_back_kept
    run(STEPS[4], new)  # on the checkpoint of the run before, which is past the rolled-back rows

    late = f"{p}.late"
    for coord in ledger.expected[fan_tables[0]]:
        ledger.expect(late, coord)
    backlog = sum(ledger.expected[late].values())
    fan_targets.append(late)
    new = produce()
    new[late] += backlog
    run(STEPS[5], new, config([{"name": "late", "topic": re.escape(fan), "table": late}]))

    final = tallies[STEPS[-1]]
    return Outcome("checkpoints", p, ledger, final, services.catalog_props, runs,
                   log.read_text(errors="replace") if log.exists() else "",
                   facts={"tallies": tallies, "written": written, "tables": fan_tables + [solo_table, late],
                          "rolled_back": rolled_back, "rolled_back_kept": rolled_back_kept, "dlq_table": dlq_table,
                          "fan_partitions": fan_partitions})
