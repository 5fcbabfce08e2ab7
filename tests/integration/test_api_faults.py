"""The faults an API server throws, between `objcount run` (cluster mode) and the real kube-apiserver: the
fault proxy of the test stack (controlplane/fault_proxy.py; the faults are played by us, every other
answer is the real API server's) answers chosen paths with a fault and counts what the service asks for
meanwhile. Beside it, through a second proxy under the same faults at the same time, client-go's informers
with their defaults (controlplane/reflectors) watch the same objects: the yardstick. The service stays up,
asks no more often than client-go does, and once the fault clears its counts catch up.

A test here is mostly waiting (for the fault's 20 s to pass, then for each client's backoff to let it ask
again), so the faults of the parametrized test run at once, each on a stack of its own (the `met`
fixture); the Retry-After test, whose gaps the proxy's clock measures to 0.1 s, runs after them, away from
their request storms."""

from __future__ import annotations

import contextlib
import itertools
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from autoscaler.core.annotations import RECOMMENDED_ANNOTATION, annotation_counts, parse_resources_annotation
from controlplane import LocalControlPlane
from controlplane.fault_proxy import CONFIG_SYNC_READS, Fault, FaultProxy, reads_of
from controlplane.seed import ensure_namespace, reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import OBSERVED, Sampler, Service, never_lowered, wait_for

FAULT_S = 20.0  # how long each fault lasts
RESOURCES = ("rootsyncs", "reposyncs", "resourcegroups")
LISTS = CONFIG_SYNC_READS + r"(?!.*watch=true)"
WATCHES = CONFIG_SYNC_READS + r".*watch=true"

# The faults of test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm, by test id.
FAULTS: dict[str, tuple[Fault, ...]] = {
    "504 Timeout": (Fault(CONFIG_SYNC_READS, 504, "Timeout"),),
    "500": (Fault(CONFIG_SYNC_READS, 500, "InternalError"),),
    "503 Retry-After 1": (Fault(CONFIG_SYNC_READS, 503, "ServiceUnavailable", retry_after=1),),
    # Without Retry-After: our own backoff.
    "429 no Retry-After": (Fault(CONFIG_SYNC_READS, 429, "TooManyRequests"),),
    "403 for a while": (Fault(CONFIG_SYNC_READS, 403, "Forbidden"),),  # a permission taken away for a while
    # Every watch expired at once: a re-list each time.
    "410 on every watch": (Fault(WATCHES, 410, "Expired"),),
    # Every answer reset in the middle of its body.
    "reset mid-body": (Fault(CONFIG_SYNC_READS, cut_after=100),),
    # Every watch expired, every list slower than our 30-s request timeout.
    "slow lists": (Fault(WATCHES, 410, "Expired"), Fault(LISTS, delay_s=35.0)),
}


@dataclass
class Faulted:
    """Our service and client-go's informers, each through its own fault proxy, watching one RootSync."""

    key: RSyncKey
    ours: FaultProxy
    theirs: FaultProxy
    service: Service
    client_go: Path  # what client-go's informers saw, a JSON line per object added or changed

    def inject(self, *faults: Fault) -> float:
        """The faults on both proxies for FAULT_S seconds (they meet the requests that arrive in them, then
        end by themselves), every open watch cut; when they began (monotonic seconds)."""
        began = time.monotonic()
        self.ours.begin(*faults, until=began + FAULT_S)
        self.theirs.begin(*faults, until=began + FAULT_S)
        return began

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


