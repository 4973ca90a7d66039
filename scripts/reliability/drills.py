"""Run the reliability scenarios against a private local stack and print a summary table.

    python scripts/faults.py [--only bad_input,faults,concurrent,checkpoints] [--workdir DIR]

Scenarios (scripts/reliability/{scenarios,outages,concurrency,checkpoints}.py, the same code
tests/router/reliability asserts on):

  bad_input   every kind of bad record next to good ones, an incompatible change
              under freeze / dlq policies, registry over TLS with basic auth
  faults      SIGKILL during commits several times in a row, then registry,
              PostgreSQL catalog and broker outages under a live job
  concurrent  two jobs and a pyiceberg appender writing one table
  checkpoints the checkpoint deleted after more data arrived, replaced by an older
              copy, a fresh checkpoint while one fan-out table is behind (rolled back
              to an older snapshot), a route added mid-life (one row per step)

Every scenario starts its own broker / registry / catalog, so nothing else is
disturbed. Columns: records sent (acknowledged by the broker), records
committed (rows found by DuckDB in the tables they were routed to), records in
the DLQ, lost (expected but missing) and duplicated (found more than once).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from scripts.reliability import checkpoints, concurrency, outages, scenarios
from scripts.reliability.helpers import self_signed_certificate, summary_table

SCENARIOS = ("bad_input", "faults", "concurrent", "checkpoints")


def run_bad_input(workdir: Path) -> scenarios.Outcome:
    from router.devstack.broker import LocalBroker
    from router.devstack.catalog import sqlite_catalog_properties
    from router.devstack.registry_server import RegistryServer

    cert, key = self_signed_certificate(workdir)
    password = f"Pw-{uuid.uuid4().hex}"
    with LocalBroker(str(workdir / "broker"), tied_to_parent=True) as broker, \
            RegistryServer(data_file=str(workdir / "registry.json"), tls_cert=cert, tls_key=key,
                           basic_auth=f"icerouter:{password}") as registry:
        section = {"url": registry.url, "basic_auth_user": "icerouter",
                   "basic_auth_password": "${FAULTS_REGISTRY_PASSWORD}", "ssl_ca_location": cert}
        services = scenarios.Services(broker.bootstrap, section, sqlite_catalog_properties(str(workdir / "catalog")),
                                      {"FAULTS_REGISTRY_PASSWORD": password})
        outcome = scenarios.bad_input(services, workdir)
    outcome.facts["password_in_output"] = password in outcome.log
    return outcome


def run_faults(workdir: Path) -> scenarios.Outcome:
    return outages.run_on_own_services(workdir)


def run_concurrent(workdir: Path) -> scenarios.Outcome:
    from router.devstack.broker import LocalBroker
    from router.devstack.catalog import LocalPostgres
    from router.devstack.registry_server import RegistryServer

    with LocalBroker(str(workdir / "broker"), tied_to_parent=True) as broker, \
            RegistryServer(data_file=str(workdir / "registry.json")) as registry, \
            LocalPostgres(tied_to_parent=True) as postgres:
        props = {"type": "sql", "uri": postgres.uri, "warehouse": (workdir / "warehouse").as_uri()}
        return concurrency.concurrent_writers(scenarios.Services(broker.bootstrap, {"url": registry.url}, props),
                                            workdir)


def run_checkpoints(workdir: Path) -> scenarios.Outcome:
    from router.devstack.broker import LocalBroker
    from router.devstack.catalog import sqlite_catalog_properties
    from router.devstack.registry_server import RegistryServer

    with LocalBroker(str(workdir / "broker"), tied_to_parent=True) as broker, \
            RegistryServer(data_file=str(workdir / "registry.json")) as registry:
        services = scenarios.Services(broker.bootstrap, {"url": registry.url},
                                      sqlite_catalog_properties(str(workdir / "catalog")))
        return checkpoints.checkpoint_loss(services, workdir)


RUNNERS = {"bad_input": run_bad_input, "faults": run_faults, "concurrent": run_concurrent,
           "checkpoints": run_checkpoints}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(SCENARIOS), help="comma-separated scenario names")
    parser.add_argument("--workdir", default=None, help="keep files here (default: a temp dir, removed)")
    args = parser.parse_args(argv)
    names = [n.strip() for n in args.only.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SCENARIOS))
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r} (choose from {', '.join(SCENARIOS)})")
    root = Path(args.workdir or tempfile.mkdtemp(prefix="icerouter-faults-"))
    rows, notes, failed = [], [], False
    try:
        for name in names:
            workdir = root / name
            workdir.mkdir(parents=True, exist_ok=True)
            started = time.monotonic()
            try:
                outcome = RUNNERS[name](workdir)
            except Exception as exc:  # a scenario that cannot finish is a finding, not a crash of the script
                failed = True
                notes.append(f"{name}: FAILED to finish: {str(exc).splitlines()[0][:300]}")
                print(f"[{name}] failed after {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
                continue
            steps = outcome.facts.get("tallies") or {name: outcome.tally}
            for tally in steps.values():
                rows.append(tally.row())
                failed |= bool(tally.lost or tally.duplicated or tally.misplaced)
            facts = {k: v for k, v in outcome.facts.items() if isinstance(v, (bool, int, float)) and k != "big_bytes"}
            notes.append(f"{name}: {time.monotonic() - started:.0f}s; runs {_codes(outcome.runs)}; "
                         + ", ".join(f"{k}={round(v, 1) if isinstance(v, float) else v}" for k, v in facts.items()))
            print(f"[{name}] done in {time.monotonic() - started:.0f}s", file=sys.stderr, flush=True)
    finally:
        if not args.workdir:
            shutil.rmtree(root, ignore_errors=True)
    print(summary_table(rows))
    print()
    for note in notes:
        print(note)
    return 1 if failed else 0


def _codes(runs) -> list:
    return [getattr(r, "returncode", r) for r in runs]
