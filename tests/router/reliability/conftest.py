"""Fixtures of the reliability tests: a registry over TLS with basic auth, module-wide work dirs."""

from __future__ import annotations

import shutil
import uuid

import pytest

from scripts.reliability.helpers import self_signed_certificate


@pytest.fixture(scope="module")
def secure_registry(tmp_path_factory):
    """(registry config section with ${ENV} password, env, password): TLS + basic auth emulator."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed")
    from router.devstack.registry_server import RegistryServer

    workdir = tmp_path_factory.mktemp("secure_registry")
    cert, key = self_signed_certificate(workdir)
    password = f"Pw-{uuid.uuid4().hex}"
    with RegistryServer(data_file=str(workdir / "registry.json"), tls_cert=cert, tls_key=key,
                        basic_auth=f"icerouter:{password}") as server:
        section = {"url": server.url, "basic_auth_user": "icerouter",
                   "basic_auth_password": "${RELIABILITY_REGISTRY_PASSWORD}", "ssl_ca_location": cert}
        yield section, {"RELIABILITY_REGISTRY_PASSWORD": password}, password
