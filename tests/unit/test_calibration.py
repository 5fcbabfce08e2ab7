"""Calibration without a port: the rules of autoscaler.core.calibration, its annotation, and the step that
learns from a finished sync (through the executor, on the in-memory port of test_executor).

Worked by hand for the prototype preset on Standard (test_executor's rig): 1,000 objects -> 128 + 0.2 x
1000 = 328 MiB raw -> 352 MiB. A reconciler seen at 150 MiB needs 150 x 1.25 = 187.5 -> 188 MiB;
the factor is 188 / 328 = 0.57317... -> 0.5732 (four decimals, rounded up); 1,000 objects then cost
0.5732 x 328 = 188.0 -> 192 MiB (the step), CPU ceil(192 x 1000 / 1024) = 188 m.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any

import pytest

from autoscaler.core.annotations import (
    CALIBRATION_ANNOTATION,
    START_ANNOTATION,
    calibration_annotation,
    parse_calibration,
)
from autoscaler.core.calibration import (
    Calibration,
    Margin,
    Peak,
    Sample,
    Usage,
    Window,
    finished_in,
    held,
    learned,
    newest_per_deployment,
    observed,
    usages,
)
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.resources import Resources
from inventory.core.counts import ObjectCounts
from tests.unit.test_executor import AT_100, AT_1000, DELAY, KEY, FakePort, Rig, metric, rig

POD = "root-reconciler-6c9f7d8b4-x2x9q"
STARTED = datetime(2026, 11, 25, 10, 0, tzinfo=UTC).timestamp()
WINDOW = Window(POD, STARTED, "c1")
AT_1000_CALIBRATED = Resources(188, 192, 188, 192)
CALIBRATED_ANNOTATION = (
    '{"factor":"0.5732","peakMiB":150,"predictedMiB":328,"pod":"' + POD + '",'
    '"podStarted":"2026-11-25T10:00:00Z","commit":"c1","since":"2026-11-25T11:00:00Z"}'
)


def rsync(
    commit: str = "c1",
    *,
    synced: str = "c1",
    syncing: bool = False,
    written: str = "2026-11-25T10:05:00Z",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A RootSync as Config Sync v1.22.0 reports it (fetched `commit`, `synced` applied and pruned)."""
    return {
        "metadata": {
            "name": KEY.name,
            "namespace": KEY.namespace,
            "generation": 1,
            "annotations": annotations or {},
        },
        "status": {
            "source": {"commit": commit},
            "sync": {"commit": synced, "lastUpdate": written},
            "conditions": [{"type": "Syncing", "status": "True" if syncing else "False"}],
            **({} if syncing else {"lastSyncedCommit": synced}),
        },
    }


# ----- the rules -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("peak", "margin", "needed"),
    [
        (150, Margin(), 188),  # 187.5
        (100, Margin(), 125),
        (129, Margin(), 162),  # 161.25
        (100, Margin(Fraction(1, 4), 32), 132),
        (400, Margin(Fraction(1, 4), 32), 500),
        (100, Margin(Fraction(0), 0), 100),
    ],
)
def test_the_peak_plus_its_margin(peak: int, margin: Margin, needed: int) -> None:
    assert margin.needed(peak) == needed


@pytest.mark.parametrize(
    ("peak", "predicted", "factor"),
    [
        (150, Fraction(328), Fraction(5732, 10000)),  # 188 / 328
        (400, Fraction(328), Fraction(15244, 10000)),  # 500 / 328 = 1.52439...
        (10, Fraction(1000), Fraction(1, 4)),  # 12.5 -> 13 / 1000: clamped
        (4000, Fraction(128), Fraction(4)),  # 5000 / 128: clamped
    ],
)
def test_the_factor_learned(peak: int, predicted: Fraction, factor: Fraction) -> None:
    lesson = learned(Peak(WINDOW, peak, predicted), Margin(), now=5.0)
    assert lesson == Calibration(factor, peak, WINDOW, int(predicted), 5.0)


