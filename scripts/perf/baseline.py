"""The hand-written pipeline people build first, as the benchmark's baseline.

foreachBatch -> for each topic: filter the DataFrame, collect the values to the
driver, decode each with confluent-kafka's AvroDeserializer, build an Arrow
table with `from_pylist`, `table.append()` with pyiceberg. The batch is
persisted once so the per-topic filters do not re-read Kafka (the kind
version of the pattern). One table per topic, same source, same data.
"""

from __future__ import annotations

import time

import pyarrow as pa

ARROW_SCHEMA = pa.schema([
    ("order_id", pa.string()), ("customer_id", pa.int64()), ("amount", pa.decimal128(12, 2)),
    ("created_at", pa.timestamp("us", tz="UTC")), ("updated_at", pa.timestamp("us", tz="UTC")),
    ("status", pa.string()), ("note", pa.string()), ("quantity", pa.int32()), ("price", pa.float64()),
    ("tags", pa.list_(pa.string())),
    ("address", pa.struct([("street", pa.string()), ("city", pa.string()), ("zip", pa.string()),
                           ("country", pa.string())])),
    ("active", pa.bool_()),
])


def run_baseline(spark, source_options, topics: list[str], registry_url: str, catalog, namespace: str,
                 checkpoint: str) -> dict:
    """Run the baseline with availableNow over `topics`; returns records, seconds and batches."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroDeserializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    from router.source import kafka_stream

    catalog.create_namespace_if_not_exists(namespace)
    tables = {t: catalog.create_table(f"{namespace}.{t.replace('.', '_')}", schema=ARROW_SCHEMA) for t in topics}
    deserialize = AvroDeserializer(SchemaRegistryClient({"url": registry_url}))
    state = {"records": 0, "batches": 0, "first": None, "last": None}

    def sink(df, batch_id):
        if state["first"] is None:
            state["first"] = time.perf_counter()
        df = df.select("topic", "value").persist()
        for topic in topics:
            rows = df.filter(df.topic == topic).select("value").collect()
            if not rows:
                continue
            ctx = SerializationContext(topic, MessageField.VALUE)
            records = [deserialize(bytes(r.value), ctx) for r in rows]
            tables[topic].append(pa.Table.from_pylist(records, schema=ARROW_SCHEMA))
            state["records"] += len(records)
        df.unpersist()
        state["batches"] += 1
        state["last"] = time.perf_counter()

    query = (kafka_stream(spark, source_options).writeStream.foreachBatch(sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    query.awaitTermination()
    if query.exception() is not None:
        raise RuntimeError(str(query.exception()).splitlines()[0])
    seconds = (state["last"] or 0) - (state["first"] or 0)
    return {"records": state["records"], "seconds": round(seconds, 3), "batches": state["batches"],
            "topics": len(topics), "records_per_s": round(state["records"] / seconds) if seconds else 0}
