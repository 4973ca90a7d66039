"""Kafka streaming source: Spark's JVM Kafka connector when present, else a Python Data Source.

``kafka_stream(spark, options)`` returns a streaming DataFrame with the columns of
Spark's Kafka source (key, value, topic, partition, offset, timestamp,
timestampType, headers).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from router.source.exceptions import (
    BrokerError,
    OffsetsError,
    ReadStalledError,
    SourceError,
    SourceOptionsError,
)
from router.source.offsets import ResumePlan, split_key
from router.source.options import OPTIONS_KEY, KafkaSourceOptions
from router.source.sealed import seal
from router.source.spark_options import to_jvm_options

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = [
    "KafkaSourceOptions",
    "kafka_stream",
    "jvm_kafka_available",
    "jvm_kafka_options",
    "SourceError",
    "SourceOptionsError",
    "OffsetsError",
    "BrokerError",
    "ReadStalledError",
]

JVM_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider"


def jvm_kafka_available(spark: "SparkSession") -> bool:
    """True when Spark's own Kafka source is on the driver classpath (classic Spark only)."""
    try:
        jvm = spark._jvm  # absent under Spark Connect
        if jvm is None:
            return False
        jvm.java.lang.Class.forName(JVM_PROVIDER, False, jvm.Thread.currentThread().getContextClassLoader())
        return True
    except Exception:  # noqa: BLE001 - any failure means "not available"
        return False


def jvm_kafka_options(options: KafkaSourceOptions) -> dict[str, str]:
    """The equivalent options of Spark's JVM Kafka source (librdkafka names passed as kafka.*)."""
    return to_jvm_options(options)


def kafka_stream(spark: "SparkSession", options: KafkaSourceOptions, *, force_python: bool = False,
                 resume_json: str | None = None) -> "DataFrame":
    """A streaming DataFrame over the subscription; ``force_python`` skips the JVM connector.

    ``resume_json`` (router/driver/resume.py) moves the start to where the tables are; Spark's JVM
    connector only takes it as its starting offsets (when there is no checkpoint).
    """
    if not force_python and jvm_kafka_available(spark):
        plan = ResumePlan.from_json(resume_json)
        if plan.resume:
            starting: dict = {}
            for key, offset in plan.resume.items():
                topic, partition = split_key(key)
                starting.setdefault(topic, {})[partition] = offset
            options = dataclasses.replace(options, starting_offsets=starting)
        return spark.readStream.format("kafka").options(**jvm_kafka_options(options)).load()
    # deferred: the datasource needs pyspark, and this package's offsets and options run without Spark
    from router.source.datasource import RESUME_KEY, SOURCE_NAME, KafkaDataSource

    if options.target_tasks is None:
        options = dataclasses.replace(options, target_tasks=2 * spark.sparkContext.defaultParallelism)
    spark.dataSource.register(KafkaDataSource)
    # the client config (SASL and TLS secrets) in a sealed file, not in the option Spark displays
    options = options.sealed_with(seal(spark, {"client_config": dict(options.client_config)}))
    return (spark.readStream.format(SOURCE_NAME).option(OPTIONS_KEY, options.to_json())
            .option(RESUME_KEY, resume_json or "").load())
