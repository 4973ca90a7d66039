"""The one backoff rule (evolution/backoff.py) every retry loop of the product takes its delay from."""
from __future__ import annotations

import math
import random

from evolution.backoff import backoff_delay


def test_without_jitter_the_delay_doubles_up_to_the_cap():
    assert [backoff_delay(n, 1.0, 30.0, jitter=False) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert [backoff_delay(n, 0.2, math.inf, jitter=False) for n in range(3)] == [0.2, 0.4, 0.8]
    assert backoff_delay(200, 0.05, 5.0, jitter=False) == 5.0  # no overflow far out


def test_full_jitter_draws_below_the_same_ceiling_and_spreads():
    random.seed(7)
    for attempt in range(8):
        ceiling = backoff_delay(attempt, 0.05, 1.0, jitter=False)
        draws = [backoff_delay(attempt, 0.05, 1.0) for _ in range(400)]
        assert all(0 <= d <= ceiling for d in draws)
        # uniform over [0, ceiling]: draws land in both halves, the mean near the middle
        assert min(draws) < ceiling / 4 and max(draws) > ceiling * 3 / 4
        assert abs(sum(draws) / len(draws) - ceiling / 2) < ceiling / 10
