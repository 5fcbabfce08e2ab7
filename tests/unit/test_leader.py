"""Leader election steps down whenever it cannot renew, whatever the error (an in-memory Lease store
stands in for the API server; the real one is exercised by the service's integration tests)."""

from __future__ import annotations

import copy
import threading
from typing import Any

import pytest

from autoscaler.kube.leader import LeaderElector
from inventory.kube import kubeapi
from tests.helpers import wait_for


class FakeLeases:
    """Lease get/create/replace with resourceVersion preconditions; `failure` makes every call raise."""

    def __init__(self) -> None:
        self.leases: dict[tuple[str, str], dict[str, Any]] = {}
        self.version = 0
        self.failure: Exception | None = None

    def _check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def get(self, resource: kubeapi.Resource, namespace: str, name: str) -> dict[str, Any]:
        self._check()
        if (namespace, name) not in self.leases:
            raise kubeapi.NotFound("not found", status=404)
        return copy.deepcopy(self.leases[(namespace, name)])

    def create(self, resource: kubeapi.Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self._check()
        key = (namespace, body["metadata"]["name"])
        if key in self.leases:
            raise kubeapi.Conflict("exists", status=409)
        return self._store(key, body)

    def replace(
        self, resource: kubeapi.Resource, namespace: str, name: str, body: dict[str, Any]
    ) -> dict[str, Any]:
        self._check()
        current = self.leases[(namespace, name)]
        if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
            raise kubeapi.Conflict("conflict", status=409)
        return self._store((namespace, name), body)

    def _store(self, key: tuple[str, str], body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        stored = copy.deepcopy(body)
        stored["metadata"]["resourceVersion"] = str(self.version)
        self.leases[key] = stored
        return copy.deepcopy(stored)


@pytest.mark.parametrize(
    "failure",
    [
        kubeapi.Transient("connection refused"),
        ValueError(
            "time data '2026-11-22T10:00:00Z' does not match format"
        ),  # a Lease written by another tool
        RuntimeError("a bug"),
    ],
    ids=["api-error", "unreadable-lease", "unexpected"],
)
def test_a_leader_that_cannot_renew_steps_down(failure: Exception) -> None:
    leases = FakeLeases()
    elector = LeaderElector(leases, "ns", "lease", "replica-a", duration=0.3)  # type: ignore[arg-type]
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
    leases = FakeLeases()
    calls = [0]

    def clock() -> float:
        calls[0] += 1
        if calls[0] > 6:
            raise OSError("clock gone")
        return 1000.0 + calls[0]

    elector = LeaderElector(leases, "ns", "lease", "replica-a", duration=0.3, clock=clock)  # type: ignore[arg-type]
    stop, lost = threading.Event(), threading.Event()
    with pytest.raises(OSError, match="clock gone"):
        elector.run(stop, lost.set)
    assert lost.is_set()
    assert not elector.is_leader.is_set()
