"""The faults an API server throws, between `objcount run` (cluster mode) and the real kube-apiserver: the
fault proxy of the test stack (controlplane/fault_proxy.py; the faults are played by us, every other
answer is the real API server's) answers chosen paths with a fault and counts what the service asks for
meanwhile. Beside it, through a second proxy under the same faults at the same time, client-go's informers
with their defaults (controlplane/reflectors) watch the same objects: the yardstick. The service stays up,
asks no more often than client-go does, and once the fault clears its counts catch up."""

from __future__ import annotations

import itertools
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from autoscaler.core.annotations import RECOMMENDED_ANNOTATION, annotation_counts, parse_resources_annotation
from controlplane import LocalControlPlane
from controlplane.fault_proxy import CONFIG_SYNC_READS, Fault, FaultProxy, reads_of
from controlplane.seed import reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import OBSERVED, Sampler, Service, never_lowered, wait_for

FAULT_S = 20.0  # how long each fault lasts
RESOURCES = ("rootsyncs", "reposyncs", "resourcegroups")


@dataclass
class Faulted:
    """Our service and client-go's informers, each through its own fault proxy, watching one RootSync."""

    key: RSyncKey
    ours: FaultProxy
    theirs: FaultProxy
    service: Service
    client_go: Path  # what client-go's informers saw, a JSON line per object added or changed

    def inject(self, *faults: Fault) -> float:
        """The faults on both proxies, every open watch cut; when they began."""
        began = self.ours.begin(*faults)
        self.theirs.begin(*faults)
        return began

    def clear(self) -> None:
        self.ours.clear()
        self.theirs.clear()

    def client_go_saw(self, resource: str, resource_version: str) -> float | None:
        """When (wall clock) client-go's informers first had this version of the object; None: not yet."""
        lines = self.client_go.read_text().splitlines()
        return next(
            (
                float(seen["at"])
                for seen in map(orjson.loads, lines)
                if seen["resource"] == resource and seen["resourceVersion"] == resource_version
            ),
            None,
        )


@pytest.fixture
def faulted(
    api: kubeapi.KubeApi,
    namespace: str,
    control_plane: LocalControlPlane,
    reflectors: Path,
    tmp_path: Path,
) -> Iterator[Faulted]:
    """A RootSync of 100 objects, our service in cluster mode (one replica, no leader election) and
    client-go's informers, each through a fault proxy, both caught up."""
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key))
    made = api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 100))
    api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace))
    upstream = (control_plane.server, control_plane.ca_file, control_plane.serving)
    ours, theirs = FaultProxy(*upstream), FaultProxy(*upstream)
    token = control_plane.admin_token
    service = Service(
        {
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_KUBECONFIG": str(ours.kubeconfig(token, tmp_path / "ours")),
            "OBJCOUNT_LEADER_ELECTION": "false",
            "OBJCOUNT_WATCH_NAMESPACE": namespace,  # other tests' RSyncs share this API server
            "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
            "OBJCOUNT_PLATFORM": "standard",
            "OBJCOUNT_TARGET": "recommend",
        },
        tmp_path / "service.log",
    )
    seen = tmp_path / "client-go.jsonl"
    kubeconfig = theirs.kubeconfig(token, tmp_path / "theirs")
    # Its log (klog, a line per failure: thousands under a 410 storm) kept beside, out of the test's output.
    with seen.open("wb") as out, (tmp_path / "client-go.log").open("wb") as log:
        client_go = subprocess.Popen(
            [str(reflectors), "-kubeconfig", str(kubeconfig), "-namespace", namespace], stdout=out, stderr=log
        )
    both = Faulted(key, ours, theirs, service, seen)
    try:
        wait_for(lambda: service.get("/readyz")[0] == 200, timeout=60, what="ready")
        wait_for(lambda: recorded(api, key)[0] == 100, what="the counts recorded")
        version = made["metadata"]["resourceVersion"]
        wait_for(lambda: both.client_go_saw("resourcegroups", version), what="client-go's informers synced")
        yield both
    finally:
        service.stop(signal.SIGKILL)
        client_go.kill()
        client_go.wait(30)
        ours.close()
        theirs.close()


