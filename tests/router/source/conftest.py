"""Fixtures of the source tests; the Spark session (``spark``) and the broker fixtures
(``kafka_bootstrap``, ``kafka_client_config``) come from tests/conftest.py."""

from __future__ import annotations

import uuid

import pytest


@pytest.fixture
def uid() -> str:
    """A short unique prefix so topics never collide between tests or runs."""
    return uuid.uuid4().hex[:8]
