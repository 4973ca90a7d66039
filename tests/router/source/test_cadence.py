"""Per-table commit cadence in the source's planner: which partitions wait, and when they are read."""

from __future__ import annotations

import json

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from router.config import parse_config
from router.routing.routes import commit_cadence
from router.source.cadence import Cadence, first_share, read_waiting
from router.source.datasource import KafkaStreamReader
from router.source.options import KafkaSourceOptions

from .kafka_helpers import create_topics, produce

T0 = 1_000_000.0


def cadence(*routes, trigger=2.0) -> Cadence:
    made = Cadence.from_json({"routes": [list(r) for r in routes], "trigger_seconds": trigger})
    assert made is not None
    return made


def steady(c: Cadence, *tables: str) -> Cadence:
    """`c` with `tables` past their first, shortened wait after a start: whole cadences from here."""
    c.spread.update(tables)
    return c


def test_no_cadence_when_every_route_commits_every_batch():
    assert Cadence.from_json(None) is None
    assert Cadence.from_json({"routes": [["a", "raw.a", None, None]], "trigger_seconds": 2}) is None


def test_a_topic_waits_only_when_every_route_that_takes_it_waits():
    c = cadence(["cold.*", "raw.{topic}", 60, None], ["hot", "raw.hot", None, None], ["shared", "raw.x", 60, None],
                [None, "raw.all_{topic}", 30, None], ["by-tenant", "route:tenants", 10, None])
    assert c.units("hot") is None  # its route commits every batch
    assert [t for t, _ in c.units("cold.Orders-1")] == ["raw.cold_orders_1", "raw.all_cold_orders_1"]
    assert [t for t, _ in c.units("shared")] == ["raw.x", "raw.all_shared"]
    assert [t for t, _ in c.units("by-tenant")] == ["raw.all_by_tenant", "route:tenants"]  # routes' order
    only_cold = cadence(["cold", "raw.cold", 60, None])
    assert only_cold.units("other") is None  # no route takes it: read every batch (its records are dead letters)


def test_a_table_waits_until_its_oldest_record_is_due_one_trigger_early_never_late():
    c = cadence(["cold", "raw.cold", 60, None], trigger=2.0)
    positions = {"cold/0": 10}
    # after a start the age is unknown: what waits is read at once
    waiting = c.waiting(positions, {"cold/0": 15})
    assert waiting["raw.cold"][0].records == 5 and waiting["raw.cold"][0].since is None
    assert c.held(waiting, T0) == set()
    c.planned({"cold/0": 15}, {"cold/0": 15}, T0 - 100)  # read to its end at the start
    # the first wait after a start is a share of the cadence (spreading tables read together at a start)
    first = 60 * first_share("raw.cold")
    waiting = c.waiting({"cold/0": 15}, {"cold/0": 15 + 2})
    assert c.held(waiting, T0 - 100 + first - 2.1) == {"cold/0"}
    assert c.held(waiting, T0 - 100 + first - 2 + 1e-6) == set()
    c.planned({"cold/0": 17}, {"cold/0": 17}, T0)  # read to its end at T0: from now on the whole cadence
    waiting = c.waiting({"cold/0": 17}, {"cold/0": 19})  # two records arrived since
    assert waiting["raw.cold"][0].since == T0
    assert c.held(waiting, T0 + 10) == {"cold/0"}
    assert c.held(waiting, T0 + 57.9) == {"cold/0"}
    assert c.held(waiting, T0 + 58) == set()  # 58 s + a 2 s trigger: due now, not a trigger late
    # held, its bound stays where it was: planning it again does not make its records younger
    c.planned({"cold/0": 17}, {"cold/0": 19}, T0 + 30)
    assert c.waiting({"cold/0": 17}, {"cold/0": 20})["raw.cold"][0].since == T0
    # nothing new: nothing waits, and the bound moves on
    c.planned({"cold/0": 20}, {"cold/0": 20}, T0 + 70)
    assert c.waiting({"cold/0": 20}, {"cold/0": 20}) == {}
    assert c.waiting({"cold/0": 20}, {"cold/0": 21})["raw.cold"][0].since == T0 + 70


def test_tables_read_together_at_a_start_commit_spread_over_their_cadence_and_never_late():
    """After a start every waiting table is read in the same batch; left alone they would all commit in
    one batch every cadence from then on. The first wait is shortened by a share from the table's name."""
    tables = [f"t{i}" for i in range(40)]
    c = cadence(["t.*", "raw.{topic}", 60, None], trigger=2.0)
    positions = {f"{t}/0": 0 for t in tables}
    reads: dict[str, list[float]] = {t: [] for t in tables}
    arrived: dict[str, float] = {}  # the oldest unread record's arrival, per table
    for step in range(120):  # 4 minutes of batches every 2 s, a record a batch on every topic
        now = T0 + 2 * step
        latest = {k: v + 1 for k, v in positions.items()}
        for t in tables:
            arrived.setdefault(t, now - 1)
        waiting = c.waiting(positions, latest)
        held = c.held(waiting, now)
        for key in list(positions):
            if key not in held:
                table = key.partition("/")[0]
                assert now - arrived.pop(table) <= 60, "a table committed later than its cadence"
                reads[table].append(now)
                positions[key] = latest[key]
        c.planned(positions, latest, now)
    assert all(reads[t][0] == T0 for t in tables)  # the start reads everything at once
    second = sorted(reads[t][1] - T0 for t in tables)
    assert len(set(second)) > 20 and second[0] < 15 and second[-1] > 45  # spread over the cadence
    for t in tables:  # then each keeps its place: one read every cadence, a trigger early
        gaps = {b - a for a, b in zip(reads[t][1:], reads[t][2:])}
        assert gaps == {58.0} or gaps == {60.0}, (t, reads[t])


