"""RegistryConfig validation, masking, pickling; every registry error pickles intact."""
from __future__ import annotations

import logging
import pickle

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from registry.config import MASK, RegistryConfig
from registry.exceptions import (
    DecodeError, RegistryConfigError, RegistryError, RegistryUnavailable, SchemaNotFound,
    UnsupportedSchemaType, WireFormatError,
)

SECRET = "s3cr3t-Pa55"


def _full_config() -> RegistryConfig:
    return RegistryConfig(url="https://registry.example:8081", basic_auth_user="svc",
                          basic_auth_password=SECRET, ssl_ca_location="/etc/ca.pem",
                          ssl_certificate_location="/etc/c.pem", ssl_key_location="/etc/k.pem",
                          ssl_key_password=SECRET + "key", latest_ttl_seconds=30)


def test_secrets_never_in_repr_str_or_logs(caplog):
    cfg = _full_config()
    for text in (repr(cfg), str(cfg), f"{cfg}", f"{cfg!r}"):
        assert SECRET not in text and MASK in text and "svc" in text
    with caplog.at_level(logging.INFO):
        logging.getLogger("t").info("config %s", cfg)
    assert SECRET not in caplog.text
    userinfo = RegistryConfig(url=f"http://svc:{SECRET}@host:8081")
    assert SECRET not in repr(userinfo) and "svc:***@host" in repr(userinfo)


def test_config_pickles_and_hashes():
    cfg = _full_config()
    back = pickle.loads(pickle.dumps(cfg))
    assert back == cfg and hash(back) == hash(cfg)
    assert back.basic_auth_password == SECRET     # masking is display-only


def test_to_client_conf_is_accepted_by_confluent_client():
    cfg = RegistryConfig(url="http://127.0.0.1:1", basic_auth_user="u", basic_auth_password="p",
                         request_timeout_seconds=3)
    conf = cfg.to_client_conf()
    assert conf == {"url": "http://127.0.0.1:1", "timeout": 3, "max.retries": 0,
                    "basic.auth.user.info": "u:p"}
    SchemaRegistryClient(conf).close()


def test_from_dict_defaults_and_validation():
    cfg = RegistryConfig.from_dict({"url": "http://r:8081", "latest_ttl_seconds": 5})
    assert cfg.latest_ttl_seconds == 5 and cfg.retry_attempts == 3
    assert RegistryConfig(url="http://r").latest_ttl_seconds == 60
    cases = [
        ({"url": "http://r", "ttl": 5}, "unknown key(s) 'ttl'"),
        ({}, "url is required"),
        ({"url": "ftp://r"}, "http:// or https://"),
        ({"url": "http://r", "basic_auth_user": "u"}, "go together"),
        ({"url": "http://r", "ssl_key_location": "/k"}, "ssl_certificate_location"),
        ({"url": "http://r", "retry_attempts": 0}, "integer >= 1"),
        ({"url": "http://r", "latest_ttl_seconds": -1}, "number >= 0"),
        ({"url": "http://r", "request_timeout_seconds": "10"}, "number >= 0"),
    ]
    for data, message in cases:
        with pytest.raises(RegistryConfigError) as err:
            RegistryConfig.from_dict(data)
        assert message in str(err.value)
    with pytest.raises(RegistryConfigError):
        RegistryConfig.from_dict(["url"])


ERRORS = [
    RegistryUnavailable("connection refused", url="http://r", schema_id=7, attempts=3, status=None),
    SchemaNotFound(schema_id=7),
    SchemaNotFound(subject="orders-value"),
    UnsupportedSchemaType("only AVRO and JSON", schema_id=3, schema_type="PROTOBUF"),
    WireFormatError("unknown magic byte 0x07", index=4, topic="t", partition=1, offset=99),
    DecodeError("EOF", schema_id=7, topic="t", partition=2, offset=1234, index=5),
    RegistryConfigError("url is required", key="url"),
    RegistryError("plain", status=401),
]


@pytest.mark.parametrize("err", ERRORS, ids=lambda e: type(e).__name__)
def test_errors_pickle_with_attributes(err):
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is type(err)
    assert str(back) == str(err)
    assert back.attrs == err.attrs
    assert back.transient == err.transient
    assert isinstance(back, RegistryError)


def test_transient_flags_and_attributes():
    assert RegistryUnavailable("x").transient is True
    assert SchemaNotFound(schema_id=1).transient is False
    assert DecodeError("x").transient is False and WireFormatError("x").transient is False
    e = DecodeError("bad union index", schema_id=9, topic="orders", partition=3, offset=42)
    assert (e.topic, e.partition, e.offset, e.schema_id, e.reason) == ("orders", 3, 42, 9,
                                                                      "bad union index")
    assert "orders[3]@42" in str(e)
