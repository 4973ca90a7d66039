"""The driver waits out a catalog outage with doubling delays (Dispatcher.commit_with_outage_retry)."""
from __future__ import annotations

from types import SimpleNamespace

from router.config import parse_config
from router.descriptors import TableResult
from router.driver import dispatcher as dispatcher_module
from router.driver.dispatcher import Dispatcher


def test_an_unreachable_catalog_is_retried_after_2_4_8_16_30_seconds(tmp_path, monkeypatch):
    # nothing listens on port 1: every commit fails with a connection error (transient)
    config = parse_config({
        "kafka": {"bootstrap_servers": "127.0.0.1:1", "pattern": ".*"}, "registry": {"url": "http://127.0.0.1:1"},
        "catalog": {"name": "gone", "properties": {"type": "sql", "uri": "postgresql+psycopg2://ice:ice@127.0.0.1:1/cat",
                                                    "warehouse": (tmp_path / "wh").as_uri()}},
        "routes": [{"name": "all", "topic": ".*", "table": "db.{topic}"}],
        "job": {"commit_retries": 1}})  # each commit_all: one quick retry (<= 0.1 s)
    dispatcher = Dispatcher(config, transient_retry_seconds=100.0)
    clock = SimpleNamespace(now=0.0, waits=[])

    def sleep(seconds: float) -> None:
        clock.waits.append(seconds)
        clock.now += seconds

    monkeypatch.setattr(dispatcher_module, "time", SimpleNamespace(monotonic=lambda: clock.now, sleep=sleep))
    result = TableResult("db.orders", settled={"orders/0": [0, 9]})
    report = dispatcher.commit_with_outage_retry({"db.orders": result}, batch_id=3)
    assert [o.status for o in report.outcomes] == ["failed"] and report.failed[0].transient
    assert clock.waits == [2, 4, 8, 16, 30, 30, 30]  # the last wait starts at 90 s, before the 100 s deadline
