"""One reconcile of one RSync as a pure function: what was read, and what we remember of the RSync,
give the decision and the actions to take. No I/O, no clock (time is passed in).

    plan = step(seen, state, config)      # what to apply, publish and record, and when to look again
    state = settled(plan, applied, now)   # after the apply: the restart it really caused, our write

The executor (autoscaler.executor) reads the inputs, performs the plan's actions through the cluster
operations, and keeps the state.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from autoscaler.annotations import (
    CALIBRATION_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    SOURCE_REJECTED_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    autoscale_enabled,
    calibration_annotation,
    changed,
    oom_floor_annotation,
    parse_calibration,
    parse_oom_floor,
    parse_synced_source,
    platform_asked,
    published,
    restored_counts,
    synced_source_annotation,
)
from autoscaler.calibration import Calibration, Margin, Peak, finished_in, learned, same_lesson
from autoscaler.oom import OomFloor, OomKill, next_floor
from autoscaler.policy import PLATFORMS, Decision, Hysteresis, Outcome, Profile, Resources, decide, initial
from inventory.counts import ObjectCounts
from inventory.objects import RSync, annotations_of, generation_of
from inventory.sync_progress import finished_commit, sync_progress, sync_written_at

HOUR = 3600.0


@dataclass(frozen=True)
class RSyncState:
    """What the service remembers about one RSync between reconciles."""

    decision: Decision | None = None  # None: start from what the reconciler has now
    # The RSync's generation after our last write of the size into it, and that size: a later
    # generation declaring another size is another writer's.
    written: tuple[int, Resources] | None = None
    reverts: tuple[float, ...] = ()  # when another writer replaced our size, over the last hour
    hands_off_until: float | None = None
    counts_in_annotations: bool = False  # the CRD prunes the status fields
    # The apply that last failed (its reason and the size it wanted): the same failure again is not news.
    failed: tuple[str, Resources] | None = None
    # The memory floor after an OOM kill, as last decided (the RSync's annotation may lag behind it).
    oom_floor: OomFloor | None = None
    # The source counts of the commit the reconciler last finished (the annotation may lag behind).
    synced_source: ObjectCounts | None = None
    # What was learned from the reconciler's working set (the annotation may lag behind).
    calibration: Calibration | None = None


@dataclass(frozen=True)
class StepConfig:
    """The service-wide settings of a step."""

    profile: Profile
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    max_reverts_per_hour: int = 3
    sizes: bool = True  # False: the service runs without a target and only records counts
    measure_others: bool = False  # read the other containers' requests where the platform needs them
    # The size can change behind our back (in-place: a new pod starts with its template's size), so it
    # is read on every reconcile instead of remembered.
    reread_current: bool = False
    margin: Margin = field(default_factory=Margin)  # added to an observed peak (calibration)


@dataclass(frozen=True)
class Seen:
    """What was read for this reconcile."""

    rsync: RSync
    observed: ObjectCounts  # counts seen this run (None where not seen yet or not valid)
    now: float
    current: Resources | None = None  # what the reconciler has; read only while state.decision is None
    declared: Resources | None = None  # the size the target keeps in the RSync, as the RSync shows it
    held_by_owner: str | None = None  # why the target must not write (its owner would fight it)
    others: tuple[int, int] | None = None  # measured requests of the other containers (CPU m, MiB)
    oom_kill: OomKill | None = None  # the reconciler's latest OOM kill its Pod reports
    wall: float = 0.0  # wall-clock seconds (an OOM floor's quiet period outlives the service)
    api_resources: int | None = None  # resource types the API server serves (None: not read)
    # The reconciler container's largest working set in its current window (None: no metrics API, or
    # not sampled yet).
    usage: Peak | None = None


@dataclass(frozen=True)
class Plan:
    """The decision and the actions that follow from it."""

    outcome: Outcome
    reason: str
    state: RSyncState  # to keep once the actions succeeded
    counts: ObjectCounts  # what the decision used: observed over stored
    apply: Resources | None = None
    publish: Mapping[str, str | None] = field(default_factory=dict)  # annotations the RSync lacks
    recheck_after: float | None = None  # seconds until the held scale-down is due
    reverted_to: Resources | None = None  # another writer's size, found in the RSync
    log_level: int = logging.DEBUG  # said once when a postponement or an error starts
    oom_raised: tuple[OomKill, OomFloor] | None = None  # a new OOM kill, and the floor it raised
    calibrated: tuple[Calibration | None, Calibration] | None = None  # learned now: before, after


def profile_for(rsync: RSync, profile: Profile) -> Profile | str:
    """The service's profile, or the one the RSync asks for with its platform annotation; the error
    when it asks for a platform that does not exist."""
    platform = platform_asked(rsync)
    if platform is None or platform == profile.platform.name:
        return profile
    if platform not in PLATFORMS:
        return (
            f"unknown objcount.dev/platform {platform!r} (known: {', '.join(sorted(PLATFORMS))}); not sized"
        )
    return replace(profile, platform=PLATFORMS[platform])


def needs_others(rsync: RSync, config: StepConfig) -> bool:
    """Whether the step wants the other containers' requests read from the cluster."""
    profile = profile_for(rsync, config.profile)
    return (
        config.sizes
        and config.measure_others
        and isinstance(profile, Profile)
        and profile.platform.has_pod_rules
    )


