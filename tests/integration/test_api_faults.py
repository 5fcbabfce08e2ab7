"""The faults an API server throws, between `objcount run` (cluster mode) and the real kube-apiserver: the
test's fault proxy (tests/fault_proxy.py; the faults are played by us, every other answer is the real
API server's) answers chosen paths with a fault and counts what the service asks for meanwhile. The
service stays up, asks at the rate its backoff allows, and once the fault clears its counts catch up."""

from __future__ import annotations

import itertools
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.core.annotations import annotation_counts
from controlplane import LocalControlPlane
from controlplane.seed import reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.fault_proxy import Fault, FaultProxy
from tests.helpers import OBSERVED, Service, wait_for

FAULT_S = 20.0  # how long each fault lasts
# Config Sync's objects: the service's lists and watches of RootSyncs, RepoSyncs and ResourceGroups.
WATCHED = r"^GET /apis/(configsync\.gke\.io|kpt\.dev)/"


@pytest.fixture
def proxied(
    api: kubeapi.KubeApi, namespace: str, control_plane: LocalControlPlane, tmp_path: Path
) -> Iterator[tuple[RSyncKey, FaultProxy, Service]]:
    """A RootSync of 100 objects and our service in cluster mode (one replica, no leader election) reaching
    the API server through the fault proxy, ready and its counts recorded."""
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 100))
    api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace))
    proxy = FaultProxy(control_plane.server, control_plane.ca_file)
    service = Service(
        {
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_KUBECONFIG": str(proxy.kubeconfig(control_plane.admin_token, tmp_path / "proxied")),
            "OBJCOUNT_LEADER_ELECTION": "false",
            "OBJCOUNT_WATCH_NAMESPACE": namespace,  # other tests' RSyncs share this API server
            "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
            "OBJCOUNT_PLATFORM": "standard",
            "OBJCOUNT_TARGET": "recommend",
        },
        tmp_path / "service.log",
    )
    try:
        wait_for(lambda: service.get("/readyz")[0] == 200, timeout=60, what="ready")
        wait_for(lambda: counted(api, key) == 100, what="the counts recorded")
        yield key, proxy, service
    finally:
        service.stop(signal.SIGKILL)
        proxy.close()


def counted(api: kubeapi.KubeApi, key: RSyncKey) -> int | None:
    return annotation_counts(api.get(kubeapi.ROOTSYNC, key.namespace, key.name)).sync


def tail(service: Service, proxy: FaultProxy) -> str:
    """The service's last log lines and the proxy's last requests (a failure's explanation)."""
    lines = service.log.read_text().splitlines()[-30:]
    return "\n".join(lines + [f"{at:.1f} {request}" for at, request in proxy.seen[-15:]])


def per_path(proxy: FaultProxy, since: float) -> dict[str, int]:
    """The requests for each of Config Sync's resources the service made since `since`."""
    return {
        plural: len(proxy.requests(rf"{WATCHED}.*/{plural}(\?|$)", since))
        for plural in ("rootsyncs", "reposyncs", "resourcegroups")
    }


LISTS = WATCHED + r"(?!.*watch=true)"
WATCHES = WATCHED + r".*watch=true"


@pytest.mark.parametrize(
    "faults",
    [
        (Fault(WATCHED, 504, "Timeout"),),
        (Fault(WATCHED, 500, "InternalError"),),
        (Fault(WATCHED, 403, "Forbidden"),),  # a permission taken away for a while
        (Fault(WATCHES, 410, "Expired"),),  # every watch expired at once: a re-list each time
        (Fault(WATCHED, cut_after=100),),  # every answer reset in the middle of its body
        # Every watch expired, every list slower than our 30-s request timeout.
        (Fault(WATCHES, 410, "Expired"), Fault(LISTS, delay_s=35.0)),
    ],
    ids=["504 Timeout", "500", "403 for a while", "410 on every watch", "reset mid-body", "slow lists"],
)
def test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm(
    api: kubeapi.KubeApi,
    proxied: tuple[RSyncKey, FaultProxy, Service],
    faults: tuple[Fault, ...],
    request: pytest.FixtureRequest,
) -> None:
    """Every list and watch of Config Sync's objects (or every watch, for the 410) answered with the fault
    for 20 s, the open watches cut: each resource is asked at most 20 times in those 20 s (its backoff:
    0.2 s doubling to 30 s, jittered; before this policy a 504 drew 14,000 to 40,000 lists), the service
    stays up, and an inventory change made during the fault is counted once it clears. (A 410 takes a
    watch and a re-list per attempt: 40.)"""
    key, proxy, service = proxied
    began = time.monotonic()
    for fault in faults:
        proxy.inject(fault)
    proxy.cut_streams()
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 250))
    wait_for(
        lambda: proxy.requests(WATCHED)[-1] >= began + FAULT_S, timeout=FAULT_S * 3, what="20 s of faults"
    )
    asked = per_path(proxy, began)
    OBSERVED.append(
        f"API faults: requests per resource in {FAULT_S:.0f} s of {request.node.callspec.id}: {asked}"
    )
    # A 410 costs two requests an attempt (the watch refused, the re-list that follows).
    bound = 40 if any(fault.status == 410 for fault in faults) else 20
    assert all(1 <= n <= bound for n in asked.values()), asked
    assert service.get("/healthz")[0] == 200, "alive through the fault"
    assert service.process.poll() is None
    if any(fault.status == 403 for fault in faults):  # no passing fault: said once, shown on /readyz
        status, why = service.get("/readyz")
        assert status == 503
        assert "grant the rules in manifests/rbac" in why
        said = [line for line in service.logs() if "cannot list or watch" in str(line["message"])]
        assert len(said) == 3, "once per resource while it lasts"
    proxy.clear()
    wait_for(
        lambda: counted(api, key) == 250,
        timeout=90,
        what="the change made during the fault counted",
        explain=lambda: tail(service, proxy),
    )


def test_retry_after_is_waited_for_before_asking_again(
    api: kubeapi.KubeApi, proxied: tuple[RSyncKey, FaultProxy, Service]
) -> None:
    """429 with `Retry-After: 5` on every list and watch of RootSyncs for 20 s: no request for them
    comes sooner than 5 s after the one before."""
    key, proxy, service = proxied
    rootsyncs = rf"{WATCHED}.*/rootsyncs(\?|$)"
    proxy.inject(Fault(rootsyncs, 429, "TooManyRequests", retry_after=5))
    began = time.monotonic()
    proxy.cut_streams()
    wait_for(
        lambda: proxy.requests(rootsyncs)[-1] >= began + FAULT_S, timeout=FAULT_S * 3, what="20 s of 429"
    )
    during = proxy.requests(rootsyncs, began)
    gaps = [later - earlier for earlier, later in itertools.pairwise(during)]
    assert gaps, during
    assert min(gaps) >= 4.9, gaps  # whole seconds as the server said, less the proxy's own clock jitter
    proxy.clear()
    assert service.get("/healthz")[0] == 200
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 150))
    wait_for(
        lambda: counted(api, key) == 150,
        timeout=90,
        what="counting again once the 429s stop",
        explain=lambda: tail(service, proxy),
    )
