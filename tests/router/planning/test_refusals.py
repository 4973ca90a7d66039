"""Every refusal the job makes, through the job, `plan --subject`, `plan --schema-file` (with and without
`--topic`) and `check` (text, JSON, JUnit): the same blocking outcome and the job's own reason.

The job runs its executor path without Spark (`process_partition` + the real commit) against the
real registry and the SQLite and PostgreSQL catalogs; DuckDB reads the dead letters back.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

import router.cli.demo_data as data
from router.config import parse_config
from router.driver.dispatcher import Dispatcher
from router.exceptions import ConfigError
from router.planning.check import check_command
from router.planning.plan import plan_command
from tests.router.executor.test_partition import catalog_config, make_dispatcher, read, run_batch, source_batch  # noqa: F401

ORDER = {"type": "record", "name": "Order", "namespace": "grid",
         "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "double"}]}
VALUE = {"id": 1, "total": 2.5}


def letters(catalog_config, ns: str) -> list[tuple]:
    return read(catalog_config, f"{ns}.dead_letters", "error_class, reason", order='"offset"')


def four_ways(config, tmp_path, topic: str, table: str, schema: dict | str = ORDER, with_topic: bool = True):
    """(plan --subject, plan --schema-file, check JSON, check text, check JUnit) for one schema."""
    text = schema if isinstance(schema, str) else json.dumps(schema)
    by_subject = json.loads(plan_command(config, subjects=[f"{topic}-value"], fmt="json")[0])
    path = tmp_path / f"{topic}.avsc"
    path.write_text(text)
    by_file = json.loads(plan_command(config, schema_file=str(path), table=table, fmt="json",
                                      topic=topic if with_topic else None)[0])
    schemas = tmp_path / "schemas"
    schemas.mkdir(exist_ok=True)
    (schemas / path.name).write_text(text)
    as_json, code, _ = check_command(config, str(schemas), fmt="json")
    as_text, text_code, _ = check_command(config, str(schemas), fmt="text")
    as_junit, junit_code, _ = check_command(config, str(schemas), fmt="junit")
    assert code == text_code == junit_code
    return by_subject, by_file, json.loads(as_json), as_text, ET.fromstring(as_junit), code


def only_violation(plan_doc: dict) -> dict:
    assert plan_doc["blocked"] and plan_doc["verdict"] == "blocked"
    [plan] = plan_doc["plans"]
    [violation] = plan["violations"]
    return violation


def test_namespace_not_allowed(catalog_config, registry_url, unique_name, tmp_path):  # noqa: F811
    ns = unique_name("r")
    topic = f"{ns}.orders"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns,
                                 [{"name": "main", "topic": rf"{ns}\.orders", "table": "zzz.{topic}"}],
                                 kafka={"bootstrap_servers": "127.0.0.1:1", "topics": [topic]})
    enc = data.Encoder(ORDER, data.register(registry_url, f"{topic}-value", ORDER))
    run_batch(dispatcher, [source_batch([(topic, 0, 0, enc(VALUE), None)])], 0)
    [(error_class, reason)] = letters(catalog_config, ns)
    assert error_class == "TableNameError" and reason == "namespace 'zzz' is not in tables.allowed_namespaces"

    by_subject, by_file, checked, text, junit, code = four_ways(dispatcher.config, tmp_path, topic,
                                                                f"zzz.{ns}_orders")
    for violation in (only_violation(by_subject), only_violation(by_file),
                      checked["results"][0]["tables"][0]["plan"]["violations"][0]):
        assert (violation["kind"], violation["reason"], violation["outcome"]) == ("table_name", reason, "dlq")
    assert code == 1 and checked["results"][0]["blocked_by"] == ["table route main (blocked)"]
    assert "BLOCKED by table route main (blocked) - registry: " in text
    assert reason in junit.find("testsuite/testcase/failure").text


@pytest.mark.parametrize("unmatched", ["dlq", "drop"])
def test_no_route_matches_the_topic(unmatched, catalog_config, registry_url, unique_name, tmp_path):  # noqa: F811
    ns = unique_name("u")
    topic, routed = f"{ns}.stray", f"{ns}.orders"
    dispatcher = make_dispatcher(catalog_config, registry_url, ns,
                                 [{"name": "main", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"}],
                                 kafka={"bootstrap_servers": "127.0.0.1:1", "topics": [routed, topic]},
                                 unmatched=unmatched)
    enc = data.Encoder(ORDER, data.register(registry_url, f"{topic}-value", ORDER))
    results, _ = run_batch(dispatcher, [source_batch([(topic, 0, 0, enc(VALUE), None)])], 0)
    job_reason = f"no route matches topic {topic!r}"
    if unmatched == "dlq":
        assert letters(catalog_config, ns) == [("unmatched", job_reason)]
    else:
        assert not any(r.rows for r in results.values())

    by_subject, by_file, checked, text, junit, code = four_ways(dispatcher.config, tmp_path, topic, f"{ns}.orders")
    fate = "dead-letters" if unmatched == "dlq" else "drops"
    expected = f"{job_reason}: the job {fate} its records (unmatched: {unmatched})"
    for violation in (only_violation(by_subject), only_violation(by_file),
                      checked["results"][0]["tables"][0]["plan"]["violations"][0]):
        assert (violation["kind"], violation["reason"]) == ("unmatched", expected)
    assert code == 1 and "(no routed tables)" not in text and expected in text
    assert expected in junit.find("testsuite/testcase/failure").text

    # without --topic, a file named after no routed topic is a usage error naming the routed topics
    with pytest.raises(ConfigError, match=rf"no route takes topic '{topic}' \(from the file name\).*routed: {routed}"):
        four_ways(dispatcher.config, tmp_path, topic, f"{ns}.orders", with_topic=False)


def test_a_table_no_route_of_the_topic_writes(catalog_config, registry_url, unique_name, tmp_path):  # noqa: F811
    ns = unique_name("n")
    topic = f"{ns}.orders"
    config = make_dispatcher(catalog_config, registry_url, ns,
                             [{"name": "main", "topic": rf"{ns}\.orders", "table": f"{ns}.{{topic}}"}]).config
    data.register(registry_url, f"{topic}-value", ORDER)
    path = tmp_path / "v2.avsc"  # the file's name is no topic: without --topic a usage error, as above
    path.write_text(json.dumps(ORDER))
    with pytest.raises(ConfigError, match="no route takes topic 'v2'"):
        plan_command(config, schema_file=str(path), table=f"{ns}.other")
    doc = json.loads(plan_command(config, schema_file=str(path), table=f"{ns}.other", topic=topic, fmt="json")[0])
    violation = only_violation(doc)
    assert violation["kind"] == "not_routed"
    assert violation["reason"] == f"no route sends topic '{topic}' to {ns}.other (its routes: main -> {ns}.{{topic}})"


def test_fan_in_routes_that_disagree_are_refused_everywhere(catalog_config, registry_url, unique_name,  # noqa: F811
                                                            tmp_path):
    ns = unique_name("f")
    a, b = f"{ns}.a", f"{ns}.b"
    routes = [{"name": "from_a", "topic": rf"{ns}\.a", "table": f"{ns}.all"},
              {"name": "from_b", "topic": rf"{ns}\.b", "table": f"{ns}.all", "evolution": "freeze"}]
    raw = {"kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [a, b]}, "registry": {"url": registry_url},
           "catalog": {"name": catalog_config.name, "properties": dict(catalog_config.properties)},
           "tables": {"allowed_namespaces": [ns]}, "routes": routes, "dlq": {"table": f"{ns}.dead_letters"}}
    expected = (f"routes from_a, from_b feed table {ns}.all with different policy: give them the same settings "
                "or send them to different tables")
    config = parse_config(raw)
    (tmp_path / f"{a}.avsc").write_text(json.dumps(ORDER))
    for start in (lambda: Dispatcher(config), lambda: plan_command(config, subjects=[f"{a}-value"]),
                  lambda: check_command(config, str(tmp_path))):
        with pytest.raises(ConfigError) as err:
            start()
        assert err.value.message == expected

    # topics found by pattern: the job meets the conflict in a batch and dead-letters the table's records
    raw["kafka"] = {"bootstrap_servers": "127.0.0.1:1", "pattern": rf"{ns}\..*"}
    raw["routes"] = [{"name": "both", "topic": rf"{ns}\.(a|b)", "table": f"{ns}.all"}]
    raw["evolution"] = {"topics": {rf"{ns}\.b": "freeze"}}
    dispatcher = make_dispatcher(catalog_config, registry_url, ns, raw["routes"], kafka=raw["kafka"],
                                 evolution=raw["evolution"])
    enc_a = data.Encoder(ORDER, data.register(registry_url, f"{a}-value", ORDER))
    enc_b = data.Encoder(ORDER, data.register(registry_url, f"{b}-value", ORDER))
    run_batch(dispatcher, [source_batch([(a, 0, 0, enc_a(VALUE), None), (b, 0, 0, enc_b(VALUE), None)])], 0)
    found = letters(catalog_config, ns)
    assert [c for c, _ in found] == ["fan_in_conflict"] * 2
    assert found[0][1] == (f"routes both ({a}), both ({b}) feed table {ns}.all with different policy: give them "
                           "the same settings or send them to different tables")
    # plan sees it too once it knows both topics; with only one it cannot
    with_topics = parse_config({**raw, "kafka": {"bootstrap_servers": "127.0.0.1:1", "topics": [a]},
                                "catalog": {"name": catalog_config.name,
                                            "properties": dict(catalog_config.properties)},
                                "tables": {"allowed_namespaces": [ns]}})
    doc = json.loads(plan_command(with_topics, subjects=[f"{b}-value"], fmt="json")[0])
    assert only_violation(doc)["kind"] == "fan_in_conflict"