def needs_current(state: RSyncState, config: StepConfig) -> bool:
    return state.decision is None or config.reread_current


def step(seen: Seen, state: RSyncState, config: StepConfig) -> Plan:
    plan = _step(seen, state, config)
    # Why Config Sync syncs nothing of the newest commit is said on the RSync whatever is decided.
    rejected = changed(seen.rsync, {SOURCE_REJECTED_ANNOTATION: plan.counts.source_rejected})
    return replace(plan, publish={**plan.publish, **rejected}) if rejected else plan


def _step(seen: Seen, state: RSyncState, config: StepConfig) -> Plan:
    counts = seen.observed.over(restored_counts(seen.rsync))
    if not config.sizes:
        return Plan(Outcome.COUNTS_ONLY, "no target: counts recorded", state, counts)
    if not autoscale_enabled(seen.rsync):
        return Plan(Outcome.OPTED_OUT, "objcount.dev/autoscale is false: counts recorded", state, counts)
    profile = profile_for(seen.rsync, config.profile)
    if isinstance(profile, str):
        return Plan(Outcome.ERROR, profile, state, counts, log_level=logging.ERROR)
    if seen.others is not None:
        profile = replace(profile, others_cpu_m=seen.others[0], others_memory_mib=seen.others[1])
    if seen.api_resources is not None:
        profile = replace(profile, api_resources=seen.api_resources)
    synced = _synced_source(seen, state, counts)
    stored = _newest(parse_oom_floor(annotations_of(seen.rsync).get(OOM_FLOOR_ANNOTATION)), state.oom_floor)
    floor = next_floor(
        stored,
        seen.oom_kill,
        now=seen.wall,
        quiet_s=config.hysteresis.oom_quiet_s,
        step_mib=profile.sizing.step_mib,
    )
    if floor is not None:  # the least memory this RSync gets, whatever its count
        sizing = profile.sizing
        profile = replace(profile, sizing=replace(sizing, min_mib=max(sizing.min_mib, floor.memory_mib)))
    covered = _covered(seen, counts, synced)
    known = state.calibration or parse_calibration(annotations_of(seen.rsync).get(CALIBRATION_ANNOTATION))
    calibration = _calibration(seen, known, covered, profile, config.margin)
    if calibration is not None:
        profile = _calibrated(profile, calibration, seen, config.margin)
    state = replace(state, oom_floor=floor, synced_source=synced, calibration=calibration)
    # Sized from the counts that cover what the reconciler holds; the counts recorded are the real ones.
    plan = replace(_sized(seen, state, config, covered, profile), counts=counts)
    if plan.outcome == Outcome.HANDS_OFF:
        return plan
    wanted = {
        OOM_FLOOR_ANNOTATION: None if floor is None else oom_floor_annotation(floor),
        CALIBRATION_ANNOTATION: None if calibration is None else calibration_annotation(calibration),
    }
    if synced is not None:
        wanted[SYNCED_SOURCE_ANNOTATION] = synced_source_annotation(synced)
    return replace(
        plan,
        publish={**plan.publish, **changed(seen.rsync, wanted)},
        oom_raised=(seen.oom_kill, floor) if seen.oom_kill and floor and floor != stored else None,
        calibrated=(known, calibration) if calibration is not None and calibration is not known else None,
    )


