"""One answer to "is this error transient?" (router/exceptions.py)."""

from __future__ import annotations

import pickle
import sqlite3

import pytest
import sqlalchemy.exc
from confluent_kafka import KafkaError, KafkaException

from evolution.exceptions import ApplyError, UnsupportedSchemaError
from registry.exceptions import RegistryUnavailable, SchemaNotFound
from router.exceptions import (
    TRANSIENT_MARK, ConfigError, TransientError, crossing_process_boundary, is_transient,
)
from router.source.exceptions import BrokerError, OffsetsError


def chained(outer: Exception, inner: Exception) -> Exception:
    try:
        try:
            raise inner
        except Exception as exc:
            raise outer from exc
    except Exception as exc:
        return exc


@pytest.mark.parametrize("exc, expected", [
    (RegistryUnavailable("down", schema_id=1, attempts=3), True),
    (SchemaNotFound(schema_id=1), False),
    (ApplyError("stale"), True),
    (UnsupportedSchemaError("recursive"), False),
    (BrokerError("no leader"), True),
    (OffsetsError("bad json"), False),
    (ConfigError("typo"), False),
    (ConnectionRefusedError(111, "Connection refused"), True),
    (sqlalchemy.exc.OperationalError("commit", {}, sqlite3.OperationalError("database is locked")), True),
    (KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)), True),
    (KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)), False),
    (ValueError("Connection refused"), False),  # words in a message decide nothing
])
def test_verdict_comes_from_the_error_class(exc, expected):
    assert is_transient(exc) is expected


def test_the_cause_chain_is_walked_until_an_error_knows():
    outage = sqlalchemy.exc.OperationalError("select", {}, sqlite3.OperationalError("unable to open database"))
    assert is_transient(chained(RuntimeError("commit failed"), outage))
    assert not is_transient(chained(ConfigError("bad"), outage))  # our own verdict comes first
    assert not is_transient(chained(RuntimeError("x"), KeyError("y")))


def test_a_task_marks_transient_errors_for_the_driver():
    with pytest.raises(TransientError) as info:
        with crossing_process_boundary():
            raise RegistryUnavailable("connection refused", schema_id=7, attempts=3)
    text = str(info.value)
    assert text.startswith(TRANSIENT_MARK) and text.count("registry unavailable") == 1
    assert isinstance(info.value.__cause__, RegistryUnavailable)
    assert is_transient(pickle.loads(pickle.dumps(info.value)))
    with pytest.raises(SchemaNotFound):  # a permanent error leaves unchanged
        with crossing_process_boundary():
            raise SchemaNotFound(schema_id=7)


def test_spark_hands_the_driver_text_only():
    from pyspark.errors.exceptions.base import PythonException  # what the captured one derives from

    def captured(text: str) -> PythonException:
        return PythonException(message=text)

    assert is_transient(captured(f"router.exceptions.TransientError: {TRANSIENT_MARK} RegistryUnavailable: x"))
    assert not is_transient(captured("ValueError: Connection refused"))
