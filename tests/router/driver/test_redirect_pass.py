"""The fused source's redirect pass (router/driver/fused_stream.redirect_pass) on real Spark and a
real broker: it re-reads a batch's ranges and dead-letters the records of the redirected tables,
with the client config and the context reaching its tasks through a sealed file."""

from __future__ import annotations

import pickle

import pytest
from confluent_kafka import Producer

import router.cli.demo_data as data
from router.config import CatalogConfig
from router.descriptors import STATS_ROW
from router.driver.fused_stream import redirect_pass
from router.source import KafkaSourceOptions
from tests.router.executor.test_partition import make_dispatcher
from tests.router.source.kafka_helpers import create_topics

pytestmark = pytest.mark.slow


def test_the_redirect_pass_dead_letters_the_redirected_tables_records(spark, kafka_bootstrap, kafka_client_config,
                                                                       registry_url, tmp_path, unique_name):
    ns = unique_name("rd")
    topic, table = f"{ns}.orders", f"{ns}.{ns}_orders"
    create_topics(kafka_bootstrap, kafka_client_config, [topic], 1)
    encode = data.Encoder(data.ORDER_V1, data.register(registry_url, f"{topic}-value", data.ORDER_V1))
    producer = Producer({"bootstrap.servers": kafka_bootstrap, **kafka_client_config})
    for i in range(3):
        producer.produce(topic, value=encode(data.order(i)), partition=0)
    assert producer.flush(30) == 0
    catalog = CatalogConfig(unique_name("c"), {"type": "sql", "uri": f"sqlite:///{tmp_path / 'catalog.db'}",
                                               "warehouse": (tmp_path / "wh").as_uri()})
    dispatcher = make_dispatcher(catalog, registry_url, ns, [
        {"name": "raw", "topic": rf"{ns}\..*", "table": f"{ns}.{{topic}}"}], job={"commit_in_tasks": False})
    ctx = dispatcher.context(0, redirect=frozenset({table}))
    options = KafkaSourceOptions(kafka_bootstrap, topics=(topic,), client_config=kafka_client_config)

    rows = redirect_pass(spark, options.to_json(), [[(topic, 0, 0, 3)]], ctx)

    results = {name: pickle.loads(blob) for name, blob in rows if name != STATS_ROW}
    assert table not in results and set(results) == {f"{ns}.dead_letters"}
    assert results[f"{ns}.dead_letters"].rows == 3
