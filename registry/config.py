"""Schema Registry connection settings.

A frozen, hashable, picklable dataclass: it is what travels to Spark executors
(never a live client) and it keys the per-process client singleton. Secrets
are masked in ``repr``/``str`` so configs can be logged safely.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from registry.exceptions import RegistryConfigError
from registry.masking import mask_url

__all__ = ["RegistryConfig", "MASK"]

MASK = "***"
SECRET_FIELDS = frozenset({"basic_auth_password", "ssl_key_password"})


@dataclass(frozen=True)
class RegistryConfig:
    """How to reach one Schema Registry and how hard to try."""

    url: str
    basic_auth_user: str | None = None
    basic_auth_password: str | None = field(default=None, repr=False)
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    latest_ttl_seconds: float = 60.0
    request_timeout_seconds: float = 10.0
    retry_attempts: int = 3
    retry_backoff_seconds: float = 0.2
    retry_backoff_max_seconds: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.strip():
            raise RegistryConfigError("url is required", key="url")
        for url in self.url.split(","):
            if not url.strip().startswith(("http://", "https://")):
                raise RegistryConfigError(f"url must start with http:// or https://, got "
                                          f"{mask_url(url.strip(), MASK)!r}", key="url")
        if (self.basic_auth_user is None) != (self.basic_auth_password is None):
            raise RegistryConfigError("basic_auth_user and basic_auth_password go together",
                                      key="basic_auth_user")
        if (self.ssl_key_location or self.ssl_key_password) and not self.ssl_certificate_location:
            raise RegistryConfigError("ssl_key_location needs ssl_certificate_location",
                                      key="ssl_certificate_location")
        for name in ("latest_ttl_seconds", "request_timeout_seconds", "retry_backoff_seconds",
                     "retry_backoff_max_seconds"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise RegistryConfigError(f"must be a number >= 0, got {value!r}", key=name)
        if (isinstance(self.retry_attempts, bool) or not isinstance(self.retry_attempts, int)
                or self.retry_attempts < 1):
            raise RegistryConfigError(f"must be an integer >= 1, got {self.retry_attempts!r}",
                                      key="retry_attempts")

    def __repr__(self) -> str:
        parts = []
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in SECRET_FIELDS:
                value = None if value is None else MASK
            elif f.name == "url":
                value = self.masked_url
            parts.append(f"{f.name}={value!r}")
        return f"RegistryConfig({', '.join(parts)})"

    __str__ = __repr__

    @property
    def masked_url(self) -> str:
        """`url` (one or several, comma-separated) with every password masked, for reprs and errors."""
        return ",".join(mask_url(u.strip(), MASK) for u in self.url.split(","))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RegistryConfig":
        """Build from YAML/JSON config; unknown keys are rejected by name."""
        if not isinstance(data, Mapping):
            raise RegistryConfigError(f"expected a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise RegistryConfigError(
                f"unknown key(s) {', '.join(map(repr, unknown))}; allowed: {', '.join(sorted(known))}",
                key=unknown[0])
        if "url" not in data:
            raise RegistryConfigError("url is required", key="url")
        return cls(**dict(data))

    def to_dict(self) -> dict[str, Any]:
        """Plain dict including secrets (for building clients, never for logs)."""
        return dataclasses.asdict(self)

    def to_client_conf(self) -> dict[str, Any]:
        """Configuration for confluent_kafka's SchemaRegistryClient.

        Retries are ours (jittered, counted, mapped to RegistryUnavailable), so
        the client's own retry loop is switched off.
        """
        conf: dict[str, Any] = {
            "url": self.url,
            "timeout": self.request_timeout_seconds,
            "max.retries": 0,
        }
        if self.basic_auth_user is not None:
            conf["basic.auth.user.info"] = f"{self.basic_auth_user}:{self.basic_auth_password}"
        if self.ssl_ca_location:
            conf["ssl.ca.location"] = self.ssl_ca_location
        if self.ssl_certificate_location:
            conf["ssl.certificate.location"] = self.ssl_certificate_location
        if self.ssl_key_location:
            conf["ssl.key.location"] = self.ssl_key_location
        if self.ssl_key_password:
            conf["ssl.key.password"] = self.ssl_key_password
        return conf