def test_a_window_keeps_its_largest_sample_and_a_new_one_starts_again() -> None:
    peak = observed(None, WINDOW, 120)
    peak = observed(peak, WINDOW, 150)
    assert observed(peak, WINDOW, 140) == Peak(WINDOW, 150)
    assert observed(peak, replace(WINDOW, commit="c2"), 90) == Peak(replace(WINDOW, commit="c2"), 90)
    restarted = replace(WINDOW, started=STARTED + 60)  # the container restarted in the same Pod
    assert observed(peak, restarted, 90) == Peak(restarted, 90)


@pytest.mark.parametrize(
    ("finished", "at", "learns"),
    [
        ("c1", STARTED + 300, True),
        ("c1", STARTED, True),
        ("c1", STARTED - 1, False),  # written by the Pod it replaced: this one syncs c1 again
        ("c0", STARTED + 300, False),
        (None, STARTED + 300, False),
        ("c1", None, False),
    ],
)
def test_a_sync_counts_only_when_this_container_finished_it(
    finished: str | None, at: float | None, learns: bool
) -> None:
    assert finished_in(WINDOW, finished, at) is learns


def pod(
    name: str, deployment: str, *, started: str | None = "2026-11-25T10:00:00Z", **meta: str
) -> dict[str, Any]:
    state = {"running": {"startedAt": started}} if started else {"waiting": {"reason": "ContainerCreating"}}
    return {
        "metadata": {"name": name, "labels": {"configsync.gke.io/deployment-name": deployment}, **meta},
        "status": {"containerStatuses": [{"name": "reconciler", "state": state}]},
    }


def pod_metrics(name: str, memory: object) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "containers": [
            {"name": "git-sync", "usage": {"memory": "900Mi"}},
            {"name": "reconciler", "usage": {"memory": memory}},
        ],
    }


def test_samples_are_read_from_the_pods_and_the_metrics_api() -> None:
    pods = [
        pod("a-1-1", "a"),
        pod("b-1-1", "b"),
        pod("c-1-1", "c", started=None),
        pod("d-1-1", "d", deletionTimestamp="2026-11-25T10:01:00Z"),
        pod("e-1-1", "e"),
    ]
    metrics = [
        pod_metrics("a-1-1", "157286400"),  # 150 MiB in bytes
        pod_metrics("b-1-1", "not a quantity"),
        pod_metrics("c-1-1", "10Mi"),
        pod_metrics("d-1-1", "10Mi"),
        pod_metrics("z-1-1", "10Mi"),  # a Pod the list does not have
    ]
    sampled = usages(pods, metrics)
    assert sampled.usages == [Usage("a", "a-1-1", STARTED, 150)]
    assert sampled.unreadable == ["b-1-1"]


def test_during_a_rollout_the_newest_container_is_sampled() -> None:
    old, new = Usage("a", "a-1-1", STARTED, 300), Usage("a", "a-2-1", STARTED + 60, 90)
    assert newest_per_deployment([new, old]) == {"a": new}
    assert newest_per_deployment([old, new]) == {"a": new}


# ----- the annotation -------------------------------------------------------------------------------
def test_the_annotation_as_written() -> None:
    lesson = Calibration(
        Fraction(5732, 10000), 150, WINDOW, 328, datetime(2026, 11, 25, 11, tzinfo=UTC).timestamp()
    )
    assert calibration_annotation(lesson) == CALIBRATED_ANNOTATION
    assert parse_calibration(CALIBRATED_ANNOTATION) == lesson


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "[]",
        "not json",
        CALIBRATED_ANNOTATION.replace('"0.5732"', '"0.01"'),  # below the clamp: not ours
        CALIBRATED_ANNOTATION.replace('"0.5732"', '"40"'),
        CALIBRATED_ANNOTATION.replace('"0.5732"', "0.5732"),  # a number: not as we write it
        CALIBRATED_ANNOTATION.replace('"0.5732"', '"1/0"'),
        CALIBRATED_ANNOTATION.replace('"0.5732"', '"nan"'),
        CALIBRATED_ANNOTATION.replace('"peakMiB":150', '"peakMiB":-150'),
        CALIBRATED_ANNOTATION.replace('"peakMiB":150', '"peakMiB":"150Mi"'),
        CALIBRATED_ANNOTATION.replace('"2026-11-25T10:00:00Z"', '"yesterday"'),
        CALIBRATED_ANNOTATION.replace('"commit":"c1"', '"commit":""'),
        CALIBRATED_ANNOTATION.replace(f'"pod":"{POD}"', '"pod":7'),
    ],
)
def test_an_unreadable_annotation_is_no_calibration(text: str | None) -> None:
    assert parse_calibration(text) is None


