"""How long to wait before the next retry: exponential backoff with full jitter, in one place.

Every retry loop of the product (catalog commits and schema commits, registry
requests, broker metadata, the driver's outage waits) takes its delay from
here and keeps its own base and cap. The delay is returned, not slept, so
callers sleep the way they must (an injectable sleep, a log line first).
It lives in evolution/, the lowest layer, so registry/ and router/ can share it;
it computes only.
"""
from __future__ import annotations

import random

__all__ = ["backoff_delay"]


def backoff_delay(attempt: int, base: float, cap: float, *, jitter: bool = True) -> float:
    """Seconds before retry `attempt` (0 for the first): ``min(cap, base * 2**attempt)``.

    With `jitter` (full jitter) a uniform draw in ``[0, that]``, so many workers
    retrying one service spread out instead of colliding again; without it the
    ceiling itself, for a single waiter that logs what it waits.
    """
    ceiling = min(cap, base * (2 ** attempt))
    return random.uniform(0, ceiling) if jitter else ceiling
