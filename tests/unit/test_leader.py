"""Leader election steps down whenever it cannot renew, whatever the error (the fake API of
tests/fake_api.py stands in for the API server; the real one is exercised by the integration tests)."""

from __future__ import annotations

import threading

import pytest

from autoscaler.kube.leader import LeaderElector
from inventory.kube import kubeapi
from tests.fake_api import FakeApi
from tests.helpers import wait_for


@pytest.mark.parametrize(
    "failure",
    [
        kubeapi.Transient("connection refused"),
        ValueError("the Lease's renewTime 'yesterday' is not a time"),  # a Lease written by another tool
        RuntimeError("a bug"),
    ],
    ids=["api-error", "unreadable-lease", "unexpected"],
)
def test_a_leader_that_cannot_renew_steps_down(failure: Exception) -> None:
    leases = FakeApi()
    elector = LeaderElector(leases, "ns", "lease", "replica-a", duration=0.3)
    stop, lost = threading.Event(), threading.Event()
    thread = threading.Thread(target=elector.run, args=(stop, lost.set), daemon=True)
    thread.start()
    try:
        wait_for(elector.is_leader.is_set, timeout=10, what="leadership")
        leases.failure = failure
        wait_for(lost.is_set, timeout=10, what="stepping down")
        assert not elector.is_leader.is_set()
        wait_for(lambda: not thread.is_alive(), timeout=10, what="the elector to end")
    finally:
        stop.set()


def test_an_error_escaping_the_loop_still_steps_down() -> None:
    leases = FakeApi()
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        if calls[0] > 6:
            raise OSError("clock gone")
        return 1000.0 + calls[0]

    elector = LeaderElector(leases, "ns", "lease", "replica-a", duration=0.3, clock=clock)
    stop, lost = threading.Event(), threading.Event()
    with pytest.raises(OSError, match="clock gone"):
        elector.run(stop, lost.set)
    assert lost.is_set()
    assert not elector.is_leader.is_set()
