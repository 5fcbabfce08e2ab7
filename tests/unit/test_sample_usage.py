"""The controller's sampler without a cluster: one look at the metrics API feeds each RSync's window peak,
queues the RSyncs whose peak rose, and does nothing where the metrics API is not served (on
test_executor's in-memory port; the observer's caches stand in for the watches)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.core.calibration import Peak, Sampled, Usage, Window
from autoscaler.service.controller import Controller, Scope
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.unit.test_executor import FakePort, metric

ROOT = RSyncKey("RootSync", "config-management-system", "root-sync")
REPO = RSyncKey("RepoSync", "team-a", "repo-sync")
STARTED = 1764064800.0


@dataclass
class Recording(FakePort):
    """test_executor's port, remembering which selector each look at the metrics API used."""

    selectors: list[str] = field(default_factory=list)

    def reconciler_usage(self, selector: str) -> Sampled | None:
        self.selectors.append(selector)
        if "usage" in self.failing:
            raise kubeapi.Forbidden("pods.metrics.k8s.io is forbidden", status=403, reason="Forbidden")
        return self.usage


def fetched(commit: str) -> dict[str, Any]:
    return {"metadata": {"name": "x"}, "status": {"source": {"commit": commit}}}


def controller(port: Recording, keys: list[RSyncKey], monkeypatch: pytest.MonkeyPatch) -> Controller:
    made = Controller(object(), Scope.cluster(), port=port)  # type: ignore[arg-type]  # never called
    monkeypatch.setattr(Controller, "synced", property(lambda self: True))
    monkeypatch.setattr(made.observer, "rsync_keys", lambda: keys)
    monkeypatch.setattr(made.observer, "rsync", lambda key: fetched("c1"))
    return made


def queued(made: Controller) -> set[RSyncKey]:
    keys = set()
    while (key := made.queue.get(timeout=0)) is not None:
        keys.add(key)
        made.queue.done(key)
    return keys


def test_one_look_feeds_every_rsync_s_window_and_queues_those_whose_peak_rose(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    usage = [
        Usage("root-reconciler", "root-reconciler-1-a", STARTED, 150),
        Usage("ns-reconciler-team-a", "ns-reconciler-team-a-5d8-b", STARTED, 90),
        Usage("root-reconciler", "root-reconciler-0-a", STARTED - 600, 400),  # the old Pod of a rollout
    ]
    port = Recording(usage=Sampled(usage, []))
    made = controller(port, [ROOT, REPO], monkeypatch)
    made.sample_usage()
    assert port.selectors == ["app=reconciler"], "the port controller: every reconciler at once"
    assert made.executor.peak(ROOT) == Peak(Window("root-reconciler-1-a", STARTED, "c1"), 150)
    assert made.executor.peak(REPO).mib == 90
    assert queued(made) == {ROOT, REPO}
    made.sample_usage()
    assert queued(made) == set(), "the same peaks: nothing to look at again"


def test_a_sidecar_reads_its_own_reconciler_only(monkeypatch: pytest.MonkeyPatch) -> None:
    port = Recording(usage=Sampled([], []))
    controller(port, [ROOT], monkeypatch).sample_usage()
    assert port.selectors == ["app=reconciler,configsync.gke.io/deployment-name=root-reconciler"]


def test_without_the_metrics_api_or_its_permission_nothing_is_sampled(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = controller(Recording(usage=None), [ROOT], monkeypatch)
    made.sample_usage()
    assert made.executor.peak(ROOT) is None
    refused = controller(Recording(usage=Sampled([], []), failing={"usage"}), [ROOT], monkeypatch)
    before = metric("objcount_reconcile_errors_total", stage="usage")
    refused.sample_usage()
    refused.sample_usage()
    assert metric("objcount_reconcile_errors_total", stage="usage") == before + 2, "each is counted"
    assert refused.executor.peak(ROOT) is None


def test_an_unreadable_usage_is_counted_and_leaves_the_peak_as_it_was(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    made = controller(Recording(usage=Sampled([], ["root-reconciler-1-a"])), [ROOT], monkeypatch)
    before = metric("objcount_reconcile_errors_total", stage="usage")
    made.sample_usage()
    assert metric("objcount_reconcile_errors_total", stage="usage") == before + 1
    assert made.executor.peak(ROOT) is None
