"""Cached, retrying access to a Schema Registry (confluent-kafka's client inside).

* Schemas by id / GUID never change: cached for the process lifetime, so a
  running job keeps decoding known schemas while the registry is down.
* ``latest(subject)`` is cached for ``latest_ttl_seconds`` (cachetools
  TTLCache); when a refresh fails transiently the last known value is served.
* Derived artifacts (parsed schema, Iceberg/Arrow shapes, decoder) are built
  once per schema id.
* Transient failures (connection refused, timeouts, 408/429/5xx) are retried
  with full-jitter backoff, then raised as ``RegistryUnavailable``; 404 is
  ``SchemaNotFound`` (terminal).

``get_registry(config)`` returns one client per process and config, so Spark
closures carry only the picklable ``RegistryConfig``.
"""
from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, TypeVar
from urllib.parse import quote

from cachetools import TTLCache
from confluent_kafka.schema_registry import RegisteredSchema, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.common._httpx_compat import httpx  # httpx or httpx2
from confluent_kafka.schema_registry.error import SchemaRegistryError

from evolution.backoff import backoff_delay
from registry.artifacts import SchemaArtifacts, build_artifacts
from registry.config import RegistryConfig
from registry.exceptions import RegistryError, RegistryUnavailable, SchemaNotFound

__all__ = ["CachedRegistry", "Compatibility", "get_registry", "TRANSIENT_STATUS"]

log = logging.getLogger(__name__)
T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
TRANSIENT_EXCEPTIONS = (httpx.TransportError, ConnectionError, TimeoutError, OSError)
LATEST_CACHE_SIZE = 10_000
INVALID_SCHEMA_STATUS = frozenset({400, 422})  # the registry refuses the schema text itself


@dataclass(frozen=True)
class Compatibility:
    """A registry verdict: compatible | incompatible | new (no such subject) | invalid."""

    verdict: str
    level: str | None = None
    messages: tuple[str, ...] = ()
    versions: tuple[int, ...] = ()  # the subject's live versions when it was asked


