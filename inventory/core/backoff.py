"""Exponential backoff, the one rule every retry of the service follows: the n-th retry waits
`initial x 2^n`, capped at `maximum` (the work queue's retries); watches add full jitter so many clients do
not retry in step."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass


def exponential(attempt: int, initial: float, maximum: float) -> float:
    """The delay before retry number `attempt` (0 for the first)."""
    return min(maximum, initial * 2.0 ** min(attempt, 64))


@dataclass
class Backoff:
    """Exponential backoff with full jitter; `random` is injected so tests are deterministic."""

    initial: float
    maximum: float
    random: Callable[[], float] = random.random
    attempt: int = 0

    def next_delay(self) -> float:
        ceiling = exponential(self.attempt, self.initial, self.maximum)
        self.attempt += 1
        return ceiling * self.random()

    def reset(self) -> None:
        self.attempt = 0