@contextlib.contextmanager
def faulted_stack(
    api: kubeapi.KubeClient, control_plane: LocalControlPlane, reflectors: Path, folder: Path
) -> Iterator[Faulted]:
    """A RootSync of 100 objects in a namespace of its own (named as the `namespace` fixture names them),
    our service in cluster mode (one replica, no leader election) and client-go's informers, each through
    a fault proxy, both caught up; their files in `folder`."""
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    ensure_namespace(api, namespace)
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
            "OBJCOUNT_KUBECONFIG": str(ours.kubeconfig(token, folder / "ours")),
            "OBJCOUNT_LEADER_ELECTION": "false",
            "OBJCOUNT_WATCH_NAMESPACE": namespace,  # other tests' RSyncs share this API server
            "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
            "OBJCOUNT_PLATFORM": "standard",
            "OBJCOUNT_TARGET": "recommend",
        },
        folder / "service.log",
    )
    seen = folder / "client-go.jsonl"
    kubeconfig = theirs.kubeconfig(token, folder / "theirs")
    # Its log (klog, a line per failure: thousands under a 410 storm) kept beside, out of the test's output.
    with seen.open("wb") as out, (folder / "client-go.log").open("wb") as log:
        client_go = subprocess.Popen(
            [str(reflectors), "-kubeconfig", str(kubeconfig), "-namespace", namespace], stdout=out, stderr=log
        )
    both = Faulted(key, ours, theirs, service, seen)
    try:
        wait_for(
            lambda: ready(service, ours),
            timeout=60,
            what="ready",
            explain=lambda: f"/readyz: {service.get('/readyz')}\n{tail(service, ours)}",
        )
        wait_for(
            lambda: recorded(api, key)[0] == 100,
            what="the counts recorded",
            explain=lambda: tail(service, ours),
        )
        version = made["metadata"]["resourceVersion"]
        wait_for(lambda: both.client_go_saw("resourcegroups", version), what="client-go's informers synced")
        yield both
    finally:
        service.stop(signal.SIGKILL)
        client_go.kill()
        client_go.wait(30)
        ours.close()
        theirs.close()


@pytest.fixture(scope="module")
def met(
    admin_api: kubeapi.KubeClient,
    control_plane: LocalControlPlane,
    reflectors: Path,
    tmp_path_factory: pytest.TempPathFactory,
    request: pytest.FixtureRequest,
) -> Iterator[dict[str, Future[None]]]:
    """Each fault of FAULTS whose test is selected, all at once, each run by `met_with_backoff` in a thread
    of its own, on a stack of its own (its namespace, its two proxies, its service, its client-go, its
    connection to the API server): they share the API server (Config Sync's CRDs installed by `admin_api`),
    which the faults never reach, and this process, whose threads play every proxy. So no stack is set up
    beside another's fault (client-go re-lists at once on every 410: a storm through this process's
    proxies), the faults begin once every stack is set up (`all_set`). Each fault's test takes its run's
    outcome."""
    selected = [
        str(item.callspec.params["fault"])
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and item.originalname == test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm.__name__
    ]
    all_set = threading.Barrier(max(len(selected), 1))
    with ThreadPoolExecutor(max_workers=max(len(selected), 1), thread_name_prefix="api-fault") as pool:
        yield {
            fault: pool.submit(
                met_with_backoff,
                control_plane,
                reflectors,
                tmp_path_factory.mktemp("api-fault"),
                fault,
                all_set,
            )
            for fault in selected
        }


@pytest.fixture
def faulted(
    api: kubeapi.KubeClient,
    control_plane: LocalControlPlane,
    reflectors: Path,
    met: dict[str, Future[None]],
    tmp_path: Path,
) -> Iterator[Faulted]:
    """`faulted_stack`, set up once every run of `met` is over: under their request storms (client-go's,
    under a 410 on every watch) this process's proxies could time a request late, and the Retry-After
    test measures its gaps to 0.1 s."""
    wait(met.values())
    with faulted_stack(api, control_plane, reflectors, tmp_path) as both:
        yield both


def recorded(api: kubeapi.KubeClient, key: RSyncKey) -> tuple[int | None, int | None]:
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


def ready(service: Service, proxy: FaultProxy) -> bool:
    """Whether the service answers ready; a service that exited fails the wait at once, with its log (a
    set-up once seen waiting 60 s in CI without a word of why)."""
    exited = service.process.poll()
    assert exited is None, f"the service exited ({exited}) before it was ready:\n{tail(service, proxy)}"
    return service.get("/readyz")[0] == 200


def per_path(proxy: FaultProxy, began: float) -> dict[str, int]:
    """The requests for each of Config Sync's resources through `proxy` in the fault's FAULT_S seconds."""
    return {plural: proxy.reads(plural, began, FAULT_S) for plural in RESOURCES}


def past_the_fault(faulted: Faulted, began: float) -> bool:
    """Whether either client asked again after the fault's FAULT_S seconds: the window is over, every
    request in it recorded (each is, as it arrives). The fault ended with the window: a request after it
    gets the API server's answer."""
    return faulted.ours.read_since(began + FAULT_S) or faulted.theirs.read_since(began + FAULT_S)


