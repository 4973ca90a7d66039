"""Configuration: validated at load, unknown keys rejected with their path, secrets masked."""

from __future__ import annotations

import pickle

import pytest

from router.config import load_config, parse_config
from router.exceptions import ConfigError
from router.masking import mask_url

BASE = {"kafka": {"bootstrap_servers": "127.0.0.1:9092", "topics": ["a"]},
        "registry": {"url": "http://127.0.0.1:8081"}}


def with_(**sections):
    return {**BASE, **sections}


def test_defaults_are_sensible(tmp_path):
    config = parse_config(BASE, source=tmp_path / "router.yaml")
    assert config.unmatched == "dlq" and config.tombstones == "ignore"
    assert config.dlq.table == "ops.dead_letters"
    assert config.catalog.properties["type"] == "sql"
    assert config.catalog.properties["uri"].startswith("sqlite:///")
    assert config.job.checkpoint.startswith(str(tmp_path))
    assert config.tables.metadata_columns is True
    assert (config.kafka.max_records_per_batch, config.kafka.catch_up) == (500_000, "turns")
    assert config.maintenance.merge_small_files_at == 0 and config.maintenance.transient_file_codec == "uncompressed"
    assert parse_config(with_(maintenance={"transient_file_codec": "table"})).maintenance.transient_file_codec == "table"
    assert config.job.jvm_class_archive is False  # an archive the JVM loads as code: opted into
    assert parse_config(with_(job={"jvm_class_archive": True})).job.jvm_class_archive is True
    policy = config.evolution.resolve("a")
    assert (policy.new_table.value, policy.new_column.value, policy.type_change.value) == ("evolve", "evolve", "dlq")


