"""Secrets travel to Spark's Python processes in a sealed file, not in the options Spark displays
(router/source/sealed.py): the source's options name the file, and the planner and the tasks read
the client config from it."""

from __future__ import annotations

import os
import stat
import uuid

import pytest

from router.source import KafkaSourceOptions, kafka_stream
from router.source import sealed as sealed_module
from router.source.sealed import seal, unseal

from .kafka_helpers import create_topics, produce
from .test_stream import BatchLog, run_available_now


def test_sealed_options_hold_the_files_name_and_no_client_config():
    options = KafkaSourceOptions("127.0.0.1:9092", topics=("a",),
                                 client_config={"sasl.password": "SealedPw42", "security.protocol": "SASL_SSL"})
    sealed = options.sealed_with("icerouter-sealed-x.pickle")
    text = sealed.to_json()
    assert "SealedPw42" not in text and "SASL_SSL" not in text and "icerouter-sealed-x.pickle" in text
    assert KafkaSourceOptions.from_json(text) == sealed and sealed.client_config == {}
    assert options.resolved() is options  # nothing sealed: nothing to read


@pytest.mark.slow
def test_the_sealed_file_is_private_and_reaches_the_tasks(spark):
    secret = f"SealedPw{uuid.uuid4().hex}"
    name = seal(spark, {"client_config": {"sasl.password": secret}})
    local = os.path.join(sealed_module._directory, name)
    assert stat.S_IMODE(os.stat(local).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(local)).st_mode) == 0o700
    options = KafkaSourceOptions("127.0.0.1:9092", topics=("a",)).sealed_with(name)

    def in_task(_):
        return unseal(name)["client_config"]["sasl.password"], options.resolved().client_config["sasl.password"]

    assert spark.sparkContext.parallelize(range(2), 2).map(in_task).collect() == [(secret, secret)] * 2


@pytest.mark.slow
def test_a_stream_reads_with_its_client_config_sealed_and_shows_none_of_it(spark, kafka_bootstrap,
                                                                          kafka_client_config, tmp_path):
    topic = f"sealed-{uuid.uuid4().hex[:8]}"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    produce(kafka_bootstrap, kafka_client_config, [topic], 1, 5)
    secret = f"SealedClientSecret{uuid.uuid4().hex}"
    # the test broker's settings (kafka_client_config) are sealed too: the tasks read only if they got them
    config = {**kafka_client_config, "client.id": secret, "sasl.password": secret}
    df = kafka_stream(spark, KafkaSourceOptions(kafka_bootstrap, topics=(topic,), client_config=config),
                      force_python=True)
    log = BatchLog()
    query = run_available_now(df, tmp_path / "checkpoint", log)
    assert len(log.rows()) == 5
    shown = query._jsq.explainInternal(True) + str(query.recentProgress)
    assert "StreamingDataSourceV2ScanRelation" in shown and secret not in shown
