"""A table with a commit cadence beside one committing every batch, through SIGKILLs and a lost checkpoint.

Real broker, registry, a SQLite catalog, the real `icerouter run` process, DuckDB reading every
table back per (topic, partition, offset); the scenario is scripts/reliability/cadence.py.
"""

from __future__ import annotations

import signal

import pytest

from router.source.cadence import first_share
from scripts.reliability import cadence
from scripts.reliability.scenarios import Services

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome(tmp_path_factory, kafka_bootstrap, registry_url):
    from router.devstack.catalog import sqlite_catalog_properties

    workdir = tmp_path_factory.mktemp("cadence")
    props = sqlite_catalog_properties(str(workdir / "catalog"))
    return cadence.commit_cadence(Services(kafka_bootstrap, {"url": registry_url}, props), workdir)


def test_the_job_was_killed_twice_and_its_last_run_succeeded(outcome):
    assert outcome.runs == [-signal.SIGKILL, -signal.SIGKILL, 0], outcome.log[-4000:]


@pytest.mark.parametrize("step", cadence.STEPS)
def test_nothing_lost_nothing_duplicated(outcome, step):
    tally = outcome.facts["tallies"][step]
    assert (tally.lost, tally.duplicated, tally.misplaced, tally.dead_letters) == (0, 0, 0, 0), (step, tally.details)


def test_the_cold_table_held_its_records_while_the_hot_table_committed(outcome):
    hot, cold = outcome.facts["tables"]
    assert outcome.facts["held_seconds"] < cadence.COLD_SECONDS - 2, "too slow to observe the wait"
    assert outcome.facts["cold_rows_while_held"] == cadence.WAVE  # the first wave only
    assert outcome.facts["status_waiting"]["records"] == cadence.WAVE
    assert outcome.facts["status_waiting"]["due"] is False
    assert outcome.facts["cli_waiting"]["records"] == cadence.WAVE, outcome.facts["cli_waiting"]
    assert 0 <= outcome.facts["cli_waiting"]["oldest_seconds"] < cadence.COLD_SECONDS


def test_the_cold_table_committed_at_its_cadence_not_a_trigger_late(outcome):
    # its bound counts from the plan before the records arrived; due one trigger (1 s) early; the first
    # wait after the restart is the cold table's share of its cadence (at least MIN_FIRST_SHARE)
    _, cold = outcome.facts["tables"]
    least = cadence.COLD_SECONDS * first_share(cold) - 2
    assert least <= outcome.facts["cold_seconds"] <= cadence.COLD_SECONDS + 10, outcome.facts