# ----- the step, through the executor ------------------------------------------------------------------
COUNTS = ObjectCounts(1000, 1000)


def test_an_overpriced_rsync_is_lowered_once_its_sync_finished_and_the_delay_passed() -> None:
    r = rig(FakePort(size=AT_1000))
    r.executor.wall_clock = lambda: datetime(2026, 11, 25, 11, tzinfo=UTC).timestamp()
    assert r.reconcile(COUNTS, rsync(syncing=True)) == Outcome.UNCHANGED
    assert r.executor.sampled(KEY, Sample(WINDOW, 150))
    assert not r.executor.sampled(KEY, Sample(WINDOW, 140)), "a lower sample is no news"
    lessons = metric("objcount_calibrations_total", direction="first")
    assert r.reconcile(COUNTS, rsync(syncing=True)) == Outcome.UNCHANGED, "nothing is learned mid-sync"
    assert not any(CALIBRATION_ANNOTATION in p for p in r.port.published)
    assert r.reconcile(COUNTS, rsync()) == Outcome.POSTPONED
    assert {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}.items() <= r.port.published[-1].items()
    assert metric("objcount_calibrations_total", direction="first") == lessons + 1
    assert metric("objcount_calibration_factor", rsync=str(KEY)) == pytest.approx(0.5732)
    assert metric("objcount_reconciler_working_set_mib", rsync=str(KEY)) == 140
    r.clock.now += DELAY
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_DOWN
    assert r.port.applied == [AT_1000_CALIBRATED]


def test_a_restarted_service_keeps_what_was_learned() -> None:
    r = rig(FakePort(size=AT_1000))  # nothing sampled yet: a new service
    assert (
        r.reconcile(COUNTS, rsync(annotations={CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}))
        == Outcome.POSTPONED
    )
    r.clock.now += DELAY
    assert (
        r.reconcile(COUNTS, rsync(annotations={CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}))
        == Outcome.SCALED_DOWN
    )
    assert r.port.applied == [AT_1000_CALIBRATED]
    assert not any(CALIBRATION_ANNOTATION in p for p in r.port.published), "nothing new to write"


def test_more_objects_still_scale_up_ahead_of_the_work_and_keep_only_the_mib_saved_where_learned() -> None:
    """A factor below 1 learned at 328 MiB predicted lowers a commit five times larger by the MiB it saved
    there, not by its ratio (0.5732 x 1128 = 646.6 would be under what 5,000 objects may need)."""
    r = rig(FakePort(size=AT_1000_CALIBRATED))
    stored = {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}
    # 5,000 objects: 128 + 1000 = 1128 less (1 - 0.5732) x 328 = 139.99 -> 988.01 -> 992 MiB,
    # CPU ceil(992 x 1000 / 1024) = 969 m.
    assert r.reconcile(ObjectCounts(5000, 1000), rsync("c2", annotations=stored)) == Outcome.SCALED_UP
    assert r.port.applied == [Resources(969, 992, 969, 992)]


def test_fewer_objects_than_where_it_was_learned_are_lowered_by_the_ratio() -> None:
    r = rig(FakePort(size=AT_1000_CALIBRATED))
    stored = {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}
    # 500 objects: 0.5732 x (128 + 100) = 130.7 -> 160 MiB, CPU ceil(160 x 1000 / 1024) = 157 m.
    assert r.reconcile(ObjectCounts(500, 500), rsync(annotations=stored)) == Outcome.POSTPONED
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(500, 500), rsync(annotations=stored)) == Outcome.SCALED_DOWN
    assert r.port.applied == [Resources(157, 160, 157, 160)]


def test_an_underpriced_rsync_is_raised_at_once() -> None:
    r = rig(FakePort(size=AT_1000))
    r.executor.sampled(KEY, Sample(WINDOW, 400))
    # 400 MiB seen: needs 500; factor 1.5244; 1.5244 x 328 = 500.0 -> 512 MiB, CPU 500 m.
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_UP
    assert r.port.applied == [Resources(500, 512, 500, 512)]
    assert metric("objcount_calibrations_total", direction="first") >= 1


