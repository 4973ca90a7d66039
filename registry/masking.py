"""Passwords out of URLs before a URL reaches a repr, a log line or an error message.

One function for the registry's settings (registry/config.py) and the router's
(router/masking.py); registry/ is the lowest package that prints URLs. Each
caller passes its own mask.
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit, urlunsplit

__all__ = ["SECRET_KEY_PATTERN", "mask_url"]

#: Setting names and URL query parameters whose values are secrets.
SECRET_KEY_PATTERN = re.compile(r"(password|secret|token|credential|private|sasl\.jaas|key\.pem|ssl\.key)", re.I)


def mask_url(url: str, mask: str) -> str:
    """``scheme://user:password@host/...`` with the password (and secret query values) replaced by `mask`."""
    parts = urlsplit(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        netloc = f"{userinfo.split(':', 1)[0]}:{mask}@{host}" if ":" in userinfo else netloc
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    query = parts.query
    if any(SECRET_KEY_PATTERN.search(k) for k, _ in pairs):
        query = "&".join(f"{k}={mask if SECRET_KEY_PATTERN.search(k) else v}" for k, v in pairs)
    if netloc == parts.netloc and query == parts.query:
        return url  # nothing secret (and sqlite:////path would not survive a round trip)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