def test_records_make_a_table_due_before_its_age_does():
    c = steady(cadence(["cold", "raw.cold", 600, 100]), "raw.cold")
    c.planned({"cold/0": 0, "cold/1": 0}, {"cold/0": 0, "cold/1": 0}, T0)
    assert c.held(c.waiting({"cold/0": 0, "cold/1": 0}, {"cold/0": 60, "cold/1": 39}), T0 + 1) == {"cold/0", "cold/1"}
    assert c.held(c.waiting({"cold/0": 0, "cold/1": 0}, {"cold/0": 60, "cold/1": 40}), T0 + 1) == set()


def test_fan_in_reads_every_partition_of_a_due_table_and_takes_the_tightest_route():
    c = steady(cadence(["a", "raw.both", 60, None], ["b", "raw.both", 20, None]), "raw.both")
    c.planned({"a/0": 0, "b/0": 0}, {"a/0": 0, "b/0": 0}, T0)
    c.planned({"a/0": 0, "b/0": 5}, {"a/0": 3, "b/0": 5}, T0 + 10)  # b read up at T0 + 10, a held
    waiting = c.waiting({"a/0": 0, "b/0": 5}, {"a/0": 3, "b/0": 7})
    table, keys = waiting["raw.both"]
    assert (table.records, table.since, table.seconds, sorted(keys)) == (5, T0, 20, ["a/0", "b/0"])
    assert c.held(waiting, T0 + 17) == {"a/0", "b/0"}
    assert c.held(waiting, T0 + 18) == set()  # a's oldest makes the table due: both partitions are read


def test_a_partition_shared_with_a_due_table_is_read_and_rewinds_never_wait():
    c = steady(cadence(["t", "raw.slow", 600, None], ["t", "raw.fast", 5, None]), "raw.slow", "raw.fast")
    c.planned({"t/0": 0, "t/1": 0}, {"t/0": 0, "t/1": 0}, T0)
    waiting = c.waiting({"t/0": 0, "t/1": 0}, {"t/0": 4, "t/1": 4})
    assert c.held(waiting, T0 + 1) == {"t/0", "t/1"}
    assert c.held(waiting, T0 + 3) == set()  # raw.fast is due: raw.slow takes the records with it
    assert c.waiting({"t/0": 0, "t/1": 0}, {"t/0": 4, "t/1": 4}, rewinding={"t/1"})["raw.slow"][1] == ["t/0"]


def test_commit_cadence_of_a_config_follows_route_then_tables_default():
    config = parse_config({
        "kafka": {"bootstrap_servers": "b:9092", "topics": ["a", "b", "c"]}, "catalog": {},
        "registry": {"url": "http://r"},
        "tables": {"commit_after": {"seconds": 60, "records": 1000}, "default_namespace": "lake"},
        "routes": [{"name": "a", "topic": "a", "table": "{topic}"},
                   {"name": "b", "topic": "b", "table": "raw.b", "commit_after": 5},
                   {"name": "c", "topic": "c", "table": "{header.tenant}.c"}]})
    assert commit_cadence(config) == [["a", "lake.{topic}", 60, 1000], ["b", "raw.b", 5, None],
                                      ["c", "route:c", 60, 1000]]


@pytest.mark.slow
def test_the_planner_holds_a_waiting_partition_at_its_position(kafka_bootstrap, kafka_client_config, uid, tmp_path):
    hot, cold = f"cad-{uid}-hot", f"cad-{uid}-cold"
    create_topics(kafka_bootstrap, kafka_client_config, [hot, cold], 1)
    waiting_file = str(tmp_path / "waiting.json")
    options = KafkaSourceOptions(kafka_bootstrap, client_config=kafka_client_config, topics=(hot, cold),
                                 cadence={"routes": [[hot, "raw.hot", None, None], [cold, "raw.cold", 3600, 50]],
                                          "trigger_seconds": 1, "waiting_file": waiting_file})
    reader = KafkaStreamReader(options.to_json())
    start = reader.initialOffset()
    produce(kafka_bootstrap, kafka_client_config, [hot, cold], 1, 10)
    first = reader.latestOffset(start, ReadAllAvailable())  # a start: what waits is read at once
    assert first == {f"{cold}/0": 10, f"{hot}/0": 10}
    produce(kafka_bootstrap, kafka_client_config, [hot, cold], 1, 20)
    second = reader.latestOffset(first, ReadAllAvailable())
    assert second == {f"{cold}/0": 10, f"{hot}/0": 30}  # the cold partition waits at its position
    assert read_waiting(waiting_file)["raw.cold"]["records"] == 20
    assert read_waiting(waiting_file)["raw.cold"]["due"] is False
    produce(kafka_bootstrap, kafka_client_config, [cold], 1, 30)  # 50 waiting: its records limit
    third = reader.latestOffset(second, ReadMaxRows(1000))
    assert third == {f"{cold}/0": 60, f"{hot}/0": 30}
    assert json.load(open(waiting_file))["tables"]["raw.cold"]["due"] is True
    # Trigger.AvailableNow reads everything there is
    produce(kafka_bootstrap, kafka_client_config, [cold], 1, 5)
    reader.prepareForTriggerAvailableNow()
    assert reader.latestOffset(third, ReadAllAvailable())[f"{cold}/0"] == 65
