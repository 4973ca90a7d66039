"""JobMetrics' exposition: what batches update is rendered once per batch, what time moves per scrape.

The live job's values are checked against the tables in test_metrics_e2e.py; these tests pin the
text the endpoint serves (parsed back with prometheus_client's own parser) and when it is rendered.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

import router.driver.metrics as metrics_module
from router.driver.metrics import JobMetrics


def _outcome(table: str, rows: int = 10, **kw):
    base = dict(status="committed", table=table, attempts=1, where="task", seconds=0.02, rows=rows, files=1,
                delete_files=0, deleted_rows=0, bytes=1000, expired_files=0, committed_at=None,
                oldest_record=time.time() - 1.5)
    return SimpleNamespace(**{**base, **kw})


def _stats(records: int = 10):
    return SimpleNamespace(records=records, dispatch_seconds=0.5, commit_seconds=0.1, task_seconds={"write": 0.2})


def _samples(body: bytes) -> dict:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(body.decode()) for s in family.samples}


def test_exposition_parses_and_follows_batches(monkeypatch):
    lag_reads = []

    def lag():
        lag_reads.append(1)
        return {'odd"topic\\x/0': 7, "orders/2": 3}

    metrics = JobMetrics("j", lag=lag)
    metrics.observe_batch(_stats(), [_outcome("ns.a"), _outcome("ns.b", rows=5, attempts=3)], {"DecodeError": 2})
    first = _samples(metrics.exposition())
    assert first[("icerouter_rows_committed_total", (("table", "ns.a"),))] == 10
    assert first[("icerouter_commit_retries_total", (("table", "ns.b"),))] == 2
    assert first[("icerouter_dead_letters_total", (("reason", "DecodeError"),))] == 2
    assert first[("icerouter_partition_lag_records", (("partition", "0"), ("topic", 'odd"topic\\x')))] == 7
    assert 0 <= first[("icerouter_table_seconds_since_last_commit", (("table", "ns.a"),))] < 60
    assert not any(name.endswith("_created") for name, _ in first), "no _created series"

    # scrapes between batches: the batch's families are not rendered again, the lag is not read again
    # within LAG_REFRESH_SECONDS
    rendered = metrics._rendered
    time.sleep(0.05)
    second = _samples(metrics.exposition())
    assert metrics._rendered is rendered and len(lag_reads) == 1
    key = ("icerouter_table_seconds_since_last_commit", (("table", "ns.a"),))
    assert second[key] > first[key]  # time still moves

    metrics.observe_batch(_stats(), [_outcome("ns.a", rows=4, expired_files=7)], {})
    third = _samples(metrics.exposition())
    assert third[("icerouter_rows_committed_total", (("table", "ns.a"),))] == 14
    assert third[("icerouter_expired_files_deleted_total", (("table", "ns.a"),))] == 7
    assert third[("icerouter_batches_total", ())] == 2 and len(lag_reads) == 1
    monkeypatch.setattr(metrics_module, "LAG_REFRESH_SECONDS", 0.0)
    metrics.exposition()
    assert len(lag_reads) == 2


def test_endpoint_serves_the_exposition():
    metrics = JobMetrics("j")
    metrics.observe_batch(_stats(), [_outcome("ns.a")], {})
    port = metrics.serve(0, "127.0.0.1")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain")
        body = response.read()
    assert _samples(body).keys() == _samples(metrics.exposition()).keys()  # values of time moved on
    assert _samples(body)[("icerouter_job_info", (("job", "j"),))] == 1
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/other", timeout=10)
        raise AssertionError("an unknown path must be 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404


def test_replay_counts_follow_the_dead_letter_table():
    metrics = JobMetrics("j")
    metrics.observe_replays({"runs": 2, "landed": 5, "superseded": 1, "still_failing": 3})
    samples = _samples(metrics.exposition())
    assert {dict(k[1])["outcome"]: v for k, v in samples.items() if k[0] == "icerouter_dead_letter_replays"} == {
        "runs": 2, "landed": 5, "superseded": 1, "still_failing": 3}
    metrics.observe_group_commit(True)
    metrics.observe_group_commit(False)
    samples = _samples(metrics.exposition())  # a group commit renders again, outside a batch
    assert samples[("icerouter_consumer_group_commits_total", (("outcome", "committed"),))] == 1
    assert samples[("icerouter_consumer_group_commits_total", (("outcome", "failed"),))] == 1


def test_partition_lag_counts_an_open_backfill_and_nothing_past_markers():
    """The lag in the query's progress: latest minus the batch's end, or minus an open rewind cursor
    below it (what the backfill has still to read, as `icerouter status` counts it); the end is the
    source's, past a trailing transaction marker, so a caught-up partition lags 0."""
    from router.driver.status import progress_lag

    latest = {"t/0": 11, "t/1": 30, "#rewind:t/1": 30}
    assert progress_lag(latest, {"t/0": 11, "t/1": 30, "#rewind:t/1": 12}) == {"t/0": 0, "t/1": 18}
    assert progress_lag(latest, {"t/0": 9, "t/1": 30}) == {"t/0": 2, "t/1": 0}


def test_waiting_tables_are_read_at_every_scrape(tmp_path):
    """What the source's planner last wrote for tables with a commit cadence (router/source/cadence.py)."""
    import json

    from router.source.cadence import read_waiting

    path = tmp_path / "waiting.json"
    metrics = JobMetrics("j", waiting=lambda: read_waiting(str(path)))
    assert "icerouter_table_pending_records{" not in metrics.exposition().decode()  # no file yet: no series
    path.write_text(json.dumps({"at": 0, "tables": {
        "ns.cold": {"records": 40, "since": time.time() - 30, "due": False},
        "ns.new": {"records": 3, "since": None, "due": True}}}))
    samples = _samples(metrics.exposition())
    assert samples[("icerouter_table_pending_records", (("table", "ns.cold"),))] == 40
    assert samples[("icerouter_table_pending_records", (("table", "ns.new"),))] == 3
    assert 30 <= samples[("icerouter_table_oldest_pending_seconds", (("table", "ns.cold"),))] < 90
    assert ("icerouter_table_oldest_pending_seconds", (("table", "ns.new"),)) not in samples  # age unknown
    path.write_text(json.dumps({"at": 1, "tables": {}}))  # committed: nothing waits
    assert "icerouter_table_pending_records{" not in metrics.exposition().decode()