@pytest.mark.parametrize("raw, message", [
    ({"kafka": {"topics": ["a"]}, "registry": {"url": "x"}}, "kafka.bootstrap_servers: required"),
    ({"kafka": {"bootstrap_servers": "b"}, "registry": {"url": "x"}}, "set `topics`"),
    (with_(kafka={"bootstrap_servers": "b", "topics": ["a"], "tpoics": 1}), "kafka: unknown key 'tpoics'"),
    (with_(kafka={"bootstrap_servers": "b", "pattern": "("}), "kafka.pattern: invalid regex"),
    (with_(kafka={"bootstrap_servers": "b", "topics": ["a"], "catch_up": "fair"}),
     "kafka.catch_up: 'fair' is not one of turns, even"),
    (with_(registry={}), "registry.url: required"),
    (with_(routes=[{"topic": "a"}]), "routes[0].table: required"),
    (with_(routes=[{"table": "t", "colour": 1}]), "routes[0]: unknown key 'colour'"),
    (with_(routes=[{"name": "x", "table": "t"}, {"name": "x", "table": "u"}]), "duplicate route name 'x'"),
    (with_(unmatched="keep"), "config.unmatched: 'keep' is not one of dlq, drop"),
    (with_(job={"trigger_seconds": 0}), "job.trigger_seconds: must be > 0"),
    (with_(job={"name": "bad name"}), "job.name"),
    (with_(job={"jvm_class_archive": "yes"}), "job.jvm_class_archive: expected bool"),
    (with_(maintenance={"expire_every_commits": "often"}), "maintenance.expire_every_commits: expected int"),
    (with_(maintenance={"compact_after_files": -1}), "maintenance.compact_after_files: must be >= 0"),
    (with_(maintenance={"transient_file_codec": "zstd"}),
     "maintenance.transient_file_codec: 'zstd' is not one of uncompressed, lz4, snappy, table"),
    (with_(extra=1), "config: unknown key 'extra'"),
    (with_(catalog={"properties": {"type": "rest", "warehouse": "s3://w"}}), "catalog.properties.uri: required"),
    (with_(catalog={"properties": {"type": "rest", "uri": "http://c", "s3.path-style-access": "yes"}}),
     "catalog.properties.s3.path-style-access: 'yes' is not true or false"),
    (with_(catalog={"properties": {"type": "rest", "uri": "http://c", "s3.endpoint": "127.0.0.1:9000"}}),
     "catalog.properties.s3.endpoint: '127.0.0.1:9000' must start with http"),
])
def test_invalid_config_is_one_clear_line(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("raw, message", [
    (with_(evolution={"default": {"new_column": "maybe"}}), "evolution.default.new_column: unknown mode 'maybe'"),
    (with_(evolution={"default": "bogus"}), "evolution.default: unknown mode 'bogus'"),
    (with_(evolution={"topics": {"orders.*": {"type_change": "evolve"}}}),
     "evolution.topics['orders.*'].type_change: mode 'evolve' is not allowed"),
    (with_(evolution={"topics": {"(": "dlq"}}), "evolution.topics['(']: invalid topic pattern"),
    (with_(routes=[{"table": "t"}, {"table": "u", "evolution": "bogus"}]), "routes[1].evolution: unknown mode 'bogus'"),
    (with_(routes=[{"table": "t", "evolution": {"colour": "red"}}]), "routes[0].evolution.colour: unknown key"),
    (with_(registry={"url": "http://r", "colour": 1}), "registry.colour: unknown key(s) 'colour'"),
    (with_(registry={"url": "http://r", "retry_attempts": 0}), "registry.retry_attempts: must be an integer >= 1"),
    (with_(registry={"url": "ftp://r"}), "registry.url: url must start with http:// or https://"),
    (with_(tables={"partition_by": ["day(ts)", "weekly(ts)"]}), "tables.partition_by[1]: 'weekly(ts)' is not one of"),
    (with_(routes=[{"table": "t", "partition_by": ["bucket(id)"]}]),
     "routes[0].partition_by[0]: 'bucket(id)' needs a width, e.g. bucket(16, id)"),
])
def test_policies_registry_and_partitions_are_validated_at_load_with_their_path(raw, message):
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_env_interpolation_and_missing_variable(monkeypatch, tmp_path):
    monkeypatch.setenv("IR_TEST_BOOT", "10.0.0.1:9092")
    path = tmp_path / "c.yaml"
    path.write_text("kafka: {bootstrap_servers: '${IR_TEST_BOOT}', topics: [a]}\n"
                    "registry: {url: '${IR_TEST_REG:-http://reg:8081}'}\n")
    config = load_config(path)
    assert config.kafka.bootstrap_servers == "10.0.0.1:9092"
    assert config.registry.url == "http://reg:8081"
    path.write_text("kafka: {bootstrap_servers: '${IR_TEST_UNSET_VAR}', topics: [a]}\nregistry: {url: x}\n")
    with pytest.raises(ConfigError, match="IR_TEST_UNSET_VAR is not set"):
        load_config(path)


def test_the_s3_rest_example_loads_with_optional_settings_left_unset(monkeypatch):
    """conf/s3-rest.yaml: unset optional variables (`${VAR:-}`) drop the property, so pyiceberg's
    defaults apply (AWS default credential chain, AWS endpoints); secrets are masked."""
    from pathlib import Path

    for name in ("ICEROUTER_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ICEROUTER_CATALOG_URL", "http://127.0.0.1:8181")
    monkeypatch.setenv("ICEROUTER_CATALOG_CREDENTIAL", "client:TOPSECRET")
    example = Path(__file__).resolve().parents[2] / "conf" / "s3-rest.yaml"
    props = load_config(example).catalog.properties
    assert props["type"] == "rest" and props["uri"] == "http://127.0.0.1:8181"
    assert not {"s3.endpoint", "s3.access-key-id", "s3.secret-access-key"} & set(props)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ALSOSECRET")
    monkeypatch.setenv("ICEROUTER_S3_ENDPOINT", "http://127.0.0.1:8333")
    config = load_config(example)
    assert config.catalog.properties["s3.secret-access-key"] == "ALSOSECRET"
    assert config.catalog.properties["s3.endpoint"] == "http://127.0.0.1:8333"
    assert "TOPSECRET" not in repr(config) and "ALSOSECRET" not in repr(config)


def test_yaml_errors_and_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("kafka: [unclosed\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_config(bad)


def test_secrets_never_in_repr():
    config = parse_config(with_(
        kafka={"bootstrap_servers": "b", "topics": ["a"], "client": {"sasl.password": "hunter2", "ssl.key.password": "k3y"}},
        registry={"url": "http://r", "basic_auth_user": "u", "basic_auth_password": "s3cret"},
        catalog={"properties": {"type": "sql", "uri": "sqlite:///x.db", "warehouse": "file:///w",
                                "s3.secret-access-key": "AKIASECRET"}}))
    text = repr(config) + repr(config.kafka) + repr(config.catalog) + repr(config.registry)
    for secret in ("hunter2", "k3y", "s3cret", "AKIASECRET"):
        assert secret not in text


def test_config_and_errors_pickle():
    config = parse_config(BASE)
    assert pickle.loads(pickle.dumps(config)) == config
    err = ConfigError("bad", table="t", topic="a")
    again = pickle.loads(pickle.dumps(err))
    assert (again.table, again.topic, str(again)) == ("t", "a", str(err))


@pytest.mark.parametrize("url, masked", [
    ("postgresql+psycopg2://ice:hunter2@127.0.0.1:5432/cat", "postgresql+psycopg2://ice:******@127.0.0.1:5432/cat"),
    ("http://user:p%40ss@registry:8081", "http://user:******@registry:8081"),
    ("https://catalog/api?token=abc&x=1", "https://catalog/api?token=******&x=1"),
    ("sqlite:////tmp/catalog.db", "sqlite:////tmp/catalog.db"),
    ("http://user@registry:8081/a%20b?x=a%20b", "http://user@registry:8081/a%20b?x=a%20b"),
])
def test_urls_are_printed_without_credentials(url, masked):
    assert mask_url(url) == masked


def test_upsert_routes_parse_with_table_level_defaults():
    config = parse_config(with_(tables={"mode": "upsert"}, routes=[
        {"name": "plain", "table": "raw.a"},
        {"name": "keyed", "table": "raw.b", "key": ["id", "region"], "sequence_by": "ts_ms"},
        {"name": "cdc", "table": "raw.c", "cdc": "debezium", "key": "id"},
        {"name": "log", "table": "raw.d", "mode": "append"}]))
    plain, keyed, cdc, log = (r.write for r in config.routes)
    assert (plain.mode, plain.key, plain.cdc) == ("upsert", None, None)  # key: the Kafka record key's fields
    assert (keyed.key, keyed.sequence_by) == (("id", "region"), "ts_ms")
    assert (cdc.mode, cdc.key, cdc.cdc) == ("upsert", ("id",), "debezium")
    assert log.mode == "append" and not log.upsert
    assert parse_config(with_(routes=[{"table": "raw.x", "cdc": "debezium"}])).routes[0].write.upsert  # cdc: upsert
    assert parse_config(with_(routes=[{"table": "raw.x"}])).routes[0].write.mode == "append"


@pytest.mark.parametrize("routes, tables, message", [
    ([{"table": "t", "mode": "merge"}], None, "routes[0].mode: 'merge' is not one of append, upsert"),
    ([{"table": "t"}], {"mode": "merge"}, "tables.mode: 'merge' is not one of append, upsert"),
    ([{"table": "t", "cdc": "maxwell"}], None, "routes[0].cdc: 'maxwell' is not one of debezium"),
    ([{"table": "t", "cdc": "debezium", "mode": "append"}], None, "routes[0].mode: a cdc route mirrors"),
    ([{"table": "t", "key": ["id"]}], None, "routes[0].key: only an upsert route has one"),
    ([{"table": "t", "sequence_by": "ts"}], None, "routes[0].sequence_by: only an upsert route has one"),
    ([{"table": "t", "mode": "upsert", "key": []}], None, "routes[0].key: expected a column name"),
    ([{"table": "t", "mode": "upsert", "key": ["id", "id"]}], None, "routes[0].key: column 'id' given twice"),
    ([{"table": "t", "mode": "upsert", "key": ["id"], "columns": ["name"]}], None,
     "routes[0].columns: the projection drops key column 'id'"),
    ([{"name": "a", "table": "raw.t"}, {"name": "b", "table": "raw.t", "mode": "upsert"}], None,
     "routes: 'a' and 'b' both feed raw.t but write it differently (mode append against mode upsert)"),
    ([{"name": "a", "table": "raw.t", "mode": "upsert", "key": "id"},
      {"name": "b", "table": "raw.t", "mode": "upsert", "key": "uid"}], None,
     "routes: 'a' and 'b' both feed raw.t but write it differently (mode upsert key id against mode upsert key uid)"),
])
def test_bad_upsert_settings_fail_at_load_with_their_path(routes, tables, message):
    with pytest.raises(ConfigError) as err:
        parse_config(with_(routes=routes, **({"tables": tables} if tables else {})))
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_config_whose_routes_need_no_registry_needs_none():
    """Routes that read raw, inferred or schema-file JSON, or Kafka Connect JSON: no registry section."""
    kafka = {"bootstrap_servers": "127.0.0.1:9092", "topics": ["a"]}
    config = parse_config({"kafka": kafka, "routes": [{"name": "j", "table": "raw.a", "format": "json"},
                                                      {"name": "r", "table": "raw.b", "format": "raw"},
                                                      {"name": "c", "table": "raw.c", "format": "connect_json"}]})
    assert config.registry is None
    with pytest.raises(ConfigError, match=r"registry.url: required \(routes s read through the registry\)"):
        parse_config({"kafka": kafka, "routes": [{"name": "s", "table": "raw.a",
                                                  "format": {"type": "json", "subject": "a-value"}}]})
    with pytest.raises(ConfigError, match=r"registry.url: required \(routes avro read through the registry\)"):
        parse_config({"kafka": kafka, "routes": [{"name": "avro", "table": "raw.a"}]})