def test_a_prunes_peak_is_set_against_both_commits_and_does_not_hold_what_remains() -> None:
    """A prune from 1,000 objects to 100: while it runs the reconciler holds both commits (the inventory
    still lists 1,000) and its working set peaks at 150 MiB. Set against the prediction for what it held
    (328 MiB), that is the lesson already known; once synced the size goes to what the 100 objects need
    (128 + 20 = 148 x 0.5732 = 84.8 -> the 128 MiB minimum), after the scale-down delay, not to the peak."""
    r = rig(FakePort(size=AT_1000_CALIBRATED))
    stored = {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}
    pruning = Window(POD, STARTED, "c2")
    r.executor.sampled(KEY, Sample(pruning, 150))
    during = rsync("c2", synced="c1", syncing=True, annotations=stored)
    assert r.reconcile(ObjectCounts(1000, 100), during) == Outcome.UNCHANGED  # sized for both
    lessons = metric("objcount_calibrations_total", direction="raised")
    synced = rsync("c2", synced="c2", written="2026-11-25T10:30:00Z", annotations=stored)
    assert r.reconcile(ObjectCounts(100, 100), synced) == Outcome.POSTPONED  # the delay
    assert metric("objcount_calibrations_total", direction="raised") == lessons, "nothing new learned"
    r.clock.now += DELAY
    assert r.reconcile(ObjectCounts(100, 100), synced) == Outcome.SCALED_DOWN
    assert r.port.applied == [Resources(125, 128, 125, 128)]


RUNNING = {  # the reconciler Pod of WINDOW as the port lists it: its container running since STARTED
    "metadata": {"name": POD},
    "status": {
        "containerStatuses": [
            {"name": "reconciler", "state": {"running": {"startedAt": "2026-11-25T10:00:00Z"}}}
        ]
    },
}
IN_PLACE_DELAY = 120.0
PAST_TAIL = 40.0  # a sample 30 s (the sync's tail) after the steady state's first, at 10 s


def test_once_synced_in_place_the_size_follows_the_steady_working_set_not_the_apply() -> None:
    """In place: the apply peaked at 150 MiB (learned once synced: 0.5732, 192 MiB for 1,000 objects, a
    whole sync's size). Once the reconciler reports the commit synced, what it uses past the sync's tail
    (30 s from the steady state's first sample) is its size: 120 MiB needs 150 -> 160 MiB (CPU
    ceil(160 x 1000 / 1024) = 157m), lowered at once, the in-place delay not waited out (a resize
    restarts nothing); a later rise (a resync: 200 MiB, needs 250 -> 256 MiB, CPU 250m) raises it at
    once. A new Pod would start at the whole sync's size (published)."""
    r = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True)
    r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
    assert r.reconcile(COUNTS, rsync(syncing=True)) == Outcome.SCALED_UP  # the model's 352 MiB, ours now
    assert r.reconcile(COUNTS, rsync()) == Outcome.POSTPONED  # learned: 192 MiB, lower
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=10.0))
    assert r.reconcile(COUNTS, rsync()) == Outcome.POSTPONED  # the sync's tail: no steady need yet
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=PAST_TAIL))
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_DOWN
    r.executor.sampled(KEY, Sample(WINDOW, 200, at=PAST_TAIL + 20))
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_UP
    assert r.port.applied == [AT_1000, AT_100, Resources(250, 256, 250, 256)]
    starts = {p[START_ANNOTATION] for p in r.port.published if START_ANNOTATION in p}
    assert starts == {
        '{"requests":{"cpu":"344m","memory":"352Mi"},"limits":{"cpu":"344m","memory":"352Mi"}}',
        '{"requests":{"cpu":"188m","memory":"192Mi"},"limits":{"cpu":"188m","memory":"192Mi"}}',
        '{"requests":{"cpu":"250m","memory":"256Mi"},"limits":{"cpu":"250m","memory":"256Mi"}}',
    }, "a whole sync's size (the model's, then calibrated), or the steady state's where that is more"


WAITS = "Pod root-reconciler-other-7d9-abcde waits for room on node node-1 (asks 1125m/1152Mi)"