def recorded(api: kubeapi.KubeApi, key: RSyncKey) -> tuple[int | None, int | None]:
    """The count and the recommended memory (MiB) on the RootSync, read straight from the API server."""
    rootsync = api.get(kubeapi.ROOTSYNC, key.namespace, key.name)
    annotations = rootsync["metadata"].get("annotations", {})
    recommended = parse_resources_annotation(annotations.get(RECOMMENDED_ANNOTATION))
    return annotation_counts(rootsync).sync, None if recommended is None else recommended.memory_request_mib


def latest(history: Sampler[tuple[int | None, int | None]]) -> int | None:
    """The count last read by the test's sampler (what it has seen is what is checked)."""
    return history.values[-1][0] if history.values else None


def nothing_lost(history: list[tuple[int | None, int | None]], counts: tuple[int, ...]) -> None:
    """Every count recorded through the fault is one of the inventory's real counts (none from a partial
    read), in their order, and the recommended memory never went down (the count only grew)."""
    counted_in_turn = [count for count, _ in itertools.groupby(count for count, _ in history)]
    assert counted_in_turn == list(counts), "only the inventory's real counts, in its order"
    never_lowered([mib for _, mib in history])


def tail(service: Service, proxy: FaultProxy) -> str:
    """The service's last log lines and the proxy's last requests (a failure's explanation)."""
    lines = service.log.read_text().splitlines()[-30:]
    return "\n".join(lines + [f"{at:.1f} {request}" for at, request in proxy.seen[-15:]])


def per_path(proxy: FaultProxy, began: float) -> dict[str, int]:
    """The requests for each of Config Sync's resources through `proxy` in the fault's FAULT_S seconds."""
    return {plural: proxy.reads(plural, began, FAULT_S) for plural in RESOURCES}


def past_the_fault(faulted: Faulted, began: float) -> bool:
    """Whether either client asked again after the fault's FAULT_S seconds: the window is over, every
    request in it recorded (each is, as it arrives). The fault is then cleared before our next attempt."""
    return faulted.ours.read_since(began + FAULT_S) or faulted.theirs.read_since(began + FAULT_S)


LISTS = CONFIG_SYNC_READS + r"(?!.*watch=true)"
WATCHES = CONFIG_SYNC_READS + r".*watch=true"


