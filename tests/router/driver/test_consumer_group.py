"""The job's offsets in a Kafka consumer group (router/driver/consumer_group.py), against the real
broker: what Kafka's tools read back (confluent-kafka's `list_consumer_group_offsets`, what
kafka-consumer-groups shows) after commits, backfills and a broker that does not answer.

The local broker (noida-db 0.2.3) accepts offset commits for a group without members, through
the AdminClient's alter_consumer_group_offsets as through a consumer's commit, and lists them back.
"""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka.admin import AdminClient, NewTopic

from router.catalog.commit import commit_table
from router.catalog.dead_letter_table import ensure_dead_letter_table
from router.config.load import parse_config
from router.descriptors import TableResult
from router.driver.consumer_group import GroupCommitter


def group_offsets(bootstrap: str, group: str) -> dict[str, int]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
    result = next(iter(futures.values())).result(15)
    return {f"{tp.topic}/{tp.partition}": tp.offset for tp in result.topic_partitions}


def make_config(tmp_path, prefix: str, bootstrap: str, **job):
    return parse_config({
        "kafka": {"bootstrap_servers": bootstrap, "topics": [f"{prefix}.a"]},
        "registry": {"url": "http://127.0.0.1:9"},
        "catalog": {"name": prefix, "properties": {"type": "sql", "uri": f"sqlite:///{tmp_path / 'c.db'}",
                                                   "warehouse": (tmp_path / "wh").as_uri()}},
        "job": {"name": f"job_{prefix}", **job},
        "dlq": {"table": f"{prefix}_ops.dead_letters"},
    })


def test_commits_reach_the_group_and_only_move_forward(tmp_path, kafka_bootstrap, unique_name):
    prefix = unique_name("g")
    topic = f"{prefix}.a"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        future.result(15)
    config = make_config(tmp_path, prefix, kafka_bootstrap)
    assert config.job.group_id == config.job.name and config.job.commit_consumer_group
    # the settled offsets a previous run left in the dead-letter table: the first commit starts there
    ensure_dead_letter_table(config.catalog, config.dlq.table)
    result = TableResult(config.dlq.table, settled={f"{topic}/0": [0, 49], f"{topic}/1": [0, 9]})
    assert commit_table(config.catalog, result, config.job.name, 0).status == "committed"

    outcomes = []
    group = GroupCommitter(config, on_outcome=outcomes.append)
    group.advance({f"{topic}/1": [10, 19]})
    assert group.submit().result(30) is True
    assert group_offsets(kafka_bootstrap, config.job.group_id) == {f"{topic}/0": 50, f"{topic}/1": 20}
    group.advance({f"{topic}/0": [3, 7], f"{topic}/1": [20, 24]})  # a backfill of p0 below the group's offset
    assert group.commit() is True
    assert group_offsets(kafka_bootstrap, config.job.group_id) == {f"{topic}/0": 50, f"{topic}/1": 25}
    group.advance({f"{topic}/0": [50, 59]})
    group.close()  # the end of a run commits what is left
    assert group_offsets(kafka_bootstrap, config.job.group_id) == {f"{topic}/0": 60, f"{topic}/1": 25}
    assert outcomes == [True, True, True] and group.failures == 0


def test_a_broker_that_does_not_answer_is_counted_not_raised(tmp_path, unique_name):
    config = make_config(tmp_path, unique_name("g"), "127.0.0.1:9", consumer_group="ops-lag")
    config = config.__class__(**{**config.__dict__, "dlq": config.dlq.__class__(table=None)})
    assert config.job.group_id == "ops-lag"
    outcomes = []
    group = GroupCommitter(config, on_outcome=outcomes.append, timeout=2.0)
    group.advance({"t/0": [0, 9]})
    assert group.commit() is False
    assert group.failures == 1 and outcomes == [False]
    group.close(wait=0)  # tries once more at the end, still counted, still no exception
    assert group.failures == 2


@pytest.mark.parametrize("value, message", [
    ("", "job.consumer_group: '' is not a usable group id"),
    ("x" * 250, "is not a usable group id (1-249 printable characters)"),
])
def test_group_id_is_checked_at_load(tmp_path, value, message):
    from router.exceptions import ConfigError

    with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make_config(tmp_path, "g", "127.0.0.1:9", consumer_group=value)
    assert make_config(tmp_path, "g", "x:1", commit_consumer_group=False).job.commit_consumer_group is False
