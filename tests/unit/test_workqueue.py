"""The work queue: the service's one way of looking at an RSync again later. Waits are bounded by
`get(timeout=...)` (the key arrives as soon as it is due); nothing here sleeps a fixed time."""

from __future__ import annotations

import pytest

from autoscaler.service.workqueue import ShutDown, WorkQueue

SOON = 0.01
LATER = 3600.0
BOUND = 10.0  # the longest a due key may take to arrive before the test fails


def test_a_delayed_key_arrives_once_due() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", SOON)
    assert queue.get(timeout=BOUND) == "a"


def test_a_key_waiting_for_two_delays_comes_at_the_earlier_once() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", LATER)
    queue.add_after("a", SOON)
    queue.add_after("a", LATER)  # later than what it waits for: changes nothing
    assert queue.get(timeout=BOUND) == "a"
    queue.done("a")
    assert queue.get(timeout=0) is None, "the later times were folded into the earlier"


def test_delayed_keys_come_in_the_order_they_fall_due() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("late", LATER)
    queue.add_after("soon", SOON)
    assert queue.get(timeout=BOUND) == "soon"
    assert queue.get(timeout=0) is None


def test_a_key_due_while_it_is_processed_is_processed_again_after_done() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add("a")
    assert queue.get(timeout=0) == "a"
    queue.add_after("a", SOON)
    queue.add("b")
    assert queue.get(timeout=BOUND) == "b", "never the same key to two workers"
    queue.done("b")
    queue.done("a")
    assert queue.get(timeout=BOUND) == "a"


def test_a_key_that_changes_all_the_time_takes_its_turn_and_no_more() -> None:
    """Fair to many RSyncs (issue 61): one RSync whose inventory changes a hundred times while it is
    reconciled (a large one, slow to reconcile) is reconciled once more after the others already
    waiting, not a hundred times and not before them."""
    queue: WorkQueue[str] = WorkQueue()
    queue.add("busy")
    assert queue.get(timeout=0) == "busy"
    for other in ("a", "b", "c"):
        queue.add(other)
    for _ in range(100):
        queue.add("busy")
    queue.done("busy")
    order = []
    while (key := queue.get(timeout=0)) is not None:
        order.append(key)
        queue.done(key)
    assert order == ["a", "b", "c", "busy"]


def test_retries_back_off_per_key_and_forget_resets_them() -> None:
    queue: WorkQueue[str] = WorkQueue(retry_initial=SOON, retry_max=LATER, random=lambda: 0.0)
    first = queue.retry("a")
    second = queue.retry("a")
    assert second > first
    queue.forget("a")
    assert queue.retry("a") == first
    assert queue.retry("b", at_least=LATER * 2) == LATER * 2, "the API server's Retry-After is waited for"


def test_retries_are_jittered_between_the_step_and_twice_it_and_never_past_the_maximum() -> None:
    """0.1 s doubling: the draws 0, 0.5 and 0.99 give 0.1 x 1, 0.2 x 1.5 = 0.3 and 0.4 x 1.99 = 0.796 s;
    the step stops at half the maximum (60 s: 30 s), so the largest draw waits 30 x 1.999 = 59.97 s."""
    draws = iter([0.0, 0.5, 0.99])
    queue: WorkQueue[str] = WorkQueue(retry_initial=0.1, retry_max=60.0, random=lambda: next(draws))
    assert [queue.retry("a") for _ in range(3)] == pytest.approx([0.1, 0.3, 0.796])
    capped: WorkQueue[str] = WorkQueue(retry_initial=0.1, retry_max=60.0, random=lambda: 0.999)
    waits = [capped.retry("b") for _ in range(20)]
    assert waits[-1] == pytest.approx(59.97)
    assert max(waits) <= 60.0


def test_shutdown_drops_what_waits() -> None:
    queue: WorkQueue[str] = WorkQueue()
    queue.add_after("a", LATER)
    queue.shutdown()
    with pytest.raises(ShutDown):
        queue.get(timeout=0)
