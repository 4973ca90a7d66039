"""`icerouter plan --sample TOPIC`: plan from a topic's latest records, decoded as the job decodes them.

Why: a topic without a registry (plain JSON, Kafka Connect JSON) has no subject to plan from; its
columns are what its records say. So the plan reads the last `records` of the topic from the
brokers (spread over its partitions), decodes them with the format of each route that takes the
topic (the same functions the job's tasks call), and plans each writer shape found for the tables
those routes name, exactly as a registry subject is planned. An upsert route without `key` is keyed
by the sampled records' Kafka keys, decoded as the job decodes them (the topic's first upsert
route's format: router.routing.RoutingTable.key_format). Records that would be dead-lettered are
counted in the notes with their reasons.
"""

from __future__ import annotations

from collections import Counter

import pyarrow as pa

from evolution.changes import MappedSchema
from registry.decode import decode_values
from registry.unframed import decode_unframed
from router.changes.extract import kafka_keys_of
from router.config import RouterConfig
from router.exceptions import ConfigError
from router.planning.inputs import SchemaInput

__all__ = ["sample_records", "sample_inputs", "DEFAULT_SAMPLE"]

#: records read from the end of the topic, spread over its partitions
DEFAULT_SAMPLE = 1000


def sample_records(config: RouterConfig, topic: str, records: int) -> pa.Table:
    """The topic's last `records` records (Kafka source rows: key, value, headers...)."""
    from router.source.fetch import read_ranges
    from router.source.metadata import BrokerMetadata
    from router.source.offsets import Range, tp_key
    from router.source.options import source_options

    options = source_options(config)
    metadata = BrokerMetadata(options)
    try:
        tps = [tp for tp in metadata.partitions() if tp[0] == topic]
        if not tps:
            raise ConfigError(f"--sample {topic}: no such topic on {config.kafka.bootstrap_servers}")
        earliest, latest = metadata.offsets(tps, "earliest"), metadata.offsets(tps, "latest")
    finally:
        metadata.close()
    per = max(1, records // len(tps))
    ranges = []
    for t, p in tps:
        lo, hi = earliest.get(tp_key(t, p), 0), latest.get(tp_key(t, p), 0)
        if hi > lo:
            ranges.append(Range(t, p, max(lo, hi - per), hi))
    batches = list(read_ranges(options.to_json(), ranges)) if ranges else []
    from router.source.schema import kafka_arrow_schema

    return pa.Table.from_batches(batches) if batches else kafka_arrow_schema().empty_table()


def sample_inputs(config: RouterConfig, planner, registry, topic: str, records: int = DEFAULT_SAMPLE):
    """([(SchemaInput, targets)], notes) for the writer shapes of the topic's sampled records."""
    rows = sample_records(config, topic, records)
    targets, unplannable = planner.targets_for_topic(topic)
    notes = [f"{topic}: {label}: {reason}" for label, reason in unplannable]
    notes.append(f"{topic}: {rows.num_rows} latest records sampled")
    routes = {r.name: r for r in planner.routing.routes_for_topic(topic)}
    if not routes or rows.num_rows == 0:
        return ([(SchemaInput(f"{topic} (sampled)", None, "unknown", problem=f"topic {topic}: no records to sample"),
                  targets)] if not routes else []), notes
    values = rows.column("value").combine_chunks()
    key_format = planner.routing.key_format(topic)
    if key_format is not None and not key_format.framed:  # unframed keys: only the records say what they hold
        keys = rows.column("key").combine_chunks()
        decoded = kafka_keys_of(decode_unframed(registry, key_format, keys), len(keys))
        planner.sampled_keys(topic, decoded.table.column_names)
    out = []
    for fmt in dict.fromkeys(r.format for r in routes.values()):
        mine = [t for t in targets if t.route is None or routes[t.route].format == fmt]
        if fmt.framed:
            result = decode_values(registry, values)
        else:
            result = decode_unframed(registry, fmt, values, rows.column("key").combine_chunks())
        failed = Counter((f.error_class, f.reason.split(":")[0]) for f in result.failures if f.error_class != "tombstone")
        for (cls, reason), count in sorted(failed.items()):
            notes.append(f"{topic} ({fmt.describe()}): {count} sampled record(s) would be dead-lettered: {cls}: {reason}")
        for group in result.groups:
            source = f"{topic} ({fmt.describe()}, {group.batch.num_rows} sampled records)"
            art = group.artifacts
            out.append((SchemaInput(source, art.schema_str, art.schema_type,
                                    MappedSchema(art.iceberg_schema, {}, source)), mine))
    return out, notes
