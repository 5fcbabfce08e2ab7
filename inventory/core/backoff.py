"""Exponential backoff, the one rule every retry of the service follows: the n-th retry waits
`initial x 2^n`, capped at `maximum`; watches add full jitter so many clients do not retry in step."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


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


def with_retries(
    call: Callable[[], T],
    *,
    retry_on: tuple[type[Exception], ...],
    attempts: int,
    initial: float,
    maximum: float,
    sleep: Callable[[float], None],
    on_retry: Callable[[Exception], None] = lambda error: None,
) -> T:
    """`call()`, retried with exponential backoff while it raises one of `retry_on`; the last such error
    is raised when every attempt failed, any other error at once."""
    for attempt in range(attempts):
        try:
            return call()
        except retry_on as error:
            on_retry(error)
            if attempt + 1 == attempts:
                raise
            sleep(exponential(attempt, initial, maximum))
    raise ValueError(f"attempts must be at least 1, got {attempts}")
