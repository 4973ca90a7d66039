"""A lost, old or fresh checkpoint and a route added mid-life: nothing lost, nothing written twice.

Real broker, registry, a SQLite catalog, the real `icerouter run`
process, DuckDB reading every table back per (topic, partition, offset).
"""

from __future__ import annotations

import pytest

from scripts.reliability import checkpoints
from scripts.reliability.scenarios import Services

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome(tmp_path_factory, kafka_bootstrap, registry_url):
    """On a SQLite catalog: what is tested here is the checkpoint against the tables' offsets, which
    the catalog only stores; the faults scenario (test_faults.py) runs on PostgreSQL, and so does
    the merging job scenario (tests/router/driver/test_job_merge_e2e.py)."""
    from router.devstack.catalog import sqlite_catalog_properties

    workdir = tmp_path_factory.mktemp("checkpoints")
    props = sqlite_catalog_properties(str(workdir / "catalog"))
    return checkpoints.checkpoint_loss(Services(kafka_bootstrap, {"url": registry_url}, props), workdir)


def test_every_run_succeeds(outcome):
    assert [r.returncode for r in outcome.runs] == [0] * len(checkpoints.STEPS), outcome.log[-4000:]


@pytest.mark.parametrize("step", checkpoints.STEPS)
def test_nothing_lost_nothing_duplicated(outcome, step):
    tally = outcome.facts["tallies"][step]
    assert (tally.lost, tally.duplicated, tally.misplaced) == (0, 0, 0), (step, tally.details)
    assert tally.dead_letters == checkpoints.BAD * 2 * (checkpoints.STEPS.index(step) + 1)


@pytest.mark.parametrize("step", checkpoints.STEPS)
def test_counts_say_what_the_run_wrote(outcome, step):
    written = outcome.facts["written"][step]
    assert (written["rows"], written["dead_letters"]) == \
        (written["expected_rows"], written["expected_dead_letters"]), written


def test_restored_tables_were_really_behind(outcome):
    assert outcome.facts["rolled_back"] > 0 and outcome.facts["rolled_back_kept"] > 0


def test_restored_table_held_none_of_one_partition(outcome):
    """The first run wrote one partition only; later runs both: the rollback left one partition
    the table never had, which its stored offsets must still send back to it."""
    first, *later = outcome.facts["fan_partitions"]
    assert len(first) == 1 and set().union(*later) - first


def test_start_positions_are_logged_with_their_reason(outcome):
    assert "start: topic" in outcome.log
    assert "new table" in outcome.log  # the route added last backfilled its table
    assert "rolled back since the job's last commit" in outcome.log  # the restart on its checkpoint