def wall_clock(monotonic: float) -> float:
    """A time.monotonic() instant on the wall clock (client-go's informers say when on the wall clock)."""
    return time.time() - (time.monotonic() - monotonic)


@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm(
    fault: str, met: dict[str, Future[None]]
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
    Reported: both clients' requests and the time each took to see the change once the fault cleared.
    Asserted by `met_with_backoff`, each fault on a stack of its own beside the others (`met`)."""
    met[fault].result()


def met_with_backoff(
    control_plane: LocalControlPlane, reflectors: Path, folder: Path, fault: str, all_set: threading.Barrier
) -> None:
    """One fault of FAULTS from its start to the change counted after it, on a stack of its own, the fault
    begun once every stack of `all_set` is set up: what
    test_a_fault_on_every_list_and_watch_is_met_with_backoff_not_a_storm says."""
    faults = FAULTS[fault]
    with contextlib.ExitStack() as resources:
        api = resources.enter_context(
            contextlib.closing(kubeapi.KubeClient.connect(str(control_plane.kubeconfig)))
        )
        try:
            faulted = resources.enter_context(faulted_stack(api, control_plane, reflectors, folder))
        except BaseException:
            all_set.abort()  # the others go on without this one (their waits end, broken)
            raise
        # Bounded by the others' set-ups (each waits up to 60 s for ready, then for its counts and client-go).
        with contextlib.suppress(threading.BrokenBarrierError):
            all_set.wait(timeout=300)
        key, service, ours = faulted.key, faulted.service, faulted.ours
        history = Sampler(lambda: recorded(api, key), interval=0.05)
        forbidden = any(f.status == 403 for f in faults)
        # For a 403, /readyz through the fault, each answer timed once it came (one timed in the fault was
        # given in it).
        readiness = (
            Sampler(lambda: (service.get("/readyz"), time.monotonic()), interval=0.05) if forbidden else None
        )
        began = faulted.inject(*faults)
        ended = wall_clock(began + FAULT_S)
        changed = api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 250))
        wait_for(
            lambda: past_the_fault(faulted, began),
            timeout=FAULT_S * 4,
            what="20 s of faults, then a request",
        )
        asked, yardstick = per_path(ours, began), per_path(faulted.theirs, began)
        OBSERVED.append(
            f"API faults, {fault}: requests in {FAULT_S:.0f} s: ours {asked}, client-go's {yardstick}"
        )
        bound = 10 if any(f.status == 410 for f in faults) else 5
        assert all(1 <= n <= bound for n in asked.values()), asked
        assert sum(asked.values()) <= sum(yardstick.values()), (asked, yardstick)
        assert service.get("/healthz")[0] == 200, "alive through the fault"
        assert service.process.poll() is None
        if readiness is not None:  # no passing fault: said once, shown on /readyz
            in_the_fault = [answer for answer, at in readiness.stop() if at < began + FAULT_S]
            status, why = in_the_fault[-1]  # its last answer in the fault
            assert status == 503
            assert "grant the rules in manifests/rbac" in why
            said = [line for line in service.logs() if "cannot list or watch" in str(line["message"])]
            assert len(said) == 3, "once per resource while it lasts"
        wait_for(
            lambda: latest(history) == 250,
            timeout=90,
            what="the change made during the fault counted",
            explain=lambda: tail(service, ours),
        )
        counted_after = max(0.0, time.time() - ended)  # a 410 lets lists through: counted in the fault
        nothing_lost(history.stop(), (100, 250))
        assert "Traceback" not in service.log.read_text()
        version = changed["metadata"]["resourceVersion"]
        client_go_saw = wait_for(
            lambda: faulted.client_go_saw("resourcegroups", version), timeout=90, what="client-go"
        )
        assert client_go_saw is not None
        OBSERVED.append(
            f"API faults, {fault}: the change seen after the fault cleared: counted by ours in "
            f"{counted_after:.1f} s, in client-go's informer in {max(0.0, client_go_saw - ended):.1f} s"
        )


def test_retry_after_is_waited_for_before_asking_again(api: kubeapi.KubeClient, faulted: Faulted) -> None:
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
