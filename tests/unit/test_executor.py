"""The loop's `Executor` carrying out a Decision, without a cluster: an in-memory fake of the port. What
is decided is test_decide's (the pure `decide`, each size worked by hand); here: one reconcile reads once,
writes what the plan says and keeps the state after that write, delivers what is said and shown as log
lines, Events and metrics, asks for a recheck through `later`, keeps the wait an API server asked for,
records the counts after the size (also when sizing failed), forgets a deleted RSync, and ends a crash
as a failed reconcile; and the controller around it (startup, retries, a hung worker).

Sizes are worked by hand for the prototype preset on Standard, no other containers:
memory = ceil((128 + 0.2 x objects) / 32) x 32 MiB, CPU = ceil(memory x 1000 / 1024) m, limits = requests.
  100 objects -> 148 -> 160 MiB, 157 m;  1,000 -> 328 -> 352 MiB, 344 m;  5,000 -> 1,128 -> 1,152 MiB, 1,125 m.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest
from prometheus_client import REGISTRY

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    PLATFORM_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    TARGET_ANNOTATION,
)
from autoscaler.core.calibration import Sampled
from autoscaler.core.observation import Needs, Reading, RSyncView, Unread
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig
from autoscaler.core.reasons import ReadError, Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import PROTOTYPE, STANDARD, Profile
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
    owner: str | None = None  # why the target must not write (held_by_owner)
    failing: set[str] = field(default_factory=set)
    oom_kill: OomKill | None = None  # what the reconciler's Pod reports
    count_write: CountsWritten = field(default_factory=lambda: CountsWritten(("status",)))
    usage: Sampled | None = None  # what the metrics API reports (None: not served)
    fell_back: str | None = None  # what an apply reports: why it went through the fallback
    pod: Pod | None = None  # the reconciler Pod as listed
    resizes_running: bool = False  # a size written reaches the running reconciler (in place)
    room_wanted: str | None = None  # another reconciler on its node waits for room
    applied: list[Resources] = field(default_factory=list)
    published: list[dict[str, str | None]] = field(default_factory=list)
    counts: list[tuple[ObjectCounts, bool]] = field(default_factory=list)
    reads: list[Needs] = field(default_factory=list)

    @property
    def target(self) -> FakeTarget:
        return FakeTarget()

    def read(self, key: RSyncKey, view: RSyncView, needs: Needs) -> Reading:
        self.reads.append(needs)
        if needs.current and "current" in self.failing:
            raise ReadError(Reason.FORBIDDEN, "reading the size: forbidden")
        unread = ()
        if "oom" in self.failing:
            unread = (Unread("read", "cannot read the reconciler's OOM kills: listing the pod: forbidden"),)
        return Reading(
            current=self.size if needs.current else None,
            held_by_owner=self.owner,
            oom_kill=None if "oom" in self.failing else self.oom_kill,
            unread=unread,
            pod=self.pod,
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
            applied = Applied(apply, self.restarts, fell_back=self.fell_back)
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
    steady_delay: float = 0.0,
) -> Rig:
    port = port or FakePort()
    port.resizes_running = port.resizes_running or in_place
    clock, rechecks = Clock(), []
    config = DecideConfig(
        Profile(PROTOTYPE, STANDARD),
        Hysteresis(DELAY, max_restarts, steady_delay_s=steady_delay),
        3,
        reread_current=in_place,
        in_place=in_place,
        reads_source=reads_source,
        target=port.target.name,
    )
    executor = Executor(port, config, clock, lambda key, delay: rechecks.append(delay))
    return Rig(port, clock, executor, rechecks)


def metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def annotated(annotations: dict[str, str], generation: int = 1) -> RSync:
    return {"metadata": {"name": KEY.name, "generation": generation, "annotations": annotations}}


def with_uid() -> RSync:
    """An RSync with a uid: Events can be recorded on it."""
    return {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "uid": "u1", "generation": 1}}


# ----- one reconcile: named cases (what is decided in each: test_decide's TABLE) ---------------------------
@dataclass(frozen=True)
class Case:
    observed: ObjectCounts
    outcome: Outcome
    applied: list[Resources]
    failing: frozenset[str] = frozenset()
    counts_recorded: bool = True


CASES = {
    "more objects: scale up at once": Case(ObjectCounts(5000, 5000), Outcome.SCALED_UP, [AT_5000]),
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
    assert r.reconcile(case.observed) == case.outcome
    assert r.port.applied == case.applied
    assert r.port.counts == ([(case.observed, False)] if case.counts_recorded else [])
    assert metric("objcount_decisions_total", outcome=case.outcome) == decisions + 1, (
        "every outcome is counted"
    )


def test_a_reconcile_reads_once_writes_the_plan_once_and_keeps_the_state_after_the_write() -> None:
    """The size is read until a decision was made (then remembered); the plan's size and annotations are
    written in one write; the state kept is the one after that write (the restart it caused counted at the
    clock's time)."""
    r = rig()
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert r.port.reads == [Needs(current=True, nodes=True)]
    assert r.port.applied == [AT_5000]
    assert r.port.published == [
        {
            RECOMMENDED_ANNOTATION: AT_5000_ANNOTATION,
            APPLIED_ANNOTATION: AT_5000_ANNOTATION,
            TARGET_ANNOTATION: "fake",
        }
    ]
    decision = r.executor.states[KEY].decision
    assert decision is not None
    assert decision.restarts == (1000.0,)
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.UNCHANGED
    assert r.port.reads[1:] == [Needs(current=False, nodes=True)]


def test_a_held_scale_down_is_looked_at_again_through_later() -> None:
    r = rig(FakePort(size=AT_5000))
    assert r.reconcile(ObjectCounts(100, 100)) == Outcome.POSTPONED
    assert r.rechecks == [DELAY + 0.01], "the held scale-down is looked at again when it is due"


def test_what_is_said_is_logged_at_its_level_for_its_rsync(caplog: pytest.LogCaptureFixture) -> None:
    r = rig(FakePort(size=AT_100))
    mars = annotated({PLATFORM_ANNOTATION: "mars"})
    told = []
    for _ in range(2):
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="autoscaler.service.controller"):
            r.reconcile(ObjectCounts(5000, 5000), mars)
        told += [
            (rec.levelno, rec.message.startswith(f"{KEY}: "))
            for rec in caplog.records
            if "unknown objcount.dev/platform" in rec.message
        ]
    assert told == [(logging.ERROR, True), (logging.DEBUG, True)], "the same error again is not news"


