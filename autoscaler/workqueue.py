"""A keyed work queue: one reconcile per key at a time, repeated adds coalesced, retries with backoff.

The semantics are client-go's: a key added while it is being processed is processed once more after
`done`, never concurrently; adding a key already waiting is a no-op.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Hashable
from typing import Generic, TypeVar

from inventory.backoff import exponential

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue(Generic[K]):
    def __init__(self, *, retry_initial: float = 0.1, retry_max: float = 60.0) -> None:
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._failures: dict[K, int] = {}
        self._timers: set[threading.Timer] = set()
        self._shutting_down = False
        self._retry_initial = retry_initial
        self._retry_max = retry_max

    def add(self, key: K) -> None:
        with self._cond:
            if self._shutting_down or key in self._dirty:
                return
            self._dirty.add(key)
            if key not in self._processing:
                self._queue.append(key)
                self._cond.notify()

    def get(self, timeout: float | None = None) -> K | None:
        """The next key to process (None on timeout); raises ShutDown once shut down and drained."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._queue or self._shutting_down, timeout):
                return None
            if not self._queue:
                raise ShutDown
            key = self._queue.popleft()
            self._dirty.discard(key)
            self._processing.add(key)
            return key

    def done(self, key: K) -> None:
        with self._cond:
            self._processing.discard(key)
            if key in self._dirty:
                self._queue.append(key)
                self._cond.notify()

    def retry(self, key: K) -> float:
        """Add the key again after an exponential per-key delay; returns the delay."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        delay = exponential(failures, self._retry_initial, self._retry_max)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        with self._cond:
            self._failures.pop(key, None)

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return

        def fire() -> None:
            with self._cond:
                self._timers.discard(timer)
            self.add(key)

        timer = threading.Timer(delay, fire)
        timer.daemon = True
        with self._cond:
            if self._shutting_down:
                return
            self._timers.add(timer)
        timer.start()

    def shutdown(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._queue.clear()
            for timer in self._timers:
                timer.cancel()
            self._timers.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
