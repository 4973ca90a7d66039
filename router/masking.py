"""Secrets never leave the process in a repr, a log line or an error message.

Config values whose key looks secret are masked, and so are passwords in URLs
(``scheme://user:password@host``) and secret-looking query parameters; the URL
rule is registry/masking.py's, shared with the registry settings.
"""

from __future__ import annotations

from typing import Any, Mapping

import registry.masking
from registry.masking import SECRET_KEY_PATTERN

__all__ = ["MASK", "SECRET_KEY_PATTERN", "mask_secrets", "mask_url"]

MASK = "******"


def mask_secrets(values: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a settings mapping with secret-looking values replaced by a mask."""
    return {k: (MASK if SECRET_KEY_PATTERN.search(str(k)) else v) for k, v in values.items()}


def mask_url(url: str) -> str:
    """``scheme://user:password@host/...`` with the password (and secret query values) masked."""
    return registry.masking.mask_url(url, MASK)
