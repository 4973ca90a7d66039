"""Reaching the schema registry and the Iceberg catalog from `plan` and `check`.

Why a module of its own: a service that cannot be reached (refused, timed out,
DNS, 5xx after retries, 401) means "could not decide" (exit 3), never
"blocked" (exit 1), and the message must say which service and where, with
credentials masked. Both commands go through these helpers so they agree.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError
from pyiceberg.schema import Schema

from evolution.layout import TableLayout
from registry.exceptions import RegistryError
from router.catalog import get_catalog
from router.config import CatalogConfig
from router.exceptions import ServiceUnavailable, is_transient
from router.masking import MASK, SECRET_KEY_PATTERN, mask_url

__all__ = ["CatalogReader", "registry_unavailable", "unreachable"]


def unreachable(exc: BaseException) -> bool:
    """The catalog could not be asked: a connection error (router/exceptions.py decides) or any I/O error."""
    return is_transient(exc) or isinstance(exc, OSError)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _secrets(config: CatalogConfig) -> tuple[str, ...]:
    """Secret values of a catalog config: secret-looking properties and the URI's password."""
    values = [str(v) for k, v in config.properties.items() if SECRET_KEY_PATTERN.search(str(k)) and v]
    netloc = urlsplit(str(config.properties.get("uri", ""))).netloc
    if "@" in netloc and ":" in netloc.rsplit("@", 1)[0]:
        values.append(netloc.rsplit("@", 1)[0].split(":", 1)[1])
    return tuple(v for v in values if len(v) >= 3)


def registry_unavailable(exc: RegistryError, url: str) -> ServiceUnavailable:
    """A registry failure that is not about the schema (unreachable, 5xx, 401...) as "could not decide"."""
    status = getattr(exc, "status", None)
    reason = getattr(exc, "reason", None) or exc.message
    if exc.transient:
        what = f"could not reach the schema registry at {mask_url(url)}: {reason}"
    else:
        what = f"the schema registry at {mask_url(url)} answered {status or 'an error'}: {reason}"
    return ServiceUnavailable(what, service="schema registry", url=mask_url(url))


class CatalogReader:
    """Read-only catalog access for plan/check: current table schemas, reachability errors mapped."""

    def __init__(self, catalog: Any, url: str = "", name: str = "", secrets: tuple[str, ...] = ()) -> None:
        self.catalog, self.url, self.name = catalog, url, name or getattr(catalog, "name", "")
        self.secrets = secrets

    @classmethod
    def open(cls, config: CatalogConfig) -> CatalogReader:
        """The catalog as it is: one that does not exist is not created (router.catalog.get_catalog)."""
        try:
            return cls(get_catalog(config, create=False), config.url, config.name, _secrets(config))
        except ServiceUnavailable:
            raise
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise cls._unavailable(config.url, config.name, exc, _secrets(config)) from None

    @staticmethod
    def _unavailable(url: str, name: str, exc: BaseException, secrets: tuple[str, ...] = ()) -> ServiceUnavailable:
        reason = _first_line(exc)
        for secret in secrets:  # drivers may echo connection details
            reason = reason.replace(secret, MASK)
        return ServiceUnavailable(f"could not reach the Iceberg catalog {name!r} at {url or '<unknown>'}: {reason}",
                                  service="Iceberg catalog", url=url)

    def current(self, identifier: str) -> Schema | None:
        """The table's schema, None when it does not exist yet."""
        return self.state(identifier)[0]

    def format_version(self, identifier: str) -> int | None:
        """The table's Iceberg format version, None when it does not exist yet."""
        metadata = self._metadata(identifier)
        return int(metadata.format_version) if metadata is not None else None

    def state(self, identifier: str) -> tuple[Schema | None, TableLayout | None]:
        """The table's schema and layout (partition spec, sort order); (None, None) when it does not exist."""
        metadata = self._metadata(identifier)
        return (metadata.schema(), TableLayout.of(metadata)) if metadata is not None else (None, None)

    def _metadata(self, identifier: str):
        try:
            return self.catalog.load_table(identifier).metadata
        except (NoSuchTableError, NoSuchNamespaceError):
            return None
        except Exception as exc:
            if not unreachable(exc):
                raise
            raise self._unavailable(self.url, self.name, exc, self.secrets) from None