def test_in_place_a_neighbour_waiting_for_room_gets_what_a_synced_reconciler_holds_above_its_need() -> None:
    """As above, with another reconciler on the node waiting for room all along: nothing is given back
    while this one applies its commit or before its steady state is seen past the sync's tail (the
    apply's size, then the learned 192 MiB, held); once its steady need is known (120 MiB used: 160
    MiB, 157m) it is lowered at once, and the log says whose room it gives. With a steady state's delay
    set (`steady_scale_down_delay_seconds`), a held scale-down in the steady state is looked at again
    within 10 s (so a wait that begins is seen soon), and given at once when the wait is seen."""
    r = rig(FakePort(size=AT_1000, pod=RUNNING, room_wanted=WAITS), in_place=True)
    r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
    assert r.reconcile(COUNTS, rsync(syncing=True)) == Outcome.SCALED_UP
    assert r.reconcile(COUNTS, rsync()) == Outcome.POSTPONED
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=10.0))
    assert r.reconcile(COUNTS, rsync()) == Outcome.POSTPONED
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=PAST_TAIL))
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_DOWN
    assert r.port.applied == [AT_1000, AT_100]

    # The samples' clock is the service's: the steady state's delay counts from its first sample.
    held = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True, steady_delay=IN_PLACE_DELAY)
    now = held.clock.now
    held.executor.sampled(KEY, Sample(WINDOW, 150, at=now))
    assert held.reconcile(COUNTS, rsync(syncing=True)) == Outcome.SCALED_UP
    assert held.reconcile(COUNTS, rsync()) == Outcome.POSTPONED
    held.executor.sampled(KEY, Sample(WINDOW, 120, at=now + 10.0))
    held.executor.sampled(KEY, Sample(WINDOW, 120, at=now + PAST_TAIL))
    held.clock.now = now + PAST_TAIL
    assert held.reconcile(COUNTS, rsync()) == Outcome.POSTPONED
    assert held.rechecks[-1] == 10.0
    held.port.room_wanted = WAITS
    held.clock.now += 10.0
    assert held.reconcile(COUNTS, rsync()) == Outcome.SCALED_DOWN
    assert held.port.applied == [AT_1000, AT_100]
    decision = held.executor.states[KEY].decision
    assert decision is not None
    assert WAITS in decision.reason
    held.port.room_wanted = None
    # The next step down (100 MiB, once the 120 of 40 s is two minutes old, needs 125 -> 128 MiB) waits
    # no new delay: it is counted from the steady state's start (its first sample, 10 s), 160 s ago.
    later = now + PAST_TAIL + 130.0
    held.executor.sampled(KEY, Sample(WINDOW, 100, at=later))
    held.clock.now = later
    assert held.reconcile(COUNTS, rsync()) == Outcome.SCALED_DOWN
    assert held.port.applied[-1].memory_request_mib == 128


def test_a_reconciler_applying_a_new_commit_gives_no_room_back() -> None:
    """Synced and steady, then a new commit fetched and not yet synced: its steady state ends, so a
    neighbour's wait for room lowers nothing while the apply (or a prune) may run: the model's size for
    the commit stays."""
    r = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True)
    r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
    assert r.reconcile(COUNTS, rsync(syncing=True)) == Outcome.SCALED_UP
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=10.0))
    r.port.room_wanted = WAITS
    assert r.reconcile(COUNTS, rsync(commit="c2", syncing=True)) == Outcome.UNCHANGED
    assert r.port.applied == [AT_1000]


def test_in_cluster_mode_the_steady_state_lowers_the_size_though_the_source_is_not_read() -> None:
    """Cluster mode counts the inventory alone (the source count unknown: no scale-down from counts);
    once the reconciler reports its commit synced, its steady working set past the sync's tail is what
    sizes it: 120 MiB needs 150 -> 160 MiB, at once."""
    r = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True)
    inventory = ObjectCounts(None, 1000)
    r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
    r.reconcile(inventory, rsync(syncing=True))
    assert r.reconcile(inventory, rsync()) == Outcome.POSTPONED
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=10.0))
    assert r.reconcile(inventory, rsync()) == Outcome.POSTPONED
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=PAST_TAIL))
    assert r.reconcile(inventory, rsync()) == Outcome.SCALED_DOWN
    assert r.port.applied[-1] == AT_100


