"""Options round-trip through Spark string options and never print secrets."""

from __future__ import annotations

import pickle

import pyarrow as pa
import pytest

from router.source import jvm_kafka_options
from router.source.datasource import KafkaInputPartition
from router.source.exceptions import BrokerError, OffsetsError, ReadStalledError, SourceError, SourceOptionsError
from router.source.options import KafkaSourceOptions
from router.source.schema import kafka_arrow_schema, kafka_struct_type


def _options(**kw):
    base = dict(
        bootstrap="broker:9092",
        pattern="orders\\..*",
        client_config={"security.protocol": "SASL_SSL", "sasl.mechanisms": "PLAIN",
                       "sasl.username": "svc", "sasl.password": "hunter2"},
        starting_offsets={"orders.eu": {0: 5, 1: -2}},
        max_records_per_trigger=1000,
        target_tasks=4,
    )
    base.update(kw)
    return KafkaSourceOptions(**base)


def test_json_and_pickle_round_trip():
    opts = _options()
    assert KafkaSourceOptions.from_json(opts.to_json()) == opts
    assert pickle.loads(pickle.dumps(opts)) == opts
    topics = _options(pattern=None, topics=("a", "b"), starting_offsets="latest")
    assert KafkaSourceOptions.from_json(topics.to_json()) == topics


def test_repr_masks_secrets():
    text = repr(_options()) + str(_options())
    assert "hunter2" not in text
    assert "svc" in text and "***" in text


@pytest.mark.parametrize(
    "kw",
    [
        {"pattern": None},
        {"topics": ("a",)},
        {"pattern": "("},
        {"starting_offsets": "newest"},
        {"max_records_per_trigger": 0},
        {"catch_up": "fair"},
        {"target_tasks": -1},
        {"bootstrap": ""},
    ],
)
def test_invalid_options_are_rejected(kw):
    with pytest.raises(SourceOptionsError):
        _options(**kw)


def test_from_json_rejects_garbage_and_unknown_keys():
    for text in ("{", "[]", '{"bootstrap": "b", "pattern": "x", "colour": 1}'):
        with pytest.raises(SourceOptionsError):
            KafkaSourceOptions.from_json(text)


def test_pattern_is_a_full_match_and_skips_internal_topics():
    opts = _options(pattern=".*")
    assert opts.matches("orders")
    assert not opts.matches("__consumer_offsets")
    assert not _options().matches("xorders.eu")
    assert _options().matches("orders.eu")


def test_jvm_options_are_equivalent():
    jvm = jvm_kafka_options(_options())
    assert jvm["kafka.bootstrap.servers"] == "broker:9092"
    assert jvm["subscribePattern"] == "orders\\..*"
    assert jvm["startingOffsets"] == '{"orders.eu": {"0": 5, "1": -2}}'
    assert jvm["maxOffsetsPerTrigger"] == "1000"
    assert jvm["kafka.security.protocol"] == "SASL_SSL"
    assert jvm["kafka.sasl.mechanism"] == "PLAIN"
    assert 'username="svc" password="hunter2"' in jvm["kafka.sasl.jaas.config"]
    assert "kafka.sasl.password" not in jvm
    assert jvm["includeHeaders"] == "true"
    assert jvm_kafka_options(_options(include_headers=False))["includeHeaders"] == "false"


def test_errors_pickle_with_attributes_and_transient_flags():
    err = ReadStalledError("stuck", topic="t", partition=3, offset=10)
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ReadStalledError
    assert (back.topic, back.partition, back.offset) == ("t", 3, 10)
    assert str(back) == "stuck (topic=t, partition=3, offset=10)"
    assert back.transient and BrokerError.transient
    assert not SourceOptionsError.transient and not OffsetsError.transient
    assert all(issubclass(c, SourceError) for c in (BrokerError, OffsetsError, SourceOptionsError))


def test_input_partition_is_small_and_picklable():
    part = KafkaInputPartition(_options().to_json(), tuple(("topic-%d" % i, 0, 0, 10) for i in range(50)))
    back = pickle.loads(pickle.dumps(part))
    assert back.ranges == part.ranges and back.options_json == part.options_json
    assert len(pickle.dumps(part)) < 4096


def test_arrow_schema_matches_spark_kafka_source():
    schema = kafka_arrow_schema()
    assert schema.field("timestamp").type == pa.timestamp("us", tz="UTC")
    assert schema.field("partition").type == pa.int32() and schema.field("offset").type == pa.int64()
    assert schema.field("headers").type == pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
    assert [f.name for f in kafka_struct_type().fields] == schema.names