class CachedRegistry:
    """Thread-safe registry access with id/GUID, latest and artifact caches."""

    def __init__(self, config: RegistryConfig, *, client: SchemaRegistryClient | None = None,
                 sleep: Callable[[float], None] = time.sleep, columnar: bool = True) -> None:
        """``columnar=False`` forces per-record decoding (benchmarks, tests)."""
        self.config = config
        self.columnar = columnar
        self._client = client or SchemaRegistryClient(config.to_client_conf())
        self._sleep = sleep
        self._lock = threading.RLock()
        self._schemas: dict[int | str, Schema] = {}
        self._artifacts: dict[int | str, SchemaArtifacts] = {}
        self._key_locks: dict[Any, threading.Lock] = {}
        self._latest: TTLCache = TTLCache(LATEST_CACHE_SIZE, config.latest_ttl_seconds or 1e-9)
        self._last_known: dict[str, RegisteredSchema] = {}
        self.stats = {"requests": 0, "retries": 0, "stale_served": 0}

    def __repr__(self) -> str:
        return f"CachedRegistry({self.config!r})"

    @property
    def client(self) -> SchemaRegistryClient:
        """The wrapped confluent-kafka client (for registering, admin calls)."""
        return self._client

    # -- retries ------------------------------------------------------------
    def _call(self, fn: Callable[[], T], *, schema_id: int | str | None = None,
              subject: str | None = None) -> T:
        attempts = self.config.retry_attempts
        last: str = ""
        status: int | None = None
        for attempt in range(attempts):
            self.stats["requests"] += 1
            try:
                return fn()
            except SchemaRegistryError as exc:
                status = exc.http_status_code
                if status == 404:
                    raise SchemaNotFound(schema_id=schema_id, subject=subject, status=404,
                                         reason=exc.error_message or "not found") from None
                if status not in TRANSIENT_STATUS:
                    raise RegistryError(
                        f"registry answered {status} for "
                        f"{'schema ' + str(schema_id) if schema_id is not None else subject}: "
                        f"{exc.error_message}", status=status, schema_id=schema_id,
                        subject=subject) from None
                last = f"HTTP {status}: {exc.error_message}"
            except TRANSIENT_EXCEPTIONS as exc:
                last = f"{type(exc).__name__}: {exc}"
                status = None
            if attempt + 1 < attempts:
                self.stats["retries"] += 1
                self._sleep(backoff_delay(attempt, self.config.retry_backoff_seconds,
                                          self.config.retry_backoff_max_seconds))
        raise RegistryUnavailable(last, url=self.config.masked_url, schema_id=schema_id,
                                  subject=subject, attempts=attempts, status=status)

    def _key_lock(self, key: Any) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    # -- schemas ------------------------------------------------------------
    def schema(self, ref: int | str) -> Schema:
        """Registered schema by id (int) or GUID (str); cached forever."""
        cached = self._schemas.get(ref)
        if cached is not None:
            return cached
        with self._key_lock(("schema", ref)):
            cached = self._schemas.get(ref)
            if cached is not None:
                return cached
            if isinstance(ref, str):
                fetch = getattr(self._client, "get_schema_by_guid", None)
                if fetch is None:
                    raise RegistryError("this client cannot resolve schema GUIDs", schema_id=ref)
                schema = self._call(lambda: fetch(ref), schema_id=ref)
            else:
                schema = self._call(lambda: self._client.get_schema(int(ref)), schema_id=ref)
            self._schemas[ref] = schema
            return schema

    def latest(self, subject: str) -> RegisteredSchema:
        """Latest version of ``subject``, at most ``latest_ttl_seconds`` old.

        If the registry is unreachable when the entry expired, the last known
        version is served for another TTL (counted in ``stats['stale_served']``).
        """
        with self._lock:
            hit = self._latest.get(subject)
        if hit is not None:
            return hit
        with self._key_lock(("latest", subject)):
            with self._lock:
                hit = self._latest.get(subject)
            if hit is not None:
                return hit
            try:
                reg = self._call(lambda: self._client.get_version(subject, "latest"),
                                 subject=subject)
            except RegistryUnavailable:
                stale = self._last_known.get(subject)
                if stale is None:
                    raise
                self.stats["stale_served"] += 1
                log.warning("registry unreachable, serving cached latest of %s", subject)
                with self._lock:   # do not hammer a registry that is down: retry after a TTL
                    self._latest[subject] = stale
                return stale
            with self._lock:
                self._latest[subject] = reg
                self._last_known[subject] = reg
            if reg.schema_id is not None:
                self._schemas.setdefault(reg.schema_id, reg.schema)
            return reg

    def version(self, subject: str, version: int | str = "latest") -> RegisteredSchema:
        """One version of ``subject`` (``latest`` goes through the TTL cache)."""
        if version == "latest":
            return self.latest(subject)
        reg = self._call(lambda: self._client.get_version(subject, int(version)), subject=subject)
        if reg.schema_id is not None:
            self._schemas.setdefault(reg.schema_id, reg.schema)
        return reg

    def compatibility(self, subject: str, schema_str: str, schema_type: str = "AVRO") -> Compatibility:
        """The registry's verdict on registering ``schema_str`` under ``subject``.

        Only the per-version endpoint is used (``/compatibility/subjects/{s}/versions/{v}``):
        it is the one every Confluent-API registry serves. ``latest`` for the plain
        levels, every live version for the ``*_TRANSITIVE`` ones, at the subject's
        level (the global level when the subject has none).
        Raises ``RegistryUnavailable`` (transient) or ``RegistryError`` (e.g. 401).
        """
        try:
            versions = tuple(self._call(lambda: self._client.get_versions(subject), subject=subject))
        except SchemaNotFound:
            return Compatibility("new")
        level = self.compatibility_level(subject)
        targets = versions if level.upper().endswith("_TRANSITIVE") else ("latest",)
        body = Schema(schema_str, schema_type).to_dict()
        messages: list[str] = []
        compatible = True
        for version in targets:
            path = (f"compatibility/subjects/{quote(subject, safe='')}/versions/{version}"
                    "?verbose=true")
            try:
                answer = self._call(lambda: self._client._rest_client.post(path, body=body), subject=subject)
            except RegistryError as exc:
                if getattr(exc, "status", None) in INVALID_SCHEMA_STATUS:
                    return Compatibility("invalid", level, (exc.message,), versions)
                raise
            if not answer.get("is_compatible"):
                compatible = False
                label = f"version {versions[-1] if version == 'latest' else version}"
                messages += [f"{label}: {m}" for m in answer.get("messages") or ()] or [f"{label}: incompatible"]
        return Compatibility("compatible" if compatible else "incompatible", level, tuple(messages), versions)

    def compatibility_level(self, subject: str) -> str:
        """The subject's compatibility level, or the global one when the subject has none."""
        try:
            return self._call(lambda: self._client.get_compatibility(subject), subject=subject)
        except SchemaNotFound:  # 40401 / 40408: no subject-level config
            return self._call(lambda: self._client.get_compatibility(), subject=subject)

    def _references(self, schema: Schema, ref: int | str, depth: int = 0) -> list[tuple[str, str]]:
        """(reference name, schema text) of everything ``schema`` references, dependencies first.

        The name is what the referencing schema calls it: a Protobuf import path, an Avro
        type name."""
        out: list[tuple[str, str]] = []
        if depth > 32:
            raise RegistryError("schema references nested too deeply", schema_id=ref)
        for r in getattr(schema, "references", None) or []:
            reg = self._call(lambda r=r: self._client.get_version(r.subject, r.version),
                             schema_id=ref, subject=r.subject)
            out.extend(self._references(reg.schema, ref, depth + 1))
            out.append((r.name, reg.schema.schema_str))
        return out

    def artifacts(self, ref: int | str) -> SchemaArtifacts:
        """Parsed schema, Iceberg/Arrow shapes and decoder for ``ref``; built once."""
        cached = self._artifacts.get(ref)
        if cached is not None:
            return cached
        schema = self.schema(ref)
        with self._key_lock(("artifacts", ref)):
            cached = self._artifacts.get(ref)
            if cached is not None:
                return cached
            refs = self._references(schema, ref)
            if (schema.schema_type or "AVRO").upper() != "PROTOBUF":
                refs = [text for _, text in refs]  # Avro references are inlined by their text
            art = build_artifacts(ref, schema.schema_type, schema.schema_str, refs,
                                  columnar=self.columnar)
            self._artifacts[ref] = art
            return art

    def clear(self) -> None:
        """Drop every cache (tests, or after a registry hard-delete)."""
        with self._lock:
            self._schemas.clear()
            self._artifacts.clear()
            self._latest.clear()
            self._last_known.clear()


_REGISTRIES: dict[RegistryConfig, CachedRegistry] = {}
_REGISTRIES_LOCK = threading.Lock()


def get_registry(config: RegistryConfig) -> CachedRegistry:
    """The per-process CachedRegistry for ``config`` (built on first use)."""
    reg = _REGISTRIES.get(config)
    if reg is not None:
        return reg
    with _REGISTRIES_LOCK:
        reg = _REGISTRIES.get(config)
        if reg is None:
            reg = CachedRegistry(config)
            _REGISTRIES[config] = reg
        return reg
