"""Secrets never leave the process in a repr, a log line or an error message.

Config values whose key looks secret are masked, and so are passwords in URLs
(``scheme://user:password@host``) and secret-looking query parameters.
"""

from __future__ import annotations

import re
from typing import Any, Mapping
from urllib.parse import parse_qsl, urlsplit, urlunsplit

SECRET_KEY_PATTERN = re.compile(r"(password|secret|token|credential|private|sasl\.jaas|key\.pem|ssl\.key)", re.I)
MASK = "******"


def mask_secrets(values: Mapping[str, Any]) -> dict[str, Any]:
    """Copy of a settings mapping with secret-looking values replaced by a mask."""
    return {k: (MASK if SECRET_KEY_PATTERN.search(str(k)) else v) for k, v in values.items()}


def mask_url(url: str) -> str:
    """``scheme://user:password@host/...`` with the password (and secret query values) masked."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{MASK}@{host}" if ":" in userinfo else netloc
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query
    if any(SECRET_KEY_PATTERN.search(k) for k, _ in pairs):
        query = "&".join(f"{k}={MASK if SECRET_KEY_PATTERN.search(k) else v}" for k, v in pairs)
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret (and sqlite:////path would not survive a round trip)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