def test_a_count_unknown_is_shown_on_metrics_for_its_rsync() -> None:
    r = rig()
    r.reconcile(ObjectCounts(100, None))  # no inventory yet
    assert metric("objcount_count_unknown", rsync=str(KEY)) == 1
    r.reconcile(ObjectCounts(100, 100))
    assert metric("objcount_count_unknown", rsync=str(KEY)) == 0


REJECTED = 'Config Sync rejects commit 0123456789ab: KNV2010 b.yaml: missing field "metadata.name"'


def test_a_rejection_is_an_event_on_the_rsync() -> None:
    r = rig(FakePort(size=AT_5000))
    events: list[object] = []
    r.executor.events = events.append
    r.reconcile(ObjectCounts(5000, 5000, source_rejected=REJECTED), with_uid())
    assert [(e.reason, e.type, e.note) for e in events] == [("SourceRejected", "Warning", REJECTED)]  # type: ignore[attr-defined]


def test_a_size_applied_through_the_fallback_is_said_and_counted() -> None:
    """What the write reports (here: the fallback it went through) reaches what is said after it."""
    why = "the API server serves no pods/resize; applied through rsync-override"
    test = rig(FakePort(size=AT_100, fell_back=why))
    events: list[object] = []
    test.executor.events = events.append
    before = metric("objcount_fallbacks_total", target="fake")
    assert test.reconcile(ObjectCounts(5000, 5000), with_uid()) == Outcome.SCALED_UP
    assert metric("objcount_fallbacks_total", target="fake") == before + 1
    assert [(e.reason, e.type) for e in events] == [("ScaledUp", "Normal"), ("FellBack", "Warning")]  # type: ignore[attr-defined]
    assert why in events[1].note  # type: ignore[attr-defined]


# ----- the counts, a deleted RSync --------------------------------------------------------------------------
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


# ----- the controller around it: startup, retries, workers, a crash -----------------------------------------
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
    outcome = unknown.reconcile(ObjectCounts(5000, 5000), annotated({PLATFORM_ANNOTATION: "mars"}))
    assert outcome == Outcome.ERROR
    assert not retried(outcome), "an unknown platform asked gives the same error every time"


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
