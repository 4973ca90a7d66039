"""No secret in Spark's plan, UI, event log or our output, over a live job.

A job runs with a distinctive secret in each setting that holds one (the catalog's PostgreSQL
password, S3 keys and REST credential, the registry's basic-auth password, librdkafka's SASL password
for the source and the dead-letter topic) against a real broker, registry (requiring that password),
PostgreSQL catalog and Spark. None of them may show, raw or inside base64 runs decoded (the pickles
inside included), in: the event log (formatted and extended explain modes), `explain(True)` of the
running query, `lastProgress` / `recentProgress` / `status`, the Spark UI (SQL, Structured Streaming,
environment and jobs pages and the REST API), the job's log at DEBUG (Spark's driver log included),
the status file, `/metrics`, and the `plan` and `check` outputs (text and JSON).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

import router.cli.demo_data as data
from router.devstack._proc import free_port

pytestmark = pytest.mark.slow

_B64_RUN = re.compile(rb"[A-Za-z0-9+/_-]{16,}={0,2}")


def _decodings(blob: bytes, depth: int = 2):
    """`blob`, and every base64 run in it decoded (standard and URL-safe alphabets), `depth` levels deep."""
    yield blob
    if depth == 0:
        return
    for match in _B64_RUN.finditer(blob):
        run = match.group().rstrip(b"=")
        for start in range(4):  # a run may begin inside a longer encoding's quantum
            piece = run[start:]
            piece = piece[:len(piece) - len(piece) % 4]
            for decode in (base64.b64decode, base64.urlsafe_b64decode):
                try:
                    decoded = decode(piece)
                except (binascii.Error, ValueError):
                    continue
                yield from _decodings(decoded, depth - 1)


def find_secrets(blob: bytes, secrets: dict[str, str]) -> set[str]:
    """The names of the secrets found in `blob`, raw or base64-encoded. Pickles store strings as their
    UTF-8 bytes, so a secret inside a pickle shows raw in its decoded bytes."""
    found = set()
    for candidate in _decodings(blob):
        found |= {name for name, value in secrets.items() if value.encode() in candidate}
    return found


def test_find_secrets_sees_raw_base64_and_pickled_values():
    import pickle

    secrets = {"pw": "SaslPw0123456789abcdef"}
    hidden = base64.b64encode(pickle.dumps({"sasl.password": secrets["pw"], "pad": "x" * 7}))
    assert find_secrets(b"option=" + hidden + b")", secrets) == {"pw"}
    assert find_secrets(b"x" + base64.urlsafe_b64encode(b"zz" + secrets["pw"].encode()), secrets) == {"pw"}
    assert find_secrets(f"uri=postgresql://u:{secrets['pw']}@h".encode(), secrets) == {"pw"}
    assert find_secrets(base64.b64encode(b"nothing to see here, nothing at all"), secrets) == set()


def _config(tmp: Path, prefix: str, bootstrap: str, registry_url: str, postgres_uri: str, secrets: dict,
            explain_mode: str, metrics_port: int) -> Path:
    user, rest = postgres_uri.split("://", 1)[1].split("@", 1)
    catalog_uri = f"{postgres_uri.split('://', 1)[0]}://{user}:{secrets['catalog_password']}@{rest}"
    client = {"receive.message.max.bytes": 1_000_000_000, "sasl.username": "icerouter",
              "sasl.password": secrets["kafka_sasl_password"]}
    config = {
        "kafka": {"bootstrap_servers": bootstrap, "pattern": rf"{prefix}\.orders_.*", "client": client},
        "registry": {"url": registry_url, "basic_auth_user": "icerouter",
                     "basic_auth_password": secrets["registry_password"]},
        "catalog": {"name": "sec", "properties": {
            "type": "sql", "uri": catalog_uri, "warehouse": (tmp / "warehouse").as_uri(),
            "s3.access-key-id": secrets["s3_access_key_id"], "s3.secret-access-key": secrets["s3_secret_key"],
            "credential": f"client:{secrets['catalog_credential']}"}},
        "job": {"name": f"job_{prefix}", "checkpoint": str(tmp / "checkpoint"), "trigger_seconds": 1,
                "status_file": str(tmp / "status.json"), "metrics": {"port": metrics_port, "host": "127.0.0.1"},
                "spark": {"spark.master": "local[2]", "spark.driver.memory": "1g",
                          "spark.eventLog.enabled": "true", "spark.eventLog.dir": (tmp / "events").as_uri(),
                          "spark.eventLog.compress": "false",  # searched as written (the same events)
                          "spark.sql.ui.explainMode": explain_mode,
                          "spark.ui.enabled": "true", "spark.ui.port": str(free_port())}},
        "tables": {"allowed_namespaces": [f"{prefix}_raw", f"{prefix}_ops"]},
        "routes": [{"name": "raw", "topic": rf"{prefix}\.orders_.*", "table": f"{prefix}_raw.{{topic}}"}],
        "dlq": {"table": f"{prefix}_ops.dead_letters", "topic": f"{prefix}.dead_letters"},
    }
    (tmp / "events").mkdir()
    path = tmp / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def secret_registry(tmp_path_factory):
    """The registry emulator requiring basic auth, with this module's password."""
    from router.devstack.registry_server import RegistryServer

    password = f"RegistryPw{uuid.uuid4().hex}"
    server = RegistryServer(port=0, data_file=str(tmp_path_factory.mktemp("sec_registry") / "registry.json"),
                            basic_auth=f"icerouter:{password}")
    server.start()
    yield server.url, password
    server.stop()