def test_a_window_whose_transition_was_not_seen_never_lowers_the_factor() -> None:
    """The service started after the commit was synced: its samples are the steady state's (80 MiB, less
    than the apply needed); a lesson from them would lower the model for the next apply: not learned."""
    r = rig(FakePort(size=AT_1000))
    r.executor.sampled(KEY, Sample(WINDOW, 80))
    assert r.reconcile(COUNTS, rsync()) == Outcome.UNCHANGED
    assert not any(CALIBRATION_ANNOTATION in p for p in r.port.published)


def steady_at_the_working_set(r: Rig, delay: float) -> None:
    """The apply peaked at 150 MiB, the commit synced, then 120 MiB in the steady state and past its
    tail; `delay` later."""
    r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
    r.reconcile(COUNTS, rsync(syncing=True))
    r.reconcile(COUNTS, rsync())
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=10.0))
    r.reconcile(COUNTS, rsync())
    r.executor.sampled(KEY, Sample(WINDOW, 120, at=PAST_TAIL))
    r.reconcile(COUNTS, rsync())
    r.clock.now += delay
    r.reconcile(COUNTS, rsync())


def test_a_vpa_that_resizes_in_place_gets_the_steady_state_and_one_that_recreates_does_not() -> None:
    """The `vpa` target: VPA's updater applies our recommendation to the running Pod with
    `InPlaceOrRecreate` (the target reports a running reconciler resized without a restart): the steady
    state sizes it as in place, 120 MiB needs 160 MiB. With `Recreate` every
    change evicts the reconciler into a whole sync: the whole sync's 192 MiB stays after any delay."""
    vpa_in_place = rig(FakePort(size=AT_1000, pod=RUNNING, resizes_running=True))
    steady_at_the_working_set(vpa_in_place, IN_PLACE_DELAY)
    assert vpa_in_place.port.applied[-1] == AT_100
    vpa_recreate = rig(FakePort(size=AT_1000, pod=RUNNING, resizes_running=False))
    steady_at_the_working_set(vpa_recreate, DELAY)
    assert vpa_recreate.port.applied[-1] == AT_1000_CALIBRATED
    assert AT_100 not in vpa_recreate.port.applied


def test_a_commit_linked_and_not_counted_yet_ends_the_steady_state_at_once() -> None:
    """The sidecar sees git-sync link a new commit before it has counted it, while the reconciler may
    already parse it: the steady state's 160 MiB goes back to the whole sync of what is known (192 MiB,
    calibrated) at once, not after the new count."""
    r = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True)
    steady_at_the_working_set(r, IN_PLACE_DELAY)
    assert r.port.applied[-1] == AT_100
    assert r.reconcile(replace(COUNTS, source_reading="c2"), rsync()) == Outcome.SCALED_UP
    assert r.port.applied[-1] == AT_1000_CALIBRATED


def test_a_commit_the_window_never_held_teaches_nothing_of_it() -> None:
    """Seen in issue 48's fifth run: the sidecar counted a commit of 1,252 objects while the reconciler
    still reported the last one (500 objects, peaked at 65 MiB) synced, and the model's price of the new
    counts was set against the old window's peak ("peaked at 65 MiB ... where the model predicts 190
    MiB"): the factor fell from 0.6541 to 0.4337. Here: learned 0.5732 from 150 MiB for 1,000 objects;
    2,000 counted in a commit the reconciler has not fetched, or fetched with no sample of it yet, are
    not what that window held: no lesson, the factor stays."""
    for counts, fetched in ((ObjectCounts(2000, 1000, source_commit="c2"), "c1"), (COUNTS, "c2")):
        r = rig(FakePort(size=AT_1000, pod=RUNNING), in_place=True)
        r.executor.sampled(KEY, Sample(WINDOW, 150, at=0.0))
        r.reconcile(COUNTS, rsync(syncing=True))
        r.reconcile(COUNTS, rsync())
        learned = {p[CALIBRATION_ANNOTATION] for p in r.port.published if CALIBRATION_ANNOTATION in p}
        assert len(learned) == 1
        r.reconcile(counts, rsync(fetched))
        r.reconcile(replace(counts, sync=2000), rsync(fetched))
        after = {p[CALIBRATION_ANNOTATION] for p in r.port.published if CALIBRATION_ANNOTATION in p}
        assert after == learned, fetched