@pytest.mark.parametrize(
    "faults",
    [
        (Fault(CONFIG_SYNC_READS, 504, "Timeout"),),
        (Fault(CONFIG_SYNC_READS, 500, "InternalError"),),
        (Fault(CONFIG_SYNC_READS, 503, "ServiceUnavailable", retry_after=1),),
        (Fault(CONFIG_SYNC_READS, 429, "TooManyRequests"),),  # without Retry-After: our own backoff
        (Fault(CONFIG_SYNC_READS, 403, "Forbidden"),),  # a permission taken away for a while
        (Fault(WATCHES, 410, "Expired"),),  # every watch expired at once: a re-list each time
        (Fault(CONFIG_SYNC_READS, cut_after=100),),  # every answer reset in the middle of its body
        # Every watch expired, every list slower than our 30-s request timeout.
        (Fault(WATCHES, 410, "Expired"), Fault(LISTS, delay_s=35.0)),
    ],
    ids=[
        "504 Timeout",
        "500",
        "503 Retry-After 1",
        "429 no Retry-After",
        "403 for a while",
        "410 on every watch",
        "reset mid-body",
        "slow lists",
    ],
)
def test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm(
    api: kubeapi.KubeApi, faulted: Faulted, faults: tuple[Fault, ...], request: pytest.FixtureRequest
) -> None:
    """Every list and watch of Config Sync's objects (or every watch, for the 410) answered with the fault
    for 20 s, the open watches cut, for our service and client-go's informers alike: our service asks no
    more often than client-go does (the three resources together: client-go's backoff may have grown
    before the fault, so one resource alone can tie or differ by one), and each at most 5 times (its
    backoff: 1.6 s doubling, each wait between the step and twice it, the cut watch a failure too, so at
    most three requests fit in 20 s; two more for slack; a 410 takes a watch and a re-list per attempt:
    10. Before this policy a 504 drew 14,000 to 40,000 lists).
    It stays up and never logs a traceback, an inventory change made during the fault is counted once it
    clears, and every count recorded meanwhile is a real one, the recommendation never lowered.
    Reported: both clients' requests and the time each took to see the change once the fault cleared."""
    key, service, ours = faulted.key, faulted.service, faulted.ours
    history = Sampler(lambda: recorded(api, key), interval=0.05)
    began = faulted.inject(*faults)
    changed = api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 250))
    wait_for(
        lambda: past_the_fault(faulted, began),
        timeout=FAULT_S * 4,
        what="20 s of faults, then a request",
    )
    asked, yardstick = per_path(ours, began), per_path(faulted.theirs, began)
    fault = request.node.callspec.id
    OBSERVED.append(
        f"API faults, {fault}: requests in {FAULT_S:.0f} s: ours {asked}, client-go's {yardstick}"
    )
    bound = 10 if any(fault.status == 410 for fault in faults) else 5
    assert all(1 <= n <= bound for n in asked.values()), asked
    assert sum(asked.values()) <= sum(yardstick.values()), (asked, yardstick)
    assert service.get("/healthz")[0] == 200, "alive through the fault"
    assert service.process.poll() is None
    if any(fault.status == 403 for fault in faults):  # no passing fault: said once, shown on /readyz
        status, why = service.get("/readyz")
        assert status == 503
        assert "grant the rules in manifests/rbac" in why
        said = [line for line in service.logs() if "cannot list or watch" in str(line["message"])]
        assert len(said) == 3, "once per resource while it lasts"
    cleared = time.time()
    faulted.clear()
    wait_for(
        lambda: latest(history) == 250,
        timeout=90,
        what="the change made during the fault counted",
        explain=lambda: tail(service, ours),
    )
    counted_after = time.time() - cleared
    nothing_lost(history.stop(), (100, 250))
    assert "Traceback" not in service.log.read_text()
    version = changed["metadata"]["resourceVersion"]
    client_go_saw = wait_for(
        lambda: faulted.client_go_saw("resourcegroups", version), timeout=90, what="client-go"
    )
    assert client_go_saw is not None
    OBSERVED.append(
        f"API faults, {fault}: the change seen after the fault cleared: counted by ours in "
        f"{counted_after:.1f} s, in client-go's informer in {max(0.0, client_go_saw - cleared):.1f} s"
    )


def test_retry_after_is_waited_for_before_asking_again(api: kubeapi.KubeApi, faulted: Faulted) -> None:
    """429 with `Retry-After: 5` on every list and watch of RootSyncs for 20 s: no request for them
    comes sooner than 5 s after the one before, none more often than client-go's."""
    key, service, ours = faulted.key, faulted.service, faulted.ours
    history = Sampler(lambda: recorded(api, key), interval=0.05)
    began = faulted.inject(Fault(reads_of("rootsyncs"), 429, "TooManyRequests", retry_after=5))
    wait_for(
        lambda: past_the_fault(faulted, began),
        timeout=FAULT_S * 4,
        what="20 s of 429, then a request",
    )
    during = ours.read_times("rootsyncs", began, FAULT_S)
    gaps = [later - earlier for earlier, later in itertools.pairwise(during)]
    assert gaps, during
    assert min(gaps) >= 4.9, gaps  # whole seconds as the server said, less the proxy's own clock jitter
    asked, yardstick = per_path(ours, began), per_path(faulted.theirs, began)
    OBSERVED.append(f"API faults, 429 Retry-After 5 (RootSyncs): ours {asked}, client-go's {yardstick}")
    assert asked["rootsyncs"] <= yardstick["rootsyncs"], (asked, yardstick)
    faulted.clear()
    assert service.get("/healthz")[0] == 200
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 150))
    wait_for(
        lambda: latest(history) == 150,
        timeout=90,
        what="counting again once the 429s stop",
        explain=lambda: tail(service, ours),
    )
    nothing_lost(history.stop(), (100, 150))
    assert "Traceback" not in service.log.read_text()