@pytest.mark.parametrize("explain_mode", ["formatted", "extended"])
def test_no_secret_shows_on_any_surface_of_a_live_job(tmp_path, kafka_bootstrap, secret_registry, postgres_uri,
                                                      unique_name, explain_mode):
    registry_url, registry_password = secret_registry
    tag = uuid.uuid4().hex
    secrets = {"catalog_password": f"CatalogPw{tag}", "s3_access_key_id": f"AKIA{tag[:16].upper()}",
               "s3_secret_key": f"S3Secret{tag}", "catalog_credential": f"CatalogCred{tag}",
               "registry_password": registry_password, "kafka_sasl_password": f"KafkaSaslPw{tag}"}
    prefix = unique_name("sec")
    topics = [f"{prefix}.orders_a", f"{prefix}.orders_b"]
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics([NewTopic(t, 2, 1) for t in [*topics, f"{prefix}.dead_letters"]]).values():
        future.result(30)
    port = free_port()
    config = _config(tmp_path, prefix, kafka_bootstrap, registry_url, postgres_uri, secrets, explain_mode, port)
    from confluent_kafka.schema_registry import SchemaRegistryClient

    registry = SchemaRegistryClient({"url": registry_url, "basic.auth.user.info": f"icerouter:{registry_password}"})
    from confluent_kafka.schema_registry import Schema

    ids = [registry.register_schema(f"{t}-value", Schema(json.dumps(data.ORDER_V1), "AVRO")) for t in topics]
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for n, topic in enumerate(topics):
        encode = data.Encoder(data.ORDER_V1, ids[n])
        for i in range(20):
            producer.produce(topic, value=encode(data.order(i + 100 * n)), partition=i % 2)
    producer.produce(topics[0], value=b"not framed", partition=0)  # a dead letter, to the table and the topic
    assert producer.flush(30) == 0

    out = tmp_path / "probe"
    out.mkdir()
    job = subprocess.run([sys.executable, "-m", "tests.router.driver.secrets_probe", str(config), str(out), "41",
                          str(port)], capture_output=True, timeout=600,
                         env={**__import__("os").environ, "ICEROUTER_SPARK_LOG_LEVEL": "DEBUG"},
                         cwd=Path(__file__).resolve().parents[3])
    assert (out / "done").exists(), (out / "error.txt").read_text() if (out / "error.txt").exists() else \
        job.stderr[-3000:].decode(errors="replace")
    assert job.returncode == 0, job.stderr[-3000:].decode(errors="replace")

    surfaces: dict[str, bytes] = {"job log (DEBUG)": job.stdout + job.stderr,
                                  "status file": (tmp_path / "status.json").read_bytes()}
    for path in sorted(out.glob("*.txt")) + sorted(out.glob("*.json")):
        surfaces[path.name] = path.read_bytes()
    events = [p for p in (tmp_path / "events").rglob("*") if p.is_file()]
    assert events, "no event log written"
    for path in events:
        surfaces[f"event log {path.name}"] = path.read_bytes()
    schemas = tmp_path / "schemas"
    schemas.mkdir()
    (schemas / f"{topics[0]}.avsc").write_text(json.dumps(data.ORDER_V2))
    for args in (["plan", "--subject", f"{topics[0]}-value"], ["plan", "--subject", f"{topics[0]}-value",
                                                                 "--format", "json"],
                 ["check", "--schemas", str(schemas)], ["check", "--schemas", str(schemas), "--format", "json"],
                 ["check", "--schemas", str(schemas), "--format", "junit"], ["plan", "--subject", "no-such-subject"]):
        result = subprocess.run([sys.executable, "-m", "router.cli", "-v", args[0], "--config", str(config), *args[1:]],
                                capture_output=True, timeout=120)
        assert result.returncode in (0, 1, 2), result.stderr[-2000:]
        surfaces[" ".join(args[:1] + args[-2:])] = result.stdout + result.stderr

    # the surfaces are real: the plan, the progress and the event log describe this job's query, the log
    # holds the job's and Spark's DEBUG lines, and the sealed file shows by its name alone
    assert b"icerouter" in surfaces["explain.txt"] and json.loads(surfaces["progress.json"])["recent"]
    assert b"icerouter-fused" in surfaces["ui_streaming_query_page.txt"] + surfaces["ui_api_sql.txt"]
    event_log = b"".join(v for k, v in surfaces.items() if k.startswith("event log"))
    assert b"SparkListenerSQLExecutionStart" in event_log and b"icerouter-sealed-" in event_log
    job_log = surfaces["job log (DEBUG)"]
    assert b"INFO icerouter.job: " in job_log and re.search(rb"\d\d:\d\d:\d\d DEBUG \w+: ", job_log)
    leaks = {name: sorted(found) for name, blob in surfaces.items() if (found := find_secrets(blob, secrets))}
    assert not leaks, f"secrets shown: {leaks}"
