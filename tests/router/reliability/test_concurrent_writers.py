"""Concurrent writers on one table: two jobs (different job names) and a plain pyiceberg appender.

Both `icerouter run --available-now` processes fan three topics each into the
same table of the PostgreSQL catalog, in several small batches, while a third
process appends rows with pyiceberg. Conflicting commits must be retried, never
lost or doubled, and each job keeps its own offsets property on the table.
"""

from __future__ import annotations

import json

import pytest

from scripts.reliability import concurrency, scenarios
from scripts.reliability.helpers import load_catalog_from

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def outcome(kafka_bootstrap, registry_url, postgres_uri, tmp_path_factory):
    workdir = tmp_path_factory.mktemp("concurrent")
    props = {"type": "sql", "uri": postgres_uri, "warehouse": (workdir / "warehouse").as_uri()}
    services = scenarios.Services(kafka_bootstrap, {"url": registry_url}, props)
    return concurrency.concurrent_writers(services, workdir)


def test_both_jobs_finish(outcome):
    assert outcome.runs == [0, 0], outcome.log[-4000:]


def test_all_rows_land_once(outcome):
    shared = outcome.facts["shared"]
    want, got = outcome.ledger.expected[shared], outcome.tally.observed[shared]
    assert got == want, f"missing {sum((want - got).values())}, duplicated {sum((got - want).values())}"
    assert len(outcome.facts["appended"]) == concurrency.APPENDED_ROWS
    assert sum(want.values()) == 2 * concurrency.CONCURRENT_TOPICS * concurrency.CONCURRENT_PER_TOPIC \
        + concurrency.APPENDED_ROWS
    assert outcome.tally.dead_letters == 0


def test_writers_interleaved_and_each_job_tracks_its_own_offsets(outcome):
    table = load_catalog_from(outcome.catalog_props).load_table(outcome.facts["shared"])
    jobs = [s.summary.additional_properties.get("icerouter.job") for s in table.snapshots()]
    # several batches per job (max_records_per_batch) plus the appender's own snapshots
    for job in outcome.facts["jobs"]:
        assert jobs.count(job) >= 2, jobs
    assert jobs.count(None) >= concurrency.APPENDED_ROWS
    for side, job in zip(("a", "b"), outcome.facts["jobs"]):
        progress = json.loads(table.properties[f"icerouter.offsets.{job}"])
        expected = {}
        for topic, partition, offset in outcome.ledger.expected[outcome.facts["shared"]]:
            if topic in outcome.facts["topics"][side]:
                key = f"{topic}/{partition}"
                expected[key] = max(expected.get(key, 0), offset + 1)
        assert progress["offsets"] == expected