def test_a_rollout_or_another_container_is_never_sized_for_the_steady_state() -> None:
    """A target that rolls the reconciler out restarts it into a whole sync: the steady state's working
    set never lowers it (192 MiB after the delay, not 160); nor in place while the running container is
    not the one sampled (a new Pod syncs its commit from the start)."""
    for port, in_place in ((FakePort(size=AT_1000, pod=RUNNING), False), (FakePort(size=AT_1000), True)):
        r = rig(port, in_place=in_place)
        steady_at_the_working_set(r, DELAY)
        assert r.port.applied[-1] == AT_1000_CALIBRATED, in_place
        assert AT_100 not in r.port.applied, in_place


def test_the_steady_working_set_is_its_last_two_minutes() -> None:
    """After an apply the Go runtime returns memory over minutes: a sample older than STEADY_S no longer
    holds the steady state's need up."""
    peak = held(observed(None, WINDOW, 300), Fraction(328), 1000, finished=True, steady=True)
    assert peak is not None
    for at, mib in ((0.0, 294), (60.0, 155), (130.0, 150)):
        peak = observed(peak, WINDOW, mib, at)
    assert peak.steady_mib == 155  # 294 at 0 s is older than 130 - 120
    assert peak.mib == 300  # the window's peak keeps every sample
    assert peak.steady_need(1000, Margin()) == 194  # 155 x 1.25 = 193.75
    assert peak.steady_need(999, Margin()) is None, "other objects: not this steady state"
    assert held(peak, Fraction(328), 1000, finished=False, steady=False).steady == ()  # type: ignore[union-attr]


def test_the_syncs_tail_is_not_the_steady_state() -> None:
    """Seen in issue 48's run 10: cluster mode's reconciler reported its prune synced while it still held
    about 430 MiB, and that sample sized the steady state at 544Mi. The samples of the steady state's
    first 30 s (from its first sample) are the sync's tail: no steady need until one comes after it, and
    then only what came after counts (a sample at 30 s is past the tail: 100 MiB needs 125)."""
    peak = held(observed(None, WINDOW, 435), Fraction(328), 101, finished=True, steady=True)
    assert peak is not None
    for at, mib in ((5.0, 435), (20.0, 190), (34.0, 150)):
        peak = observed(peak, WINDOW, mib, at)
        assert peak.steady_need(101, Margin()) is None, at
    peak = observed(peak, WINDOW, 100, 35.0)
    assert peak.steady_mib == 100
    assert peak.steady_need(101, Margin()) == 125
    assert peak.mib == 435  # the window's peak keeps every sample
    restarted = held(
        held(peak, Fraction(328), 101, finished=False, steady=False),
        Fraction(328),
        101,
        finished=True,
        steady=True,
    )
    assert restarted is not None
    assert restarted.steady_from is None, "a new steady state has a tail of its own"
    assert observed(restarted, WINDOW, 100, 40.0).steady_need(101, Margin()) is None


def test_a_tail_at_the_syncs_level_lasts_until_the_working_set_leaves_it() -> None:
    """Seen in run 13 (v1.37.2): the sidecar's reconciler held 371 to 404 MiB of its prune's 404 for 82 s
    after the report, then 108. Past 30 s, a sample at 90 % of the window's peak or more (404 x 0.9 =
    363.6) and above the model's 128 MiB for the 100 objects that remain is still the tail; the first one
    below that level ends the tail, and every sample after it counts, a rebound to the old level too."""
    peak = held(observed(None, WINDOW, 404), Fraction(128), 100, finished=True, steady=True)
    assert peak is not None
    for at, mib in ((0.0, 399), (45.0, 404), (60.0, 371), (79.0, 364)):
        peak = observed(peak, WINDOW, mib, at)
        assert peak.steady_need(100, Margin()) is None, at
    peak = observed(peak, WINDOW, 157, 82.0)
    assert peak.steady_need(100, Margin()) == 197  # 157 x 1.25 = 196.25
    peak = observed(peak, WINDOW, 380, 90.0)
    assert peak.steady_need(100, Margin()) == 475, "after the tail, a rebound is the steady state's"


