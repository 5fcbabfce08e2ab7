"""Exponential backoff, the one rule every retry of the service follows: the n-th retry waits
`initial x 2^n`, capped at `maximum` (the work queue's retries). Watches wait as client-go's reflector
does (each wait between the step and twice it, the step doubling up to 30 s, starting over only after two
quiet minutes) from twice its first step (1.6 s, not 0.8 s): until both steps reach the cap (about a
minute into a fault) our n-th retry never comes before client-go's, and after it both wait 30 to 60 s,
so under a fault we ask at most as often as client-go's informers. The jitter keeps many clients from
retrying in step, its lower bound keeps the rate under a fault bounded whatever the draws, and a fault
that lets one request through between failures still meets a growing delay. A server that says when to
come back (`Retry-After`) is waited for at least that long."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass


def exponential(attempt: int, initial: float, maximum: float) -> float:
    """The delay before retry number `attempt` (0 for the first)."""
    return min(maximum, initial * 2.0 ** min(attempt, 64))


@dataclass
class Backoff:
    """Exponential backoff, each wait between the step (at most `maximum`) and twice it, as client-go's
    reflector waits; `random` and `clock` are injected so tests are deterministic. After `quiet_s` without
    a failure the next one starts from `initial` again."""

    initial: float
    maximum: float
    random: Callable[[], float] = random.random
    quiet_s: float = 120.0
    clock: Callable[[], float] = time.monotonic
    attempt: int = 0
    _last_failure: float | None = None

    def next_delay(self, retry_after: float | None = None) -> float:
        """The wait after a failure: jittered and growing, at least what the server asked for."""
        now = self.clock()
        if self._last_failure is not None and now - self._last_failure >= self.quiet_s:
            self.attempt = 0
        self._last_failure = now
        step = exponential(self.attempt, self.initial, self.maximum)
        self.attempt += 1
        return max(step * (1.0 + self.random()), retry_after or 0.0)

    def reset(self) -> None:
        self.attempt = 0
