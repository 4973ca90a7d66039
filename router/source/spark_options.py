"""Translate KafkaSourceOptions into the options of Spark's JVM Kafka source."""

from __future__ import annotations

import json

from router.source.options import KafkaSourceOptions

#: librdkafka settings whose Java client name differs (SASL/PLAIN credentials become a JAAS line).
RENAMED = {"sasl.mechanisms": "sasl.mechanism"}
JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}
#: librdkafka-only settings with no Java equivalent.
DROPPED = {
    "sasl.username", "sasl.password", "enable.partition.eof", "queued.max.messages.kbytes",
    "receive.message.max.bytes", "auto.offset.reset", "enable.auto.commit", "enable.auto.offset.store",
    "key.deserializer", "value.deserializer",
}


def to_jvm_options(options: KafkaSourceOptions) -> dict[str, str]:
    out = {
        "kafka.bootstrap.servers": options.bootstrap,
        "failOnDataLoss": "false",
        "includeHeaders": str(options.include_headers).lower(),
    }
    if options.topics:
        out["subscribe"] = ",".join(options.topics)
    else:
        out["subscribePattern"] = options.pattern
    if isinstance(options.starting_offsets, str):
        out["startingOffsets"] = options.starting_offsets
    else:
        out["startingOffsets"] = json.dumps(
            {t: {str(p): o for p, o in ps.items()} for t, ps in options.starting_offsets.items()}, sort_keys=True
        )
    if options.max_records_per_trigger:
        out["maxOffsetsPerTrigger"] = str(options.max_records_per_trigger)
    conf = dict(options.client_config)
    mechanism = conf.get("sasl.mechanisms", conf.get("sasl.mechanism", "PLAIN")).upper()
    if "sasl.username" in conf and mechanism in JAAS_MODULES:
        user, password = conf["sasl.username"], conf.get("sasl.password", "")
        out["kafka.sasl.jaas.config"] = (
            f'{JAAS_MODULES[mechanism]} required username="{user}" password="{password}";'
        )
    for key, value in conf.items():
        if key in DROPPED:
            continue
        out["kafka." + RENAMED.get(key, key)] = value
    return out
