"""A registry emulator per test module, for the tests of the emulator itself."""

from __future__ import annotations

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from router.devstack.registry_server import RegistryServer


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = RegistryServer(port=0, data_file=str(tmp_path_factory.mktemp("reg") / "registry.json"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return SchemaRegistryClient({"url": server.url})
