"""Concurrent writers: two jobs with different names and a pyiceberg appender on one table."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import router.cli.demo_data as data
from scripts.reliability.appender import APPENDER_TOPIC
from scripts.reliability.helpers import JobProcess, Ledger, Tally, create_topics, job_env, register, write_config
from scripts.reliability.scenarios import Outcome, Services, encode, new_prefix

CONCURRENT_TOPICS = 3
CONCURRENT_PER_TOPIC = 100
APPENDED_ROWS = 15


def concurrent_writers(services: Services, workdir: Path) -> Outcome:
    """Two jobs with different names fan into one table while a third process appends with pyiceberg."""
    p = new_prefix("cw")
    shared, ops = f"{p}_shared.events", f"{p}_ops"
    reg = services.producer_registry()
    ledger = Ledger(f"{ops}.dead_letters")
    topics = {side: [f"{p}.{side}_{i}" for i in range(CONCURRENT_TOPICS)] for side in ("a", "b")}
    create_topics(services.bootstrap, topics["a"] + topics["b"], partitions=2)
    for side, names in topics.items():
        for i, tp in enumerate(names):
            sid = register(reg, f"{tp}-value", data.ORDER_V1)
            ledger.produce(services.bootstrap,
                           [(tp, None, encode(data.ORDER_V1, sid, data.order(1000 * i + j)), None)
                            for j in range(CONCURRENT_PER_TOPIC)], lambda topic, h: [shared])
    configs = {}
    for side in ("a", "b"):
        configs[side] = write_config(
            workdir / f"{p}_{side}.yaml", bootstrap=services.bootstrap, registry=services.registry,
            catalog_props=services.catalog_props, job_name=f"job_{p}_{side}",
            topics_pattern=rf"{re.escape(p)}\.{side}_.*", namespaces=[f"{p}_shared", ops],
            dlq_table=ledger.dlq_table, routes=[{"name": "fan-in", "table": shared}],
            kafka={"max_records_per_batch": 120})
    log = workdir / f"{p}.log"
    jobs = [JobProcess(configs[side], log.with_name(f"{p}_{side}.log"), "--available-now",
                       env=services.registry_env) for side in ("a", "b")]
    appender = subprocess.run([sys.executable, "-m", "scripts.reliability.appender",
                               json.dumps(services.catalog_props), shared, str(APPENDED_ROWS), "0.5"],
                              env=job_env(), capture_output=True, text=True, timeout=400)
    rcs = [job.proc.wait(400) for job in jobs]
    outputs = "".join(job.output() for job in jobs)
    for job in jobs:
        job.stop()
    assert appender.returncode == 0, appender.stderr[-3000:]
    appended = json.loads(appender.stdout.strip().splitlines()[-1])
    for offset in appended:
        ledger.expect(shared, (APPENDER_TOPIC, 0, offset))
        ledger.sent += 1
    tally = Tally.observe("concurrent writers: 2 jobs + pyiceberg appender", ledger, services.catalog_props)
    return Outcome("concurrent_writers", p, ledger, tally, services.catalog_props, rcs, outputs,
                   facts={"shared": shared, "topics": topics, "jobs": [f"job_{p}_a", f"job_{p}_b"],
                          "appended": appended})
