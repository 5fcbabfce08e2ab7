"""The decision as a table: an observation and a state in, a plan out, through the pure `step` alone (no
executor, no port, no metrics), then the state kept after each possible result of the write
(`after_write`). Every expected size is worked by hand from the prototype preset (128 MiB + 0.2 MiB per
object up to the next 32 MiB step; CPU 1000m per GiB of it, rounded up; limits = requests)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import pytest

from autoscaler.core.annotations import AUTOSCALE_ANNOTATION, OOM_FLOOR_ANNOTATION
from autoscaler.core.decision import Decision, Hysteresis
from autoscaler.core.observation import Observation, Reading, RSyncView
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.sizing import PROTOTYPE, STANDARD, Profile
from autoscaler.core.step import Plan, RSyncState, StepConfig, after_write, step
from autoscaler.core.written import Applied, Written
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey

KEY = RSyncKey("RootSync", "config-management-system", "root-sync")
DELAY = 600.0
AT_100 = Resources(157, 160, 157, 160)  # 148 -> 160 MiB; 156.25 -> 157m
AT_5000 = Resources(1125, 1152, 1125, 1152)  # 1128 -> 1152 MiB; 1125m
# Killed at a 160 MiB limit: the floor is max(160 x 1.5, 160 + 128) = 288 MiB, on the 32 MiB grid; CPU
# 288 x 1000 / 1024 = 281.25 -> 282m.
AT_FLOOR = Resources(282, 288, 282, 288)
KILLED = OomKill("2026-11-22T10:00:00Z", 160)
KILLED_AT_WALL = 1795341600.0  # 2026-11-22T10:00:00Z
# The size for 5,000 objects with the CPU the Pod runs with at 100 (memory first while a resize waits).
MEMORY_FIRST = Resources(157, 1152, 157, 1152)
SHORT_OF_CPU = "Node didn't have enough resource: cpu, requested: 1145, used: 1900, capacity: 2000"
# A scale-down that began at 0 s, waiting: 100 objects want AT_100.
LOWERING = Decision(
    Outcome.POSTPONED, AT_5000, recommended=AT_100, lower_since=0.0, lower_sync=100, lower_peak=AT_100
)


@dataclass(frozen=True)
class Row:
    counts: ObjectCounts
    current: Resources | None = AT_100
    state: RSyncState = field(default_factory=RSyncState)
    annotations: dict[str, str] = field(default_factory=dict)
    reading: Reading = field(default_factory=Reading)
    now: float = 0.0
    in_place: bool = False
    reads_source: bool = False  # a sidecar


def planned(row: Row) -> Plan:
    rsync = {
        "metadata": {
            "name": KEY.name,
            "namespace": KEY.namespace,
            "generation": 1,
            "annotations": row.annotations,
        }
    }
    reading = replace(row.reading, current=row.current)
    seen = Observation(KEY, RSyncView.of(rsync), reading, row.counts, row.now, KILLED_AT_WALL)
    config = StepConfig(
        Profile(PROTOTYPE, STANDARD),
        Hysteresis(DELAY, 100),
        reread_current=True,
        in_place=row.in_place,
        reads_source=row.reads_source,
    )
    return step(seen, row.state, config)


# name: (row, outcome, size applied, words of the reason)
TABLE: dict[str, tuple[Row, Outcome, Resources | None, str]] = {
    "a larger count scales up at once": (
        Row(ObjectCounts(5000, 5000)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    "a lower count waits out the delay": (
        Row(ObjectCounts(100, 100), current=AT_5000),
        Outcome.POSTPONED,
        None,
        "lower target held 0s of 600s",
    ),
    "then lowers": (
        Row(ObjectCounts(100, 100), current=AT_5000, state=RSyncState(LOWERING), now=DELAY + 1),
        Outcome.SCALED_DOWN,
        AT_100,
        "down to",
    ),
    "a prune under way holds the size past the delay": (
        Row(
            ObjectCounts(100, 1000),  # the inventory larger than the source, no sync reported
            current=AT_5000,
            state=RSyncState(LOWERING),
            now=10 * DELAY,
        ),
        Outcome.POSTPONED,
        None,
        "prune pending (inventory 1000 > source 100)",
    ),
    "a count unknown lowers nothing": (
        Row(ObjectCounts(None, None), current=AT_5000, now=10 * DELAY),
        Outcome.POSTPONED,
        None,
        "both counts unknown",
    ),
    "an OOM kill raises the floor above the count's size": (
        Row(ObjectCounts(100, 100), reading=Reading(oom_kill=KILLED)),
        Outcome.SCALED_UP,
        AT_FLOOR,
        "100 objects need requests 282m/288Mi",
    ),
    "an owner who holds the size gets a recommendation, no write": (
        Row(ObjectCounts(5000, 5000), reading=Reading(held_by_owner="declared in git by RootSync root")),
        Outcome.HELD_BY_OWNER,
        None,
        "declared in git by RootSync root",
    ),
    "opted out: counts only": (
        Row(ObjectCounts(5000, 5000), annotations={AUTOSCALE_ANNOTATION: "false"}),
        Outcome.OPTED_OUT,
        None,
        "counts recorded",
    ),
    "a sidecar whose own Pod is being deleted sizes nothing": (
        Row(ObjectCounts(5000, 5000), reading=Reading(own_pod_going=True), reads_source=True),
        Outcome.POSTPONED,
        None,
        "this sidecar's own Pod is being deleted",
    ),
    "cluster mode sizes whatever Pod goes": (
        Row(ObjectCounts(5000, 5000), reading=Reading(own_pod_going=True)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    "in place, a larger size while the last waits for room: its memory first": (
        Row(
            ObjectCounts(5000, 5000),
            reading=Reading(deferred=(Resources(344, 352, 344, 352), SHORT_OF_CPU)),
            in_place=True,
        ),
        Outcome.SCALED_UP,
        MEMORY_FIRST,
        "the memory of requests 1125m/1152Mi, limits 1125m/1152Mi first: requests 157m/1152Mi",
    ),
}


@pytest.mark.parametrize("name", list(TABLE))
def test_the_decision(name: str) -> None:
    row, outcome, applied, words = TABLE[name]
    plan = planned(row)
    assert (plan.outcome, plan.apply) == (outcome, applied), plan.reason
    assert words in plan.reason


def test_the_oom_floor_is_published_with_the_kill_it_answers() -> None:
    plan = planned(TABLE["an OOM kill raises the floor above the count's size"][0])
    assert plan.publish[OOM_FLOOR_ANNOTATION] == (
        '{"memory":"288Mi","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}'
    )
    assert plan.oom_raised == (KILLED, plan.state.oom_floor)


def test_the_state_kept_after_each_result_of_the_write() -> None:
    """Written and restarted: the plan's state, the restart counted toward the cap. Written without a
    restart: the plan's state. Failed: the decision is made again from the state before, what was
    learned (the OOM floor) is kept, and the failure is remembered (the same one again is not news)."""
    before = RSyncState()
    plan = planned(Row(ObjectCounts(100, 100), reading=Reading(oom_kill=KILLED)))
    assert plan.state.decision is not None
    restarted = after_write(before, plan, Written(Applied(AT_FLOOR, restarted=True)), now=50.0)
    assert restarted.decision is not None
    assert restarted.decision.restarts == (50.0,)
    assert after_write(before, plan, Written(Applied(AT_FLOOR, restarted=False)), now=50.0) == plan.state
    refused = after_write(before, plan, WriteError(Reason.FORBIDDEN, "pods/resize is forbidden"), now=50.0)
    assert refused.decision is None, "decided again next time"
    assert refused.oom_floor == plan.state.oom_floor
    assert refused.failed == (Reason.FORBIDDEN, AT_FLOOR)
    assert after_write(before, plan, Written(), now=50.0) == plan.state, "no size due: nothing settled"
