"""The registry emulator with TLS and HTTP basic auth, in-process and as a subprocess."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.error import SchemaRegistryError

from router.devstack.registry_server import RegistryServer
from tests.router.devstack.registry_helpers import avro, http, rec


def _self_signed(tmp_path) -> tuple[str, str]:
    cert, key = str(tmp_path / "cert.pem"), str(tmp_path / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return cert, key


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")
def test_tls_and_basic_auth(tmp_path, unique_name):
    cert, key = _self_signed(tmp_path)
    with RegistryServer(data_file=str(tmp_path / "r.json"), tls_cert=cert, tls_key=key,
                        basic_auth="alice:s3cret-pw") as srv:
        assert srv.url.startswith("https://")
        assert "s3cret-pw" not in repr(srv)
        good = SchemaRegistryClient({"url": srv.url, "ssl.ca.location": cert,
                                     "basic.auth.user.info": "alice:s3cret-pw"})
        subject = unique_name("tls")
        sid = good.register_schema(subject, avro(rec(("a", "int"))))
        assert good.get_latest_version(subject).schema_id == sid
        bad = SchemaRegistryClient({"url": srv.url, "ssl.ca.location": cert,
                                    "basic.auth.user.info": "alice:wrong"})
        with pytest.raises(SchemaRegistryError) as err:
            bad.get_subjects()
        assert (err.value.http_status_code, err.value.error_code) == (401, 401)
        anonymous = SchemaRegistryClient({"url": srv.url, "ssl.ca.location": cert})
        with pytest.raises(SchemaRegistryError) as err:
            anonymous.get_subjects()
        assert err.value.http_status_code == 401
        # an unverified client must not get through either
        untrusted = SchemaRegistryClient({"url": srv.url, "basic.auth.user.info": "alice:s3cret-pw"})
        with pytest.raises(Exception):
            untrusted.get_subjects()


def test_subprocess_mode_with_basic_auth(tmp_path, unique_name):
    from router.devstack._proc import free_port, stop_pid

    port = free_port()
    log_path = tmp_path / "registry.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "router.devstack.registry_server", "--port", str(port),
                                 "--data-file", str(tmp_path / "r.json"), "--basic-auth", "bob:hunter22"],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        url = f"http://127.0.0.1:{port}"
        client = SchemaRegistryClient({"url": url, "basic.auth.user.info": "bob:hunter22"})
        deadline = time.monotonic() + 20
        while True:
            try:
                client.get_subjects()
                break
            except Exception:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        subject = unique_name("sub")
        assert client.register_schema(subject, avro(rec(("a", "int")))) >= 1
        status, body = http(f"{url}/subjects")
        assert (status, body["error_code"]) == (401, 401)
    finally:
        assert stop_pid(proc.pid)
    assert proc.wait(5) is not None
    assert "hunter22" not in log_path.read_text()
    assert subject in json.loads((tmp_path / "r.json").read_text())["subjects"]