def _calibration(
    seen: Seen, known: Calibration | None, counts: ObjectCounts, profile: Profile, margin: Margin
) -> Calibration | None:
    """What is known of this RSync's real cost after this reconcile: learned anew when the reconciler
    reports its window's commit finished and the lesson differs from the one known, else as known."""
    usage, target = seen.usage, counts.target
    if usage is None or target is None:
        return known
    if not finished_in(usage.window, finished_commit(seen.rsync), sync_written_at(seen.rsync)):
        return known
    predicted = profile.sizing.raw_mib(
        target, counts.target_kib, profile.api_resources, counts.source_kinds, counts.source_crd_path_steps
    )
    lesson = learned(usage, predicted, margin, seen.wall)
    return known if same_lesson(known, lesson) else lesson


def _calibrated(profile: Profile, calibration: Calibration, seen: Seen, margin: Margin) -> Profile:
    """The model scaled by the learned factor, never below the peak plus the margin in its window."""
    sizing = profile.sizing
    floor = calibration.floor_mib(seen.usage.window if seen.usage else None, margin)
    calibrated = replace(sizing, calibration_factor=calibration.factor, min_mib=max(sizing.min_mib, floor))
    return replace(profile, sizing=calibrated)


def _synced_source(seen: Seen, state: RSyncState, counts: ObjectCounts) -> ObjectCounts | None:
    """The source counts of the commit the reconciler last finished: the counts of our source once the
    reconciler reports its commit finished, else the last ones we knew (after a restart, from the RSync)."""
    if counts.source_commit is not None and counts.source_commit == finished_commit(seen.rsync):
        return ObjectCounts(
            counts.source,
            source_kib=counts.source_kib,
            source_kinds=counts.source_kinds,
            source_crd_path_steps=counts.source_crd_path_steps,
        )
    recorded = annotations_of(seen.rsync).get(SYNCED_SOURCE_ANNOTATION)
    return state.synced_source or parse_synced_source(recorded)


def _covered(seen: Seen, counts: ObjectCounts, synced: ObjectCounts | None) -> ObjectCounts:
    """The counts to size from: until the reconciler reports our source's commit finished, it may still
    hold the last finished commit's objects (a prune deletes them last), so both are covered; the
    objects it will prune are then sized by what they are, not at the cost of any kind."""
    if counts.source_commit is not None and counts.source_commit == finished_commit(seen.rsync):
        return counts
    return counts.covering(synced)


def _newest(*floors: OomFloor | None) -> OomFloor | None:
    """The floor that answers the latest kill (the annotation after a restart, else what we decided)."""
    return max((f for f in floors if f is not None), key=lambda f: (f.killed_at, f.since), default=None)


def _sized(seen: Seen, state: RSyncState, config: StepConfig, counts: ObjectCounts, profile: Profile) -> Plan:
    last = state.decision or initial(seen.current)
    if config.reread_current and seen.current is not None and seen.current != last.resources:
        last = replace(last, resources=seen.current)  # a new pod, or a resize that did not take
    if state.hands_off_until is not None and state.hands_off_until > seen.now:
        return Plan(Outcome.HANDS_OFF, "another writer keeps reverting our size", state, counts)
    foreign = _foreign_size(seen, state)
    if foreign is not None and foreign != last.resources and seen.held_by_owner is None:
        return _reverted(
            seen, replace(state, decision=replace(last, resources=foreign)), config, counts, profile
        )
    return _decided(seen, replace(state, decision=last), config, counts, profile)


