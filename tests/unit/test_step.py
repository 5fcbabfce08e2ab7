"""The reconcile step and its executor, without a cluster: an in-memory fake of the port.

Sizes are worked by hand for the prototype preset on Standard, no other containers:
memory = ceil((128 + 0.2 x objects) / 32) x 32 MiB, CPU = ceil(memory x 1000 / 1024) m, limits = requests.
  100 objects -> 148 -> 160 MiB, 157 m;  1,000 -> 328 -> 352 MiB, 344 m;  5,000 -> 1,128 -> 1,152 MiB, 1,125 m.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import cast

import pytest
from prometheus_client import REGISTRY

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    AUTOSCALE_ANNOTATION,
    HELD_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    PLATFORM_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    WAITING_ANNOTATION,
)
from autoscaler.core.calibration import Sampled
from autoscaler.core.observation import Needs, Reading, RSyncView, Unread
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig, RSyncState
from autoscaler.core.reasons import ReadError, Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import AUTOPILOT, PROTOTYPE, STANDARD, NodeRoom, Profile, Sizing
from autoscaler.core.written import Applied, CountsWritten, Written
from autoscaler.service.controller import Controller, Executor, Scope, retried
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import Pod, RSync
from inventory.kube import kubeapi
from tests.fake_api import FakeApi

KEY = RSyncKey("RootSync", "config-management-system", "root-sync")
AT_100 = Resources(157, 160, 157, 160)
AT_1000 = Resources(344, 352, 344, 352)
AT_5000 = Resources(1125, 1152, 1125, 1152)
# How AT_5000 is published (the resources annotation), written by hand.
AT_5000_ANNOTATION = (
    '{"requests":{"cpu":"1125m","memory":"1152Mi"},"limits":{"cpu":"1125m","memory":"1152Mi"}}'
)
DELAY = 600.0
DAY = 86400.0


@dataclass(frozen=True)
class FakeTarget:
    name: str = "fake"
    rereads_current: bool = False
    in_place: bool = False


@dataclass
class FakePort:
    """The port in memory: the reconciler's size, what was applied, published, recorded, and how often
    each was read."""

    size: Resources | None = AT_100
    restarts: bool = True  # what an apply reports
    generation_after_apply: int | None = None
    in_rsync: Resources | None = None  # the size the RSync declares (rsync-override)
    owner: str | None = None  # why the target must not write (held_by_owner)
    failing: set[str] = field(default_factory=set)
    oom_kill: OomKill | None = None  # what the reconciler's Pod reports
    count_write: CountsWritten = field(default_factory=lambda: CountsWritten(("status",)))
    surface: int | None = None  # resource types discovery serves
    usage: Sampled | None = None  # what the metrics API reports (None: not served)
    deferred: tuple[Resources, str] | None = None  # a resize the kubelet defers (asked, why)
    fell_back: str | None = None  # what an apply reports: why it went through the fallback
    node_room: NodeRoom | None = None  # the cluster's largest node
    pod: Pod | None = None  # the reconciler Pod as listed
    pods_going: bool = False  # every reconciler Pod is being deleted
    resizes_running: bool = False  # a size written reaches the running reconciler (in place)
    room_wanted: str | None = None  # another reconciler on its node waits for room
    target_name: str = "fake"
    applied: list[Resources] = field(default_factory=list)
    published: list[dict[str, str | None]] = field(default_factory=list)
    counts: list[tuple[ObjectCounts, bool]] = field(default_factory=list)
    reads: list[Needs] = field(default_factory=list)

    @property
    def target(self) -> FakeTarget:
        return FakeTarget(self.target_name)

    def read(self, key: RSyncKey, view: RSyncView, needs: Needs) -> Reading:
        self.reads.append(needs)
        if needs.current and "current" in self.failing:
            raise ReadError(Reason.FORBIDDEN, "reading the size: forbidden")
        unread = ()
        if "oom" in self.failing:
            unread = (Unread("read", "cannot read the reconciler's OOM kills: listing the pod: forbidden"),)
        return Reading(
            current=self.size if needs.current else None,
            declared=self.in_rsync,
            held_by_owner=self.owner,
            oom_kill=None if "oom" in self.failing else self.oom_kill,
            api_resources=self.surface,
            unread=unread,
            deferred=self.deferred,
            node_room=self.node_room if needs.nodes else None,
            pod=self.pod,
            pods_going=self.pods_going,
            resizes_running=self.resizes_running,
            room_wanted=self.room_wanted,
        )

    def write(
        self, key: RSyncKey, reading: Reading, apply: Resources | None, publish: Mapping[str, str | None]
    ) -> Written:
        applied = None
        if apply is not None:
            if "apply" in self.failing:
                raise WriteError(Reason.REJECTED, "apply: rejected")
            self.size = apply
            self.applied.append(apply)
            applied = Applied(apply, self.restarts, self.generation_after_apply, fell_back=self.fell_back)
        if publish:
            self.published.append(dict(publish))
        return Written(applied)

    def reconciler_usage(self, selector: str) -> Sampled | None:
        return self.usage

    def write_counts(
        self, key: RSyncKey, view: RSyncView, counts: ObjectCounts, *, in_annotations: bool
    ) -> CountsWritten:
        if "counts" in self.failing:
            raise kubeapi.Transient("counts: 503")
        self.counts.append((counts, in_annotations))
        return self.count_write


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Rig:
    port: FakePort
    clock: Clock
    executor: Executor
    rechecks: list[float]

    def reconcile(self, observed: ObjectCounts, rsync: RSync | None = None) -> Outcome:
        body: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}}
        return self.executor.reconcile(KEY, body if rsync is None else rsync, observed)


def rig(
    port: FakePort | None = None,
    *,
    max_restarts: int = 100,
    in_place: bool = False,
    reads_source: bool = False,
) -> Rig:
    port = port or FakePort()
    port.resizes_running = port.resizes_running or in_place
    clock, rechecks = Clock(), []
    config = DecideConfig(
        Profile(PROTOTYPE, STANDARD),
        Hysteresis(DELAY, max_restarts),
        3,
        reread_current=in_place,
        in_place=in_place,
        reads_source=reads_source,
    )
    executor = Executor(port, config, clock, lambda key, delay: rechecks.append(delay))
    return Rig(port, clock, executor, rechecks)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def annotated(annotations: dict[str, str], generation: int = 1) -> RSync:
    return {"metadata": {"name": KEY.name, "generation": generation, "annotations": annotations}}


# ----- one reconcile: named cases ------------------------------------------------------------------------
@dataclass(frozen=True)
class Case:
    observed: ObjectCounts
    outcome: Outcome
    applied: list[Resources]
    rsync: RSync | None = None
    failing: frozenset[str] = frozenset()
    counts_recorded: bool = True


CASES = {
    "more objects: scale up at once": Case(ObjectCounts(5000, 5000), Outcome.SCALED_UP, [AT_5000]),
    "only the inventory known: scale up anyway": Case(ObjectCounts(None, 5000), Outcome.SCALED_UP, [AT_5000]),
    "already sized": Case(ObjectCounts(100, 100), Outcome.UNCHANGED, []),
    "both counts unknown: postponed": Case(ObjectCounts(), Outcome.POSTPONED, []),
    "prune pending: no scale-down": Case(ObjectCounts(10, 100), Outcome.UNCHANGED, []),
    "opted out: counts only": Case(
        ObjectCounts(5000, 5000), Outcome.OPTED_OUT, [], rsync=annotated({AUTOSCALE_ANNOTATION: "False"})
    ),
    "unknown platform: error, nothing applied": Case(
        ObjectCounts(5000, 5000), Outcome.ERROR, [], rsync=annotated({PLATFORM_ANNOTATION: "mainframe"})
    ),
    "size unreadable: failed, counts still recorded": Case(
        ObjectCounts(5000, 5000), Outcome.FAILED, [], failing=frozenset({"current"})
    ),
    "apply refused: failed, counts still recorded": Case(
        ObjectCounts(5000, 5000), Outcome.FAILED, [], failing=frozenset({"apply"})
    ),
    "counts write failed: failed after the size was applied": Case(
        ObjectCounts(5000, 5000),
        Outcome.FAILED,
        [AT_5000],
        failing=frozenset({"counts"}),
        counts_recorded=False,
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_reconcile(name: str) -> None:
    case = CASES[name]
    r = rig(FakePort(failing=set(case.failing)))
    decisions = metric("objcount_decisions_total", outcome=case.outcome)
    assert r.reconcile(case.observed, case.rsync) == case.outcome
    assert r.port.applied == case.applied
    assert r.port.counts == ([(case.observed, False)] if case.counts_recorded else [])
    assert metric("objcount_decisions_total", outcome=case.outcome) == decisions + 1, (
        "every outcome is counted"
    )


@pytest.mark.parametrize(
    ("monitoring", "applied"),
    [
        # 100 objects: the prototype's 160Mi and 157m. Autopilot, the Pod not read yet (no Pod, no
        # Deployment): git-sync (20m/32Mi) and the otel-agent (10m/64Mi) assumed, a pod of 187m/256Mi, raised
        # to Autopilot's 250m/512Mi, the difference to the reconciler: 220m/416Mi.
        (None, Resources(220, 416, 220, 416)),
        ({"enabled": True}, Resources(220, 416, 220, 416)),
        # spec.monitoring.enabled false (Config Sync v1.25): no otel-agent, git-sync alone: a pod of
        # 177m/192Mi raised to 250m/512Mi: 230m/480Mi.
        ({"enabled": False}, Resources(230, 480, 230, 480)),
    ],
)
def test_others_not_read_yet_are_assumed_with_the_otel_agent_unless_monitoring_is_off(
    monitoring: dict[str, bool] | None, applied: Resources
) -> None:
    port = FakePort()
    config = DecideConfig(Profile(PROTOTYPE, AUTOPILOT), Hysteresis(DELAY, 100), 3, measure_others=True)
    executor = Executor(port, config, Clock(), lambda key, delay: None)
    body: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}}
    if monitoring is not None:
        body["spec"] = {"monitoring": monitoring}
    executor.reconcile(KEY, body, ObjectCounts(100, 100))
    assert port.reads[-1].others, "the other containers are asked for on Autopilot"
    assert port.applied == [applied]


def test_a_sidecar_whose_pod_is_being_deleted_sizes_nothing() -> None:
    """Seen on the real node: a sidecar wrote its size (the rsync-override target, a rollout), its own
    Pod was deleted by the rollout, and its next reconcile read the other containers from the Deployment's
    template, which lacks the sidecar our webhook adds: a larger size, written 160 ms later, and the next
    Pod's sidecar wrote the first again: a rollout every 3 s. A sidecar that finds every reconciler Pod
    being deleted sizes nothing; with its Pod listed, or no Pod at all (an API server without nodes), it
    sizes as before (the others as Autopilot's platform assumes them, git-sync 20m/32Mi and the otel-agent
    10m/64Mi: the pod raised to 250m/512Mi, 220m/416Mi)."""
    config = DecideConfig(
        Profile(PROTOTYPE, AUTOPILOT), Hysteresis(DELAY, 100), 3, measure_others=True, reads_source=True
    )
    body: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}}
    going = FakePort(size=None, pods_going=True)
    outcome = Executor(going, config, Clock(), lambda key, delay: None).reconcile(
        KEY, body, ObjectCounts(100, 100)
    )
    assert (outcome, going.applied) == (Outcome.POSTPONED, [])
    listed = FakePort(size=None, pod=cast(Pod, {"metadata": {"name": "root-reconciler-x"}}))
    for port in (listed, FakePort(size=None)):
        Executor(port, config, Clock(), lambda key, delay: None).reconcile(KEY, body, ObjectCounts(100, 100))
        assert port.applied == [Resources(220, 416, 220, 416)]


def test_prune_pending_is_said_in_the_decision() -> None:
    r = rig()
    assert r.reconcile(ObjectCounts(10, 100)) == Outcome.UNCHANGED  # 100 objects: sized for the inventory
    assert r.executor.states[KEY].decision is not None
    r.port.size = AT_1000
    r.executor.states.clear()
    assert r.reconcile(ObjectCounts(10, 100)) == Outcome.POSTPONED
    assert "prune pending" in r.executor.states[KEY].decision.reason  # type: ignore[union-attr]
    assert r.port.applied == []


def test_the_reconciler_is_sized_for_the_api_surface_discovery_reports() -> None:
    surface = Sizing(
        "surface", base_mib=Fraction(100), mib_per_object=Fraction(0), mib_per_api_resource=Fraction(1)
    )
    port = FakePort(size=None, surface=300)
    clock = Clock()
    config = DecideConfig(Profile(surface, STANDARD), Hysteresis(DELAY, 100), 3)
    executor = Executor(port, config, clock, lambda key, delay: None)
    executor.reconcile(KEY, annotated({}), ObjectCounts(10, 10))
    # 100 MiB + 1 MiB x 300 resource types (fitted on none) = 400 -> 416 on the 32 MiB grid.
    assert [r.memory_request_mib for r in port.applied] == [416]


def test_a_scale_up_publishes_the_recommendation_and_the_size() -> None:
    r = rig()
    r.reconcile(ObjectCounts(5000, 5000))
    assert r.port.published == [
        {
            RECOMMENDED_ANNOTATION: AT_5000_ANNOTATION,
            APPLIED_ANNOTATION: AT_5000_ANNOTATION,
        }
    ]


def test_a_size_its_owner_holds_is_recommended_and_never_applied() -> None:
    r = rig(FakePort(owner="spec.override is declared in git"))
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.HELD_BY_OWNER
    assert r.port.applied == []
    # The recommendation is published; what is applied stays what the reconciler has (100 objects).
    assert r.port.published == [
        {
            RECOMMENDED_ANNOTATION: AT_5000_ANNOTATION,
            APPLIED_ANNOTATION: '{"requests":{"cpu":"157m","memory":"160Mi"},"limits":{"cpu":"157m","memory":"160Mi"}}',
            HELD_ANNOTATION: "spec.override is declared in git",
        }
    ]
    decision = r.executor.states[KEY].decision
    assert decision is not None
    assert "not applied: spec.override is declared in git" in decision.reason
    assert metric("objcount_decisions_total", outcome="held_by_owner") >= 1
    r.port.owner = None  # the declaration no longer covers the field: ours again
    held = {
        "metadata": {"name": KEY.name, "annotations": {HELD_ANNOTATION: "spec.override is declared in git"}}
    }
    assert r.reconcile(ObjectCounts(5000, 5000), held) == Outcome.SCALED_UP  # type: ignore[arg-type]
    assert r.port.applied == [AT_5000]
    assert r.port.published[-1][HELD_ANNOTATION] is None, "the reason is removed"


def test_a_lower_target_waits_for_the_delay_then_comes_down() -> None:
    r = rig(FakePort(size=AT_5000))
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.POSTPONED
    assert r.rechecks == [DELAY + 0.01], "the held scale-down is looked at again when it is due"
    r.clock.now += DELAY - 1
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.POSTPONED
    r.clock.now += 1
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN
    assert r.port.applied == [AT_100]


# ----- the scale-down delay counts from the inventory's last change: named cases ------------------------
# (seconds after the first reconcile, counts seen, outcome); the reconciler is sized for 5,000 objects.
Event = tuple[float, ObjectCounts, Outcome]
DELAY_CASES: dict[str, tuple[list[Event], list[Resources], list[float]]] = {
    "inventory unchanged: down once the delay has passed": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (599, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (600, ObjectCounts(1000, 1000), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 1.01],
    ),
    "inventory 1,000 -> 100 at 300 s: not down at 650 s, down at 900 s": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (300, ObjectCounts(100, 100), Outcome.POSTPONED),
            (650, ObjectCounts(100, 100), Outcome.POSTPONED),
            (899, ObjectCounts(100, 100), Outcome.POSTPONED),
            (900, ObjectCounts(100, 100), Outcome.SCALED_DOWN),
        ],
        [AT_100],
        [600.01, 600.01, 250.01, 1.01],
    ),
    # 1,001 objects: ceil(328.2 / 32) x 32 = 352 MiB, the same size as 1,000; only the entries changed.
    "inventory 1,000 -> 1,001 -> 1,000, same size: each change restarts the delay": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (300, ObjectCounts(1001, 1001), Outcome.POSTPONED),
            (600, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (1199, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (1200, ObjectCounts(1000, 1000), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 600.01, 600.01, 1.01],
    ),
    "the source alone changes (1,000 -> 100), the inventory stays: the delay is not restarted": (
        [
            (0, ObjectCounts(1000, 100), Outcome.POSTPONED),
            (300, ObjectCounts(100, 100), Outcome.POSTPONED),
            (600, ObjectCounts(100, 100), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 300.01],
    ),
}


@pytest.mark.parametrize("name", list(DELAY_CASES))
def test_the_scale_down_delay(name: str) -> None:
    events, applied, rechecks = DELAY_CASES[name]
    r = rig(FakePort(size=AT_5000))
    start = r.clock.now
    for after, counts, outcome in events:
        r.clock.now = start + after
        assert r.reconcile(counts) == outcome, f"at {after} s"
    assert r.port.applied == applied
    assert r.rechecks == rechecks, "the held scale-down is looked at again when it is due"


def test_the_restart_is_counted_when_the_in_place_target_falls_back_to_the_template() -> None:
    r = rig(FakePort(restarts=False))
    restarts = metric("objcount_restarts_caused_total")
    assert r.reconcile(ObjectCounts(1000, 1000)) == Outcome.SCALED_UP  # resized in place
    assert metric("objcount_restarts_caused_total") == restarts
    assert r.executor.states[KEY].decision.restarts == ()  # type: ignore[union-attr]
    r.port.restarts = True  # the resize is infeasible: the template changes, the pod restarts
    r.clock.now = 2000.0
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert metric("objcount_restarts_caused_total") == restarts + 1
    assert r.executor.states[KEY].decision.restarts == (2000.0,)  # type: ignore[union-attr]


def test_restarts_that_happened_hold_scale_downs_at_the_cap() -> None:
    r = rig(FakePort(restarts=True), max_restarts=1)
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    r.reconcile(ObjectCounts(100, 100))
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.POSTPONED
    assert "restart cap" in r.executor.states[KEY].decision.reason  # type: ignore[union-attr]


def test_resizes_that_did_not_restart_never_reach_the_cap() -> None:
    r = rig(FakePort(restarts=False), max_restarts=1)
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    r.reconcile(ObjectCounts(100, 100))
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN


def test_another_writers_size_is_reported_reapplied_then_left_alone() -> None:
    theirs = Resources(50, 64, 50, 64)
    r = rig(FakePort(generation_after_apply=2))
    r.reconcile(ObjectCounts(1000, 1000))
    assert r.executor.states[KEY].written == (2, AT_1000)
    reverted = metric("objcount_apply_errors_total", target="fake", reason="reverted")
    r.port.in_rsync = theirs
    for generation in (3, 4, 5):  # three reverts in the hour are fought back
        r.port.generation_after_apply = generation
        assert r.reconcile(ObjectCounts(1000, 1000), annotated({}, generation)) == Outcome.SCALED_UP
        r.clock.now += 60
    assert r.port.applied == [AT_1000] * 4
    assert r.reconcile(ObjectCounts(1000, 1000), annotated({}, 6)) == Outcome.HANDS_OFF
    assert r.port.applied == [AT_1000] * 4, "the fourth revert in the hour is not fought"
    assert r.executor.states[KEY].decision.resources == theirs  # type: ignore[union-attr]
    assert metric("objcount_apply_errors_total", target="fake", reason="reverted") == reverted + 4
    r.clock.now += 3600
    assert r.reconcile(ObjectCounts(1000, 1000), annotated({}, 6)) == Outcome.SCALED_UP


def test_our_own_write_seen_in_a_stale_cache_is_no_revert() -> None:
    r = rig(FakePort(generation_after_apply=2))
    r.reconcile(ObjectCounts(1000, 1000))
    r.port.in_rsync = AT_100  # the cache still shows the size before our write
    assert r.reconcile(ObjectCounts(1000, 1000), annotated({}, 2)) == Outcome.UNCHANGED
    assert r.port.applied == [AT_1000]


def test_pruned_status_fields_move_the_counts_to_annotations_from_then_on() -> None:
    fallbacks = metric("objcount_pruned_status_fallbacks_total")
    written = metric("objcount_status_writes_total", destination="annotations")
    r = rig(FakePort(count_write=CountsWritten(("annotations",), fell_back=True)))
    r.reconcile(ObjectCounts(100, 100))
    r.port.count_write = CountsWritten(("annotations",))
    r.reconcile(ObjectCounts(100, 120))
    assert [in_annotations for _, in_annotations in r.port.counts] == [False, True]
    assert metric("objcount_pruned_status_fallbacks_total") == fallbacks + 1, "said once, when it happened"
    assert metric("objcount_status_writes_total", destination="annotations") == written + 2


def test_a_deleted_rsync_is_forgotten() -> None:
    r = rig()
    r.reconcile(ObjectCounts(5000, 5000))
    assert r.executor.reconcile(KEY, None, ObjectCounts()) == Outcome.GONE
    assert KEY not in r.executor.states
    assert REGISTRY.get_sample_value("objcount_objects", {"rsync": str(KEY), "count": "sync"}) is None


def test_no_decision_before_startup_is_complete() -> None:
    """Until the caches synced (and with them the counts stored on the RSync) nothing is read or sized."""
    port = FakePort(size=AT_100)
    controller = Controller(FakeApi(), Scope.cluster(), port=port)
    deferred = metric("objcount_decisions_total", outcome="deferred_startup")
    assert controller.reconcile(KEY) == Outcome.DEFERRED_STARTUP
    assert (port.reads, port.applied, port.size) == ([], [], AT_100)
    assert metric("objcount_decisions_total", outcome="deferred_startup") == deferred + 1


def test_a_failed_write_is_retried_with_backoff_a_steps_own_error_waits_for_a_change() -> None:
    """Only the write that failed may pass next time."""
    failing = rig(FakePort(size=AT_100, failing={"apply"}))
    assert retried(failing.reconcile(ObjectCounts(5000, 5000)))
    unknown = rig(FakePort(size=AT_100))
    outcome = unknown.reconcile(ObjectCounts(5000, 5000), annotated({"objcount.dev/platform": "mars"}))
    assert outcome == Outcome.ERROR
    assert not retried(outcome), "an unknown platform asked gives the same error every time"


def test_a_steps_own_error_is_told_once_while_it_lasts(caplog: pytest.LogCaptureFixture) -> None:
    r = rig(FakePort(size=AT_100))
    mars = annotated({"objcount.dev/platform": "mars"})
    told = []
    for rsync in (mars, mars, annotated({}), mars):
        caplog.clear()
        with caplog.at_level(logging.DEBUG):
            r.reconcile(ObjectCounts(5000, 5000), rsync)
        told.append([rec.levelno for rec in caplog.records if "unknown objcount.dev/platform" in rec.message])
    assert told[:2] == [[logging.ERROR], [logging.DEBUG]], "the same error again is not news"
    assert told[3] == [logging.ERROR], "told again once it had gone"


def test_a_write_the_api_server_throttled_keeps_its_retry_after_for_the_retry() -> None:
    class Throttled(FakePort):
        def write(
            self, key: RSyncKey, reading: Reading, apply: Resources | None, publish: Mapping[str, str | None]
        ) -> Written:
            raise WriteError(Reason.TRANSIENT, "HTTP 429 TooManyRequests", retry_after=7.0)

    test = rig(Throttled(size=AT_100))
    assert retried(test.reconcile(ObjectCounts(5000, 5000)))
    assert test.executor.retry_after == {KEY: 7.0}


def test_one_hung_worker_is_unhealthy_while_the_others_turn() -> None:
    controller = Controller(FakeApi(), Scope.cluster(), port=FakePort())
    now = time.monotonic()
    controller.heartbeats.update({"reconcile-0": now, "reconcile-1": now - 31})
    assert "worker reconcile-1 stalled" in controller.unhealthy()
    assert "worker reconcile-0 stalled" not in controller.unhealthy()


def test_a_crash_in_any_stage_is_a_failed_outcome() -> None:
    r = rig()
    errors = metric("objcount_reconcile_errors_total", stage="crash")
    assert r.executor.reconcile(KEY, "not an object", ObjectCounts(5000, 5000)) == Outcome.FAILED  # type: ignore[arg-type]
    assert metric("objcount_reconcile_errors_total", stage="crash") == errors + 1


def test_an_error_keeps_the_state_it_had() -> None:
    r = rig()
    r.reconcile(ObjectCounts(1000, 1000))
    before = r.executor.states[KEY]
    r.port.failing.add("apply")
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.FAILED
    after = r.executor.states[KEY]
    assert replace(after, failed=None) == before, "only the failure is remembered"
    assert after.failed == ("rejected", Resources(1125, 1152, 1125, 1152))
    assert isinstance(before, RSyncState)


def test_a_failure_that_repeats_is_logged_once_and_counted_every_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = rig(FakePort(failing={"apply"}))
    rejected = metric("objcount_apply_errors_total", target="fake", reason="rejected")
    with caplog.at_level(logging.DEBUG, logger="autoscaler.service.controller"):
        for _ in range(3):
            assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.FAILED
        errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR and "failed" in rec.message]
        assert len(errors) == 1, "the same failure of the same size is said once"
        assert metric("objcount_apply_errors_total", target="fake", reason="rejected") == rejected + 3
        r.port.failing = set()
        assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
        r.port.failing = {"apply"}
        assert r.reconcile(ObjectCounts(20000, 20000)) == Outcome.FAILED
        errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR and "failed" in rec.message]
    assert len(errors) == 2, "after a success, a new failure is said again"


# Prototype preset: 100 objects need 157m/160Mi. Killed at 160Mi: max(160 x 1.5, 160 + 128) = 288 MiB, on
# the 32 MiB grid; CPU 288 x 1000 / 1024 = 281.25 -> 282m.
AT_FLOOR = Resources(282, 288, 282, 288)
KILLED = OomKill("2026-11-22T10:00:00Z", 160)
FLOOR_ANNOTATION = '{"memory":"288Mi","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}'
KILLED_AT_WALL = 1795341600.0  # 2026-11-22T10:00:00Z


def test_an_oom_kill_raises_the_size_at_once_and_the_floor_outlives_a_restart_then_decays() -> None:
    r = rig(FakePort(size=AT_100, oom_kill=KILLED))
    r.executor.wall_clock = lambda: KILLED_AT_WALL
    floors = metric("objcount_oom_floors_total")
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_UP
    assert r.port.applied == [AT_FLOOR]
    assert r.port.published[-1][OOM_FLOOR_ANNOTATION] == FLOOR_ANNOTATION
    assert metric("objcount_oom_floors_total") == floors + 1
    # The Pod still reports the same kill (the annotation not yet in the cache): no second raise.
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.UNCHANGED
    assert metric("objcount_oom_floors_total") == floors + 1

    # A restarted service: nothing remembered but the RSync's annotation; the same kill is reported.
    r = rig(FakePort(size=AT_FLOOR, oom_kill=KILLED))
    r.executor.wall_clock = lambda: KILLED_AT_WALL + DAY
    kept = annotated({OOM_FLOOR_ANNOTATION: FLOOR_ANNOTATION})
    assert r.reconcile(ObjectCounts(100, 100), kept) == Outcome.UNCHANGED
    assert r.port.applied == []
    assert metric("objcount_oom_floors_total") == floors + 1

    # A week without a kill (the new Pod reports none): the floor goes, and the size follows the count
    # again after the usual scale-down delay.
    r.port.oom_kill = None
    r.executor.wall_clock = lambda: KILLED_AT_WALL + 7 * DAY
    assert r.reconcile(ObjectCounts(100, 100), kept) == Outcome.POSTPONED
    assert r.port.published[-1][OOM_FLOOR_ANNOTATION] is None, "the floor annotation is removed"
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(100, 100), annotated({})) == Outcome.SCALED_DOWN
    assert r.port.applied == [AT_100]


def test_an_oom_kill_that_cannot_be_read_leaves_the_sizing_to_the_counts() -> None:
    r = rig(FakePort(failing={"oom"}))
    errors = metric("objcount_reconcile_errors_total", stage="read")
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert r.port.applied == [AT_5000]
    assert metric("objcount_reconcile_errors_total", stage="read") == errors + 1


# ----- a new commit: sized for both commits until the reconciler has finished the new one -----------------
# By hand: 1 MiB per object of any kind, 0.1 MiB per ConfigMap, no base, 1 MiB steps (minimum 1 MiB).
KINDS = Sizing(
    "kinds",
    base_mib=Fraction(0),
    mib_per_object=Fraction(1),
    mib_per_object_of_kind=(("ConfigMap", Fraction(1, 10)),),
    step_mib=1,
    min_mib=1,
    cpu_min_m=1,
)


def reporting(
    commit_fetched: str, commit_synced: str, annotations: Mapping[str, str | None] | None = None
) -> RSync:
    """An RSync whose reconciler fetched one commit and finished another (the same: nothing pending)."""
    syncing = "True" if commit_fetched != commit_synced else "False"
    return {
        "metadata": {
            "name": KEY.name,
            "generation": 1,
            "annotations": {k: v for k, v in (annotations or {}).items() if v is not None},
        },
        "status": {
            "source": {"commit": commit_fetched},
            "sync": {"commit": commit_synced},
            "conditions": [{"type": "Syncing", "status": syncing, "message": "Sync Completed"}],
            "lastSyncedCommit": commit_synced,
        },
    }


def configmaps(objects: int, inventory: int, commit: str) -> ObjectCounts:
    return ObjectCounts(objects, inventory, source_kinds=(("ConfigMap", objects),), source_commit=commit)


def test_objects_still_to_prune_are_sized_as_what_the_last_finished_commit_held() -> None:
    port = FakePort(size=None)
    config = DecideConfig(Profile(KINDS, STANDARD), Hysteresis(DELAY, 100), 3)
    clock = Clock()
    executor = Executor(port, config, clock, lambda key, delay: None)
    # 800 ConfigMaps synced, and the implicit Namespace: 80 + 1 = 81 MiB.
    executor.reconcile(KEY, reporting("a", "a"), configmaps(800, 801, "a"))
    assert [r.memory_request_mib for r in port.applied] == [81]
    recorded = {k: v for p in port.published for k, v in p.items() if k == SYNCED_SOURCE_ANNOTATION}
    assert recorded == {SYNCED_SOURCE_ANNOTATION: '{"objects":800,"kib":null,"kinds":{"ConfigMap":800}}'}
    # A commit of 200 ConfigMaps, seen before the reconciler fetched it, then while it prunes: the 600 to
    # prune are ConfigMaps (81 MiB), not objects of any kind (200 x 0.1 + 601 x 1 = 621 MiB).
    for rsync in (reporting("a", "a"), reporting("b", "a")):
        assert executor.reconcile(KEY, rsync, configmaps(200, 801, "b")) == Outcome.UNCHANGED
    # A restart of the service in the middle of the prune: the record on the RSync says the same.
    again = Executor(port, config, clock, lambda key, delay: None)
    assert again.reconcile(KEY, reporting("b", "a", recorded), configmaps(200, 801, "b")) == Outcome.UNCHANGED
    assert [r.memory_request_mib for r in port.applied] == [81]
    # Pruned and finished: 200 x 0.1 + 1 = 21 MiB once the lower target held for the delay.
    assert again.reconcile(KEY, reporting("b", "b", recorded), configmaps(200, 201, "b")) == Outcome.POSTPONED
    clock.now += DELAY
    assert (
        again.reconcile(KEY, reporting("b", "b", recorded), configmaps(200, 201, "b")) == Outcome.SCALED_DOWN
    )
    assert [r.memory_request_mib for r in port.applied] == [81, 21]


# ----- a source commit Config Sync rejects, and one we could not read in full ----------------------------
REJECTED = 'Config Sync rejects commit 0123456789ab: KNV2010 b.yaml: missing field "metadata.name"'


def test_a_rejected_commit_lowers_nothing_and_says_why_until_a_good_commit_comes() -> None:
    r = rig(FakePort(size=AT_5000))
    # The last good commit had 5,000 objects; the newest is rejected: the observer keeps the good count.
    rejected = ObjectCounts(5000, 5000, source_rejected=REJECTED)
    assert r.reconcile(rejected) == Outcome.UNCHANGED
    assert r.port.published[-1]["objcount.dev/source-rejected"] == REJECTED
    assert metric("objcount_source_rejected", rsync=str(KEY)) == 1
    # The inventory shrinks meanwhile (another sync of the RSync's own objects, a manual delete): the
    # size stays, whatever the delay, while the newest commit is rejected.
    smaller = ObjectCounts(100, 100, source_rejected=REJECTED)
    assert r.reconcile(smaller) == Outcome.POSTPONED
    r.clock.now += 10 * DELAY
    assert r.reconcile(smaller) == Outcome.POSTPONED
    assert r.port.applied == []
    assert r.executor.states[KEY].decision is not None
    assert REJECTED in r.executor.states[KEY].decision.reason
    # A good commit: the annotation goes, and the usual scale-down delay starts.
    holding = annotated({"objcount.dev/source-rejected": REJECTED})
    assert r.reconcile(ObjectCounts(100, 100), holding) == Outcome.POSTPONED
    assert r.port.published[-1]["objcount.dev/source-rejected"] is None
    assert metric("objcount_source_rejected", rsync=str(KEY)) == 0
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN


def test_a_rejected_commit_does_not_hold_a_scale_up_the_counts_call_for() -> None:
    # An OOM floor or a bigger inventory still raises the size: only lowering is held.
    r = rig(FakePort(size=AT_100))
    assert r.reconcile(ObjectCounts(100, 5000, source_rejected=REJECTED)) == Outcome.SCALED_UP
    assert r.port.applied == [AT_5000]


def test_a_partly_read_source_raises_but_never_lowers() -> None:
    r = rig(FakePort(size=AT_1000))
    assert r.reconcile(ObjectCounts(5000, 100, source_partial=True)) == Outcome.SCALED_UP
    r2 = rig(FakePort(size=AT_5000))
    assert r2.reconcile(ObjectCounts(100, 100, source_partial=True)) == Outcome.POSTPONED
    r2.clock.now += 10 * DELAY
    assert r2.reconcile(ObjectCounts(100, 100, source_partial=True)) == Outcome.POSTPONED
    assert r2.port.applied == []
    decision = r2.executor.states[KEY].decision
    assert decision is not None
    assert "some source files were not read" in decision.reason


def test_a_rejection_is_an_event_on_the_rsync() -> None:
    r = rig(FakePort(size=AT_5000))
    events: list[object] = []
    r.executor.events = events.append
    rsync: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "uid": "u1", "generation": 1}}
    r.reconcile(ObjectCounts(5000, 5000, source_rejected=REJECTED), rsync)
    assert [(e.reason, e.type, e.note) for e in events] == [("SourceRejected", "Warning", REJECTED)]  # type: ignore[attr-defined]


# ----- in place: a resize the kubelet defers, a size that goes through the fallback ------------------------
def in_place_rig(port: FakePort, *, in_place: bool = False, profile: Profile | None = None) -> Rig:
    port.resizes_running = in_place
    clock, rechecks = Clock(), []
    config = DecideConfig(
        profile or Profile(PROTOTYPE, STANDARD),
        Hysteresis(DELAY, 100),
        reread_current=True,
        in_place=in_place,
    )
    executor = Executor(port, config, clock, lambda key, delay: rechecks.append(delay))
    return Rig(port, clock, executor, rechecks)


# The size for 5,000 objects with the CPU of the size for 100 (worked by hand from AT_100 and AT_5000).
MEMORY_FIRST = Resources(157, 1152, 157, 1152)
SHORT_OF_CPU = "Node didn't have enough resource: cpu, requested: 1125, used: 1900, capacity: 2000"
SHORT_OF_MEMORY = "Node didn't have enough resource: memory, requested: 1207959552, used: 7e9, capacity: 8e9"


def test_a_deferred_resize_asks_for_its_memory_first_then_waits_for_the_cpu() -> None:
    """The Pod runs at the size for 100 objects; the size for 5,000 was asked for and the kubelet defers
    it (the node's CPU is all requested): its memory is asked for alone, CPU as it runs; once that is
    in, more CPU is not asked for a minute (CPU_HOLD_S: it would be deferred again), then asked again, and
    while the kubelet defers it, nothing is asked or rolled out: postponed, looked at again within 30 s;
    once the kubelet applies it, the size stands."""
    port = FakePort(size=AT_100, deferred=(AT_5000, SHORT_OF_CPU))
    test = in_place_rig(port, in_place=True)
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied == [MEMORY_FIRST]
    assert test.rechecks == [10.0], "the kubelet's answer looked at soon"
    port.deferred = None  # the kubelet applied the memory
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert port.applied == [MEMORY_FIRST], "more CPU not asked yet"
    assert test.rechecks[-1] == pytest.approx(60.0, abs=0.1), "looked at again when the hold ends"
    test.clock.now += 60.0
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied == [MEMORY_FIRST, AT_5000]
    assert test.rechecks[-1] == 10.0
    port.size, port.deferred = MEMORY_FIRST, (AT_5000, SHORT_OF_CPU)  # and deferred the CPU again
    test.rechecks.clear()
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert port.applied == [MEMORY_FIRST, AT_5000]
    assert test.rechecks == [30.0, 30.0]
    port.size, port.deferred = AT_5000, None  # the kubelet found room
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.UNCHANGED
    assert len(port.applied) == 2


def test_while_the_cpu_is_held_a_larger_count_raises_the_memory_at_once_and_the_hold_ends_on_time() -> None:
    """The kubelet deferred the size for 1,000 objects (no CPU on the node): its memory went first (CPU
    as it runs, 157m). 30 s later the count grows to 5,000 and no resize is deferred: the memory for
    5,000 is asked at once with the CPU held (157m/1152Mi), not the whole size; the hold still ends a
    minute after the deferral, not after the new ask. By hand: 1,000 objects, 352 MiB at 157m."""
    port = FakePort(size=AT_100, deferred=(AT_1000, SHORT_OF_CPU))
    test = in_place_rig(port, in_place=True)
    assert test.reconcile(ObjectCounts(1000, 1000)) == Outcome.SCALED_UP
    assert port.applied == [Resources(157, 352, 157, 352)]
    port.deferred = None
    test.clock.now += 30.0
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied[-1] == MEMORY_FIRST
    test.clock.now += 30.0
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied[-1] == AT_5000, "the hold ended a minute after the deferral"


def test_a_deferred_resize_whose_memory_does_not_fit_either_is_waited_out_not_asked_again() -> None:
    port = FakePort(size=AT_100, deferred=(AT_5000, SHORT_OF_MEMORY))
    test = in_place_rig(port)
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    port.size, port.deferred = AT_100, (MEMORY_FIRST, SHORT_OF_MEMORY)  # deferred as well
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert port.applied == [MEMORY_FIRST]
    assert test.rechecks[-2:] == [30.0, 30.0]


def test_on_autopilot_a_deferred_resize_is_waited_out_whole() -> None:
    """Autopilot's ratio rules tie the pod's CPU to its memory: no memory-only size is asked for. By hand
    (prototype on Autopilot, limits = requests): 100 objects, 157m/160Mi, rise to the pod minimum of
    250m/512Mi; 5,000 objects, 1125m/1152Mi: CPU to the 250m step, 1250m, then memory to 1 GiB per
    vCPU, 1280Mi."""
    running, asked = Resources(250, 512, 250, 512), Resources(1250, 1280, 1250, 1280)
    port = FakePort(size=running, deferred=(asked, SHORT_OF_CPU))
    test = in_place_rig(port, profile=Profile(PROTOTYPE, AUTOPILOT))
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED
    assert port.applied == []


def test_a_wait_for_room_is_told_once_by_an_event_and_shown_while_it_lasts() -> None:
    """The kubelet defers the whole Autopilot size (above): an Event ResizeDeferred and the counter when
    the wait begins, not again on the next reconcile; the gauge and the annotation (the size deferred)
    while it lasts; once the kubelet applied it, the gauge is 0 and the annotation removed."""
    running, asked = Resources(250, 512, 250, 512), Resources(1250, 1280, 1250, 1280)
    port = FakePort(size=running, deferred=(asked, SHORT_OF_MEMORY))
    test = in_place_rig(port, profile=Profile(PROTOTYPE, AUTOPILOT))
    events: list[object] = []
    test.executor.events = events.append
    begun = metric("objcount_resizes_deferred_total")
    rsync: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "uid": "u1", "generation": 1}}
    assert test.reconcile(ObjectCounts(5000, 5000), rsync) == Outcome.POSTPONED
    assert test.reconcile(ObjectCounts(5000, 5000), rsync) == Outcome.POSTPONED
    assert [e.reason for e in events] == ["ResizeDeferred"]  # type: ignore[attr-defined]
    assert SHORT_OF_MEMORY in events[0].note  # type: ignore[attr-defined]
    assert metric("objcount_resizes_deferred_total") == begun + 1
    assert metric("objcount_waiting_for_room", rsync=str(KEY)) == 1
    shown = '{"requests":{"cpu":"1250m","memory":"1280Mi"},"limits":{"cpu":"1250m","memory":"1280Mi"}}'
    assert [p[WAITING_ANNOTATION] for p in port.published if WAITING_ANNOTATION in p] == [shown, shown]
    port.size, port.deferred = asked, None  # the node found room
    waiting: RSync = {**rsync, "metadata": {**rsync["metadata"], "annotations": {WAITING_ANNOTATION: shown}}}
    assert test.reconcile(ObjectCounts(5000, 5000), waiting) == Outcome.UNCHANGED
    assert metric("objcount_waiting_for_room", rsync=str(KEY)) == 0
    assert port.published[-1][WAITING_ANNOTATION] is None
    assert [e.reason for e in events] == ["ResizeDeferred"]  # type: ignore[attr-defined]


def test_a_new_size_while_a_resize_is_deferred_is_asked_memory_first() -> None:
    """The kubelet defers the size for 1,000 objects; the commit grows to 5,000: that size replaces the
    deferred one, its memory asked with the CPU the Pod runs (more CPU would wait on that node too), then
    the whole of it once that is in. A new size that asks no more CPU than runs is asked whole."""
    port = FakePort(size=AT_100, deferred=(AT_1000, SHORT_OF_CPU))
    test = in_place_rig(port)
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied == [MEMORY_FIRST]
    decision = test.executor.states[KEY].decision
    assert decision is not None
    assert "first: requests 157m/1152Mi" in decision.reason
    port.size, port.deferred = MEMORY_FIRST, None  # the kubelet applied the memory
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.POSTPONED, "more CPU held a minute"
    test.clock.now += 60.0
    assert test.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert port.applied == [MEMORY_FIRST, AT_5000]
    lower = FakePort(size=AT_5000, deferred=(AT_1000, SHORT_OF_CPU))
    test = in_place_rig(lower)
    assert test.reconcile(ObjectCounts(100, 100)) == Outcome.POSTPONED, "lower: the delay as ever"
    test.clock.now += 2 * DELAY
    assert test.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN
    assert lower.applied == [AT_100], "less CPU than runs: asked whole"


def test_a_size_above_the_largest_node_is_capped_said_and_counted() -> None:
    """10,000 objects need 2094m/2144Mi (prototype); the largest node holds 2000m/2048Mi: capped to
    1980m/1920Mi, limits 2000m/2048Mi (worked in test_node_room), with a warning Event each time."""
    port = FakePort(size=AT_100, node_room=NodeRoom("small", 2000, 2048))
    test = rig(port)
    events: list[object] = []
    test.executor.events = events.append
    before = metric("objcount_capped_total", target="fake")
    rsync: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "uid": "u1", "generation": 1}}
    assert test.reconcile(ObjectCounts(10_000, 10_000), rsync) == Outcome.SCALED_UP
    assert port.applied == [Resources(1980, 1920, 2000, 2048)]
    assert metric("objcount_capped_total", target="fake") == before + 1
    assert [e.reason for e in events] == ["ScaledUp", "CappedToNode"]  # type: ignore[attr-defined]
    assert test.reconcile(ObjectCounts(10_000, 10_000)) == Outcome.UNCHANGED, (
        "the cap holds, not raised again"
    )


def test_a_size_applied_through_the_fallback_is_said_and_counted() -> None:
    why = "the API server serves no pods/resize; applied through rsync-override"
    port = FakePort(size=AT_100, fell_back=why)
    test = in_place_rig(port)
    events: list[object] = []
    test.executor.events = events.append
    before = metric("objcount_fallbacks_total", target="fake")
    rsync: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "uid": "u1", "generation": 1}}
    assert test.reconcile(ObjectCounts(5000, 5000), rsync) == Outcome.SCALED_UP
    assert metric("objcount_fallbacks_total", target="fake") == before + 1
    assert [(e.reason, e.type) for e in events] == [("ScaledUp", "Normal"), ("FellBack", "Warning")]  # type: ignore[attr-defined]
    assert why in events[1].note  # type: ignore[attr-defined]


TEMPLATE = Resources(50, 200)  # Config Sync's Standard template: requests only


def test_in_place_a_pod_at_its_templates_size_is_sized_at_once_even_down() -> None:
    """The first Pod runs its template's 50m/200Mi; 100 objects need 157m/160Mi (less memory): no
    scale-down delay holds a size we never set, it is applied at once and said as a scale-down."""
    port = FakePort(size=TEMPLATE)
    test = in_place_rig(port, in_place=True)
    assert test.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN
    assert port.applied == [AT_100]
    # A new Pod started from the template again (our webhook down): sized at once again.
    port.size = TEMPLATE
    assert test.reconcile(ObjectCounts(100, 100)) == Outcome.SCALED_DOWN
    assert port.applied == [AT_100, AT_100]


def test_in_place_after_a_restart_the_size_recorded_on_the_rsync_is_ours_and_held() -> None:
    """A new service process: the Pod runs 1,125m/1,152Mi, which the RSync records as applied (ours):
    fewer objects wait for the scale-down delay, as they would have without the restart."""
    port = FakePort(size=AT_5000)
    test = in_place_rig(port, in_place=True)
    rsync = annotated({APPLIED_ANNOTATION: AT_5000_ANNOTATION})
    assert test.reconcile(ObjectCounts(100, 100), rsync) == Outcome.POSTPONED
    assert port.applied == []


@pytest.mark.parametrize(
    ("reads_source", "counts", "unknown"),
    [
        (False, ObjectCounts(None, 100), 0),  # cluster mode reads no source: nothing is missing
        (False, ObjectCounts(100, None), 1),  # no inventory yet
        (True, ObjectCounts(None, 100), 1),  # a sidecar that could not count its source
        (True, ObjectCounts(100, 100), 0),
    ],
)
def test_a_count_is_unknown_only_where_the_service_reads_it(
    reads_source: bool, counts: ObjectCounts, unknown: int
) -> None:
    rig(reads_source=reads_source).reconcile(counts)
    assert metric("objcount_count_unknown", rsync=str(KEY)) == unknown