def test_a_working_set_at_its_peak_but_within_the_models_price_is_no_tail() -> None:
    """A small repository holds about what it held at its peak once synced (seen: 38 of 40 MiB for 101
    objects the model prices at 192): that is its need, sized from 30 s on as before."""
    peak = held(observed(None, WINDOW, 40), Fraction(192), 101, finished=True, steady=True)
    assert peak is not None
    peak = observed(observed(peak, WINDOW, 39, 0.0), WINDOW, 38, 30.0)
    assert peak.steady_need(101, Margin()) == 48  # 38 x 1.25 = 47.5


def test_a_tail_at_the_syncs_level_ends_after_150_s() -> None:
    """A reconciler that keeps its sync's level, above what the model predicts (it underprices this
    repository), needs it: from 150 s on, its samples are the steady state's whatever their level."""
    peak = held(observed(None, WINDOW, 300), Fraction(200), 1000, finished=True, steady=True)
    assert peak is not None
    for at in (0.0, 60.0, 149.0):
        peak = observed(peak, WINDOW, 290, at)
        assert peak.steady_need(1000, Margin()) is None, at
    peak = observed(peak, WINDOW, 290, 150.0)
    assert peak.steady_need(1000, Margin()) == 363  # 290 x 1.25 = 362.5


def test_a_factor_below_one_never_lowers_a_prune() -> None:
    """Stored: 0.5732 (192 MiB for 1,000 objects, where the model predicted 328). A commit of 100 while
    the inventory still holds 1,000: a prune, which holds both commits; the model's own price, 128 + 0.2 x
    1000 = 328 -> 352 MiB (AT_1000). Without the source (cluster mode: the inventory alone) a sync not
    finished that holds no more than the factor was learned on may be that prune: the model's price too.
    One that grew the inventory to 2,000 is an apply: 528 less 0.4268 x 328 = 388 -> 416 MiB, 407m."""
    stored = {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}
    pruning = rsync("c2", synced="c1", syncing=True, annotations=stored)
    for counts in (ObjectCounts(100, 1000), ObjectCounts(None, 1000)):
        r = rig(FakePort(size=AT_1000_CALIBRATED))
        assert r.reconcile(counts, pruning) == Outcome.SCALED_UP
        assert r.port.applied == [AT_1000], counts
    r = rig(FakePort(size=AT_1000_CALIBRATED))
    assert r.reconcile(ObjectCounts(None, 2000), pruning) == Outcome.SCALED_UP
    assert r.port.applied == [Resources(407, 416, 407, 416)]


def test_an_oom_kill_still_raises_a_calibrated_rsync() -> None:
    r = rig(FakePort(size=AT_1000_CALIBRATED, oom_kill=OomKill("2026-11-25T12:00:00Z", 192)))
    stored = {CALIBRATION_ANNOTATION: CALIBRATED_ANNOTATION}
    # Killed at 192 MiB: floor max(288, 320) = 320 MiB, CPU ceil(320 x 1000 / 1024) = 313 m.
    assert r.reconcile(COUNTS, rsync(annotations=stored)) == Outcome.SCALED_UP
    assert r.port.applied == [Resources(313, 320, 313, 320)]


def test_without_the_metrics_api_nothing_changes() -> None:
    r = rig(FakePort(size=AT_1000))
    for _ in range(2):
        assert r.reconcile(COUNTS, rsync()) == Outcome.UNCHANGED
        r.clock.now += DELAY
    assert r.port.applied == []
    assert not any(CALIBRATION_ANNOTATION in p for p in r.port.published)


def test_a_lesson_is_learned_once_while_its_write_keeps_failing() -> None:
    """The size the lesson raises cannot be written (the apply fails each time): the lesson is kept, not
    learned and told again on every retry."""
    r = rig(FakePort(size=AT_1000, failing={"apply"}))
    r.executor.sampled(KEY, Sample(WINDOW, 400))
    lessons = metric("objcount_calibrations_total", direction="first")
    for _ in range(3):
        assert r.reconcile(COUNTS, rsync()) == "failed"
    assert metric("objcount_calibrations_total", direction="first") == lessons + 1
    r.port.failing.clear()
    assert r.reconcile(COUNTS, rsync()) == Outcome.SCALED_UP
    assert r.port.applied == [Resources(500, 512, 500, 512)]
