"""Driver-side planning of the stream reader against a real broker (no Spark needed)."""

from __future__ import annotations

import pickle

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from router.source.datasource import KafkaDataSource, KafkaInputPartition, KafkaStreamReader
from router.source.exceptions import SourceOptionsError
from router.source.options import OPTIONS_KEY, KafkaSourceOptions
from router.source.schema import kafka_struct_type

from .kafka_helpers import create_topics, produce

pytestmark = pytest.mark.slow


def _reader(kafka_bootstrap, config, **kw) -> KafkaStreamReader:
    return KafkaStreamReader(KafkaSourceOptions(kafka_bootstrap, client_config=config, **kw).to_json())


def test_starting_offsets_earliest_latest_and_explicit(kafka_bootstrap, kafka_client_config, uid):
    topics = [f"rd-{uid}-a", f"rd-{uid}-b"]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    produce(kafka_bootstrap, kafka_client_config, topics, 2, 6)
    a, b = topics
    earliest = _reader(kafka_bootstrap, kafka_client_config, pattern=f"rd-{uid}-.*").initialOffset()
    assert earliest == {f"{a}/0": 0, f"{a}/1": 0, f"{b}/0": 0, f"{b}/1": 0}
    assert list(earliest) == sorted(earliest)
    latest = _reader(kafka_bootstrap, kafka_client_config, topics=tuple(topics), starting_offsets="latest")
    assert set(latest.initialOffset().values()) == {6}
    explicit = _reader(
        kafka_bootstrap, kafka_client_config, topics=(a,), starting_offsets={a: {0: 4, 1: -1}}
    ).initialOffset()
    assert explicit == {f"{a}/0": 4, f"{a}/1": 6}


def test_available_now_target_is_frozen_and_limits_apply(kafka_bootstrap, kafka_client_config, uid):
    topic = f"rd-{uid}-frozen"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 3)
    produce(kafka_bootstrap, kafka_client_config, [topic], 3, 10)
    reader = _reader(kafka_bootstrap, kafka_client_config, topics=(topic,), max_records_per_trigger=12,
                     catch_up="even")
    assert reader.getDefaultReadLimit() == ReadMaxRows(12)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    produce(kafka_bootstrap, kafka_client_config, [topic], 3, 5, first_seq=10)  # after the target

    first = reader.latestOffset(start, ReadMaxRows(12))
    assert first == {f"{topic}/0": 4, f"{topic}/1": 4, f"{topic}/2": 4}
    everything = reader.latestOffset(first, ReadAllAvailable())
    assert set(everything.values()) == {10}  # the frozen target, not the 15 now on the broker
    assert reader.latestOffset(everything, ReadAllAvailable()) == everything  # done: same offset back

    live = _reader(kafka_bootstrap, kafka_client_config, topics=(topic,))
    assert set(live.latestOffset(everything, ReadAllAvailable()).values()) == {15}


def test_catch_up_in_turns_reads_whole_partitions_from_the_deepest_on(kafka_bootstrap, kafka_client_config, uid):
    topics = [f"rd-{uid}-turn{i}" for i in range(3)]
    create_topics(kafka_bootstrap, kafka_client_config, topics, 2)
    for i, topic in enumerate(topics):
        produce(kafka_bootstrap, kafka_client_config, [topic], 2, 10 + 5 * (i == 1))
    reader = _reader(kafka_bootstrap, kafka_client_config, topics=tuple(topics), max_records_per_trigger=60)
    assert reader.options.catch_up == "turns"  # the default
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    a, b, c = topics
    # 70 records: the deepest backlog (b) first, then on in key order while whole backlogs fit
    first = reader.latestOffset(start, ReadMaxRows(60))
    assert first == {f"{b}/0": 15, f"{b}/1": 15, f"{c}/0": 10, f"{c}/1": 10, f"{a}/0": 10, f"{a}/1": 0}
    second = reader.latestOffset(first, ReadMaxRows(60))
    assert second == {**first, f"{a}/1": 10}
    assert reader.latestOffset(second, ReadMaxRows(60)) == second


def test_partitions_pack_ranges_and_pickle_small(kafka_bootstrap, kafka_client_config, uid):
    topics = [f"rd-{uid}-p{i}" for i in range(10)]
    reader = _reader(kafka_bootstrap, kafka_client_config, topics=tuple(topics), target_tasks=3)
    end = {f"{t}/{p}": 7 for t in topics for p in range(3)}
    parts = reader.partitions({}, end)
    assert len(parts) == 3 and all(isinstance(p, KafkaInputPartition) for p in parts)
    assert sorted(r for p in parts for r in p.ranges) == sorted((t, p, 0, 7) for t in topics for p in range(3))
    assert reader.partitions(end, end) == []
    assert len(pickle.dumps(reader)) < 2048  # no clients travel with the reader
    assert pickle.loads(pickle.dumps(reader)).options == reader.options


def test_data_source_schema_and_missing_options():
    opts = KafkaSourceOptions("b:9092", topics=("t",), include_headers=False)
    source = KafkaDataSource({OPTIONS_KEY: opts.to_json()})
    assert source.schema() == kafka_struct_type(False)
    assert KafkaDataSource.name() == "icerouter-kafka"
    with pytest.raises(SourceOptionsError):
        KafkaDataSource({}).streamReader(kafka_struct_type())
