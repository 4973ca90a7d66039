"""Faults: SIGKILL during commits several times in a row, then registry, catalog and broker outages.

The scenario owns its services (a noida-db broker with a fixed data dir and
port, the registry emulator as a subprocess on a fixed port and data file, a
dedicated PostgreSQL catalog) so it can stop and restart each of them under a
live `icerouter run`. After recovery DuckDB must find every record exactly
once in its table, and nothing in the dead-letter table.
"""

from __future__ import annotations

import signal

import pytest

from scripts.reliability import outages

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    from router.devstack.catalog import find_postgres_bindir
    from router.devstack.exceptions import ServiceMissingError

    try:
        find_postgres_bindir()
    except ServiceMissingError as exc:
        pytest.skip(f"no PostgreSQL server binaries: {exc}")
    workdir = tmp_path_factory.mktemp("faults")
    return outages.run_on_own_services(workdir)


def test_sigkill_during_commit_several_times(outcome):
    crashes = outcome.runs[:len(outages.CRASH_POINTS)]
    assert [r.returncode for r in crashes] == [-signal.SIGKILL] * len(outages.CRASH_POINTS), \
        crashes[-1].stderr[-3000:]
    # each crash came right after its N-th table commit (parallel commits may squeeze one more in),
    # and some tables were still left for the live run to replay
    assert sum(outages.CRASH_POINTS) <= outcome.facts["committed_after_crashes"] < outages.FAULT_TOPICS


def test_cached_schemas_flow_while_the_registry_is_down_and_new_ids_wait(outcome):
    assert outcome.facts["cached_flowed_while_down"]
    assert outcome.facts["new_id_retried_while_down"]  # the new id's batch was tried, failed and retried
    assert outcome.facts["registry_outage_seconds"] >= outages.REGISTRY_OUTAGE_SECONDS
    assert outcome.facts["new_id_landed_while_down"] is False


def test_job_survives_catalog_and_broker_restarts(outcome):
    assert outcome.facts["job_alive_during_catalog_outage"]
    assert outcome.facts["batch_retried_during_catalog_outage"]
    assert outcome.facts["catalog_outage_seconds"] >= outages.CATALOG_OUTAGE_SECONDS
    assert outcome.facts["broker_outage_seconds"] >= outages.BROKER_OUTAGE_SECONDS
    assert outcome.runs[-1] in (0, -signal.SIGTERM), outcome.log[-3000:]  # stopped by us, not crashed


def test_outages_never_dead_letter_or_quarantine_good_tables(outcome):
    """A service outage is waited out: no table fails in a task and none is quarantined for a batch."""
    assert "failed in this task" not in outcome.log
    assert "quarantin" not in outcome.log


def test_every_record_exactly_once_after_recovery(outcome):
    tally = outcome.tally
    for table, want in outcome.ledger.expected.items():
        got = tally.observed[table]
        assert got == want, f"{table}: missing {sum((want - got).values())}, duplicated {sum((got - want).values())}"
    assert tally.lost == 0 and tally.duplicated == 0 and tally.misplaced == 0
    # only the unframed record: no record was dead-lettered because a service was briefly down
    assert [(r["error_class"], r["value"]) for r in tally.letters] == [("wire_format", b"not framed")], \
        [(r["error_class"], r["reason"][:200]) for r in tally.letters[:5]]
    assert tally.sent == sum(sum(c.values()) for c in outcome.ledger.expected.values()) + len(outcome.ledger.dropped)
    assert tally.committed == tally.sent - 2  # all but the ignored tombstone and the dead letter
    assert len(outcome.ledger.dropped) == 1  # the tombstone, ignored (tombstones: ignore): in no table