def _foreign_size(seen: Seen, state: RSyncState) -> Resources | None:
    """The size another writer put in the RSync after our last write of it; None when there is none."""
    if state.written is None or seen.declared is None:
        return None
    generation, ours = state.written
    if generation_of(seen.rsync) <= generation or seen.declared == ours:
        return None
    return seen.declared


def _reverted(
    seen: Seen, state: RSyncState, config: StepConfig, counts: ObjectCounts, profile: Profile
) -> Plan:
    """Another writer replaced our size: take it as what the reconciler has and size again from it,
    unless it did so too often in the last hour (then hands off for an hour: no fight)."""
    assert state.decision is not None
    theirs = state.decision.resources
    assert theirs is not None
    reverts = (*[t for t in state.reverts if seen.now - t < HOUR], seen.now)
    state = replace(state, reverts=reverts)
    if len(reverts) > config.max_reverts_per_hour:
        return Plan(
            Outcome.HANDS_OFF,
            f"another writer reverted the reconciler's size {len(reverts)} times in an hour (now "
            f"{theirs}); not applying for an hour (check admission webhooks and other "
            "managers of the target)",
            replace(state, hands_off_until=seen.now + HOUR),
            counts,
            reverted_to=theirs,
            log_level=logging.ERROR,
        )
    plan = _decided(seen, state, config, counts, profile)
    return replace(plan, reverted_to=theirs)


def _decided(
    seen: Seen, state: RSyncState, config: StepConfig, counts: ObjectCounts, profile: Profile
) -> Plan:
    last = state.decision
    assert last is not None
    # Restarts are recorded by `settled` from what the apply did, not predicted here.
    decision = decide(
        counts,
        profile,
        last,
        now=seen.now,
        hysteresis=config.hysteresis,
        causes_restart=False,
        progress=sync_progress(seen.rsync),
    )
    recheck = None
    if decision.lower_since is not None:
        remaining = decision.lower_since + config.hysteresis.scale_down_delay_s - seen.now
        recheck = max(remaining, 0.0) + 0.01
    if decision.changes and seen.held_by_owner is not None:
        return _held_by_owner(seen, state, counts, decision, last)
    starts = decision.outcome in (Outcome.POSTPONED, Outcome.ERROR) and last.outcome != decision.outcome
    return Plan(
        decision.outcome,
        decision.reason,
        replace(state, decision=decision),
        counts,
        apply=decision.resources if decision.changes else None,
        publish=changed(seen.rsync, published(decision.recommended, decision.resources)),
        recheck_after=recheck,
        log_level=logging.INFO if starts else logging.DEBUG,
    )


def _held_by_owner(
    seen: Seen, state: RSyncState, counts: ObjectCounts, decision: Decision, last: Decision
) -> Plan:
    """A change is due but its field is another owner's: recommend it, keep the size, write nothing."""
    assert seen.held_by_owner is not None
    reason = f"{decision.reason}; not applied: {seen.held_by_owner}"
    # What the reconciler gets is the owner's: the size the RSync declares, if it declares one.
    theirs = seen.declared or last.resources
    held = replace(decision, outcome=Outcome.HELD_BY_OWNER, resources=theirs, reason=reason)
    return Plan(
        Outcome.HELD_BY_OWNER,
        reason,
        replace(state, decision=held),
        counts,
        publish=changed(seen.rsync, published(held.recommended, held.resources, seen.held_by_owner)),
        log_level=logging.WARNING if last.outcome != Outcome.HELD_BY_OWNER else logging.DEBUG,
    )


def settled(plan: Plan, restarted: bool, rsync_generation: int | None, now: float) -> RSyncState:
    """The state after the plan's apply succeeded: a restart it really caused counts toward the cap;
    a write into the RSync is remembered to tell it from another writer's."""
    state = replace(plan.state, failed=None)
    if restarted and state.decision is not None:
        state = replace(state, decision=replace(state.decision, restarts=(*state.decision.restarts, now)))
    if rsync_generation is not None and plan.apply is not None:
        state = replace(state, written=(rsync_generation, plan.apply))
    return state
