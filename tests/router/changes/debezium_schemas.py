"""Debezium-shaped registry schemas, as the Postgres and MySQL connectors register them (Avro and JSON Schema)."""

from __future__ import annotations

NS = "pg.public.customers"
DECIMAL = {"type": "bytes", "scale": 2, "precision": 10, "connect.version": 1,
           "connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
           "connect.name": "org.apache.kafka.connect.data.Decimal", "logicalType": "decimal"}
ROW = {"type": "record", "name": "Value", "namespace": NS, "connect.name": f"{NS}.Value", "fields": [
    {"name": "id", "type": "int"},
    {"name": "email", "type": "string"},
    {"name": "name", "type": ["null", "string"], "default": None},
    {"name": "balance", "type": ["null", DECIMAL], "default": None},
    {"name": "updated_at", "type": ["null", {"type": "long", "connect.version": 1,
                                             "connect.name": "io.debezium.time.MicroTimestamp"}], "default": None},
]}
SOURCE = {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
          "connect.name": "io.debezium.connector.postgresql.Source", "fields": [
              {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
              {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
              {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                                             "connect.parameters": {"allowed": "true,last,false,incremental"},
                                             "connect.default": "false", "connect.name": "io.debezium.data.Enum"},
                                            "null"], "default": "false"},
              {"name": "db", "type": "string"}, {"name": "sequence", "type": ["null", "string"], "default": None},
              {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
              {"name": "txId", "type": ["null", "long"], "default": None},
              {"name": "lsn", "type": ["null", "long"], "default": None},
              {"name": "xmin", "type": ["null", "long"], "default": None}]}
BLOCK = {"type": "record", "name": "block", "namespace": "event", "connect.version": 1, "connect.name": "event.block",
         "fields": [{"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
                    {"name": "data_collection_order", "type": "long"}]}


def envelope(row: dict = ROW, ns: str = NS) -> dict:
    return {"type": "record", "name": "Envelope", "namespace": ns, "connect.version": 1,
            "connect.name": f"{ns}.Envelope", "fields": [
                {"name": "before", "type": ["null", row], "default": None},
                {"name": "after", "type": ["null", row["name"]], "default": None},
                {"name": "source", "type": SOURCE},
                {"name": "op", "type": "string"},
                {"name": "ts_ms", "type": ["null", "long"], "default": None},
                {"name": "transaction", "type": ["null", BLOCK], "default": None}]}


ENVELOPE = envelope()
KEY = {"type": "record", "name": "Key", "namespace": NS, "connect.name": f"{NS}.Key",
       "fields": [{"name": "id", "type": "int"}]}

# MySQL connector, composite primary key (tenant, id)
MY_NS = "my.shop.orders"
MY_ROW = {"type": "record", "name": "Value", "namespace": MY_NS, "fields": [
    {"name": "tenant", "type": "string"}, {"name": "id", "type": "long"},
    {"name": "total", "type": ["null", "double"], "default": None}]}
MY_ENVELOPE = envelope(MY_ROW, MY_NS)
MY_KEY = {"type": "record", "name": "Key", "namespace": MY_NS,
          "fields": [{"name": "tenant", "type": "string"}, {"name": "id", "type": "long"}]}


def json_row() -> dict:
    return {"type": "object", "title": f"{NS}.Value", "properties": {
        "id": {"type": "integer", "connect.index": 0, "connect.type": "int32"},
        "email": {"type": "string", "connect.index": 1},
        "name": {"oneOf": [{"type": "null"}, {"type": "string"}], "connect.index": 2}},
        "required": ["id", "email"]}


JSON_ENVELOPE = {
    "$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "title": f"{NS}.Envelope",
    "properties": {
        "before": {"oneOf": [{"type": "null"}, json_row()]},
        "after": {"oneOf": [{"type": "null"}, json_row()]},
        "source": {"type": "object", "properties": {"lsn": {"type": "integer"}, "ts_ms": {"type": "integer"}},
                   "required": ["ts_ms"]},
        "op": {"type": "string"},
        "ts_ms": {"oneOf": [{"type": "null"}, {"type": "integer"}]}},
    "required": ["source", "op"]}
JSON_KEY = {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object", "title": f"{NS}.Key",
            "properties": {"id": {"type": "integer"}}, "required": ["id"]}
