"""A keyed work queue: one reconcile per key at a time, repeated adds coalesced, retries with backoff,
and adds after a delay (the service's one way of looking at an RSync again later).

The semantics are client-go's: a key added while it is being processed is processed once more after
`done`, never concurrently; adding a key already waiting is a no-op; a key waiting for several delays
is added once, at the earliest (its delaying queue). One thread keeps the time for every delayed key.
"""

from __future__ import annotations

import heapq
import itertools
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from inventory.core.backoff import exponential

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue was shut down; workers should exit."""


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        retry_initial: float = 0.1,
        retry_max: float = 60.0,
        random: Callable[[], float] = random.random,
    ) -> None:
        self._cond = threading.Condition()
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._failures: dict[K, int] = {}
        # Delayed adds: the earliest time each key is due, and a heap of (due, order, key) to find the
        # next (the order keeps keys from being compared); stale heap entries are skipped.
        self._due: dict[K, float] = {}
        self._heap: list[tuple[float, int, K]] = []
        self._order = itertools.count()
        self._timer: threading.Thread | None = None
        self._shutting_down = False
        self._retry_initial = retry_initial
        self._retry_max = retry_max
        self._random = random

    def add(self, key: K) -> None:
        with self._cond:
            if not self._shutting_down:
                self._add_locked(key)

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
                self._cond.notify_all()

    def retry(self, key: K, *, at_least: float | None = None) -> float:
        """Add the key again after a jittered exponential per-key delay, at least `at_least` (the API
        server's Retry-After); returns the delay. Each wait is between the step and twice it, as the
        watches wait (inventory/core/backoff.py), the step doubling from `retry_initial` up to half of
        `retry_max`: RSyncs that failed together (a fault of the API server) are not all retried in the
        same instant, and no wait is longer than `retry_max`."""
        with self._cond:
            failures = self._failures.get(key, 0)
            self._failures[key] = failures + 1
        step = exponential(failures, self._retry_initial, self._retry_max / 2)
        delay = max(step * (1.0 + self._random()), at_least or 0.0)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """The key succeeded: its next failure starts the backoff from the beginning."""
        with self._cond:
            self._failures.pop(key, None)

    def add_after(self, key: K, delay: float) -> None:
        """Add the key once `delay` seconds have passed (at once when not positive); a key already
        waiting keeps the earlier of the two times."""
        if delay <= 0:
            self.add(key)
            return
        due = time.monotonic() + delay
        with self._cond:
            if self._shutting_down or self._due.get(key, due + 1) <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, next(self._order), key))
            if self._timer is None:
                self._timer = threading.Thread(target=self._keep_time, name="workqueue-timer", daemon=True)
                self._timer.start()
            self._cond.notify_all()

    def _keep_time(self) -> None:
        """Move each delayed key into the queue when it falls due."""
        with self._cond:
            while not self._shutting_down:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    due, _, key = heapq.heappop(self._heap)
                    if self._due.get(key) == due:
                        del self._due[key]
                        self._add_locked(key)
                wait = self._heap[0][0] - now if self._heap else None
                self._cond.wait(wait)

    def _add_locked(self, key: K) -> None:
        if key in self._dirty:
            return
        self._dirty.add(key)
        if key not in self._processing:
            self._queue.append(key)
            self._cond.notify_all()

    def shutdown(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._queue.clear()
            self._due.clear()
            self._heap.clear()
            self._cond.notify_all()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)
