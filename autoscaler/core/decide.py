"""One reconcile of one RSync, decided by one pure function. No I/O, no clock.

    needs(view, state, config)                  # what the loop must read
    decision = decide(observation, state, config)
    # the loop writes decision.plan.apply and decision.plan.publish, once
    result = decision.after(written, now)       # the state to keep after that write, and what to say

A `Decision` holds what to write (its `plan`), what to say before the write (`said`, `shown`), and, for
each result the write can have (written, with or without a restart; failed, for a reason), the state to
keep and what to say then (`after`: `settled`, the restart the write caused counted; or `failed`, what
was learned kept and the decision made again next time).

Read `decide` first, then `_planned`, which makes the plan in order: opted out, the platform, the model
(`autoscaler.core.sizing.size`), the OOM floor (`autoscaler.core.oom.next_floor`), what the working set
taught (`autoscaler.core.calibration`), other writers and owners, when a size may change
(`autoscaler.core.size_decision.decide_size`), room on the node. Those are called by name and return
here; `autoscaler.core.said` only renders a plan and a result into log lines, Events and metrics. The
data a decision is made of and makes are in `autoscaler.core.plan`. The loop that carries a Decision
out is `autoscaler.service.controller` (`Executor`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from fractions import Fraction

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    CALIBRATION_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    SOURCE_REJECTED_ANNOTATION,
    START_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    WAITING_ANNOTATION,
    calibration_annotation,
    oom_floor_annotation,
    parse_resources_annotation,
    published,
    resources_annotation,
    synced_source_annotation,
)
from autoscaler.core.calibration import (
    Calibration,
    Margin,
    Peak,
    Window,
    finished_in,
    folded,
    held,
    learned,
    running,
    same_lesson,
)
from autoscaler.core.observation import Needs, Observation, RSyncView
from autoscaler.core.oom import OomFloor, next_floor
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig, Plan, RSyncState
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.said import Gauged, Said, of_plan, of_written, shown_of_plan, shown_of_sizes
from autoscaler.core.size_decision import HOUR, SizeDecision, decide_size, initial
from autoscaler.core.sizing import PLATFORMS, Load, Profile, Sizing, SizingError, fitted, size
from autoscaler.core.written import Written
from inventory.core.counts import ObjectCounts

DEFERRED_RECHECK_S = 30.0  # how soon a resize the kubelet deferred is looked at again
# How soon the kubelet's answer to a resize in place is looked at (applied, Deferred, Infeasible).
RESIZE_ANSWER_S = 10.0
# How soon a held scale-down in the steady state is looked at again in place: a neighbour on its node may
# wait for the room it holds (docs/sizing.md, "Room on the node").
ROOM_RECHECK_S = 10.0
# After the kubelet deferred a resize of this Pod for want of room, how long more CPU is not asked again:
# memory keeps the reconciler alive, CPU only makes it faster, and each ask the node cannot hold is a
# deferral that every reconciler on the node is woken for (docs/sizing.md, "Room on the node").
CPU_HOLD_S = 60.0


@dataclass(frozen=True)
class Result:
    """What became of a Decision once its write was tried: how the reconcile ends, the state to keep,
    what to say and show, and when to look again (None: on the next event)."""

    outcome: Outcome
    state: RSyncState
    said: tuple[Said, ...]
    shown: tuple[Gauged, ...]
    recheck_after: float | None


@dataclass(frozen=True)
class Decision:
    """One reconcile decided: what to write, what to say before the write, and the state to keep and what
    to say after each result of that write."""

    plan: Plan
    before: RSyncState  # the state the decision was made from (kept in part when its write fails)
    target: str  # the target's name, said with every write
    said: tuple[Said, ...]  # before the write: what holds a size, a new OOM floor, a calibration
    shown: tuple[Gauged, ...]  # before the write: the counts used, a wait for room, the calibration

    def after(self, written: Written | WriteError, now: float) -> Result:
        """The result of the write: its state settled (a restart it caused counted, an RSync generation it
        wrote remembered) or failed (the decision made again next time, the failure said once)."""
        state = after_write(self.before, self.plan, written, now)
        said = tuple(of_written(self.before, self.plan, written, self.target))
        if isinstance(written, WriteError):
            return Result(Outcome.FAILED, state, said, (), None)
        return Result(
            self.plan.outcome, state, said, tuple(shown_of_sizes(self.plan)), self.plan.recheck_after
        )


def decide(seen: Observation, state: RSyncState, config: DecideConfig) -> Decision:
    """The decision of one reconcile, from one observation, what is remembered of the RSync and the
    service's settings (the target's name among them: said with every write, the `target` label of the
    counters)."""
    plan = _plan(seen, state, config)
    said = of_plan(plan, config.target, config.hysteresis, seen.reading.unread)
    shown = shown_of_plan(plan, reads_source=config.reads_source)
    return Decision(plan, state, config.target, tuple(said), tuple(shown))


def profile_for(view: RSyncView, profile: Profile) -> Profile | str:
    """The service's profile, or the one the RSync asks for with its platform annotation; the error
    when it asks for a platform that does not exist."""
    platform = view.platform
    if platform is None or platform == profile.platform.name:
        return profile
    if platform not in PLATFORMS:
        return (
            f"unknown objcount.dev/platform {platform!r} (known: {', '.join(sorted(PLATFORMS))}); not sized"
        )
    return replace(profile, platform=PLATFORMS[platform])


def needs(view: RSyncView, state: RSyncState, config: DecideConfig) -> Needs:
    """What must be read of the reconciler for this reconcile: its size until a decision was made (or
    on every reconcile where it can change behind our back), and the other containers' requests on
    platforms whose rules apply to the pod's total."""
    profile = profile_for(view, config.profile)
    pod_rules = isinstance(profile, Profile) and profile.platform.has_pod_rules
    return Needs(
        current=state.decision is None or config.reread_current,
        others=config.measure_others and pod_rules,
        nodes=not pod_rules,  # Autopilot provisions a node for the Pod: no node caps it
    )


OWN_POD_GOING = "this sidecar's own Pod is being deleted; the next Pod's sidecar sizes that Pod"


def _own_pod_going(seen: Observation, profile: Profile, config: DecideConfig) -> bool:
    """A sidecar whose own Pod is being deleted sizes nothing more. Its Pod known by name: a replacement
    created while it still runs (a Pod deleted by hand, its ReplicaSet making the next) is not its Pod;
    sized by it on its way out, a replacement our webhook could not give a sidecar (the webhook down)
    would not keep its template's size, as failing open promises (seen on the real node). Its name
    unknown: a sidecar that finds every reconciler Pod being deleted runs in one of them (Config Sync's
    Recreate rollout deletes it before the next is created); where the platform prices the Pod's other
    containers it must not size from the Deployment's template then, which lacks the sidecar our webhook
    adds at admission: its size would differ from the one the next Pod's sidecar reads, and each write
    is a rollout (seen on the real node: the two sizes written in turn, a rollout every 3 s)."""
    if config.reads_source and seen.reading.own_pod_going:
        return True
    pod_rules = config.measure_others and profile.platform.has_pod_rules
    return config.reads_source and pod_rules and seen.reading.pods_going


def _others(seen: Observation, profile: Profile, config: DecideConfig) -> tuple[int, int] | None:
    """The other containers' requests: as read; where they are measured but nothing could be read yet (no
    Pod, no Deployment), the platform's assumption for this RSync (with or without the otel-agent); None
    where they are set by hand (the profile has them)."""
    if seen.reading.others is not None:
        return seen.reading.others
    return profile.platform.assumed_others(seen.view.monitoring) if config.measure_others else None


def _plan(seen: Observation, state: RSyncState, config: DecideConfig) -> Plan:
    peak = folded(state.peak, seen.samples)
    plan = _planned(seen, replace(state, peak=peak), config)
    # Why Config Sync syncs nothing of the newest commit is said on the RSync whatever is decided.
    rejected = seen.view.lacks({SOURCE_REJECTED_ANNOTATION: plan.counts.source_rejected})
    return replace(plan, publish={**plan.publish, **rejected}) if rejected else plan


def _planned(seen: Observation, state: RSyncState, config: DecideConfig) -> Plan:
    view = seen.view
    counts = seen.observed.over(view.restored)
    if not view.autoscale:
        return Plan(Outcome.OPTED_OUT, "objcount.dev/autoscale is false: counts recorded", state, counts)
    profile = profile_for(view, config.profile)
    if isinstance(profile, str):  # told once, not retried: the same inputs give the same error
        level = logging.DEBUG if state.refused == profile else logging.ERROR
        return Plan(Outcome.ERROR, profile, replace(state, refused=profile), counts, log_level=level)
    state = replace(state, refused=None)
    if _own_pod_going(seen, profile, config):
        return Plan(Outcome.POSTPONED, OWN_POD_GOING, state, counts)
    profile = _observed(seen, profile, config)
    synced = _synced_source(seen, state, counts)
    stored = _newest(view.oom_floor, state.oom_floor)
    floor = next_floor(
        stored,
        seen.reading.oom_kill,
        now=seen.wall,
        quiet_s=config.hysteresis.oom_quiet_s,
        step_mib=profile.sizing.step_mib,
    )
    covered = _covered(view, counts, synced)
    load = Load.of(covered, seen.reading.api_resources)
    model = None if load is None else profile.sizing.raw_mib(load)  # the model as measured
    peak = _held(seen, state.peak, covered, load, model)
    known = state.calibration or view.calibration
    calibration = _calibration(seen, peak, covered, known, margin=config.margin)
    applies = calibration is not None and not _lowers_a_prune(calibration, counts, covered, view, model)
    # The model for this RSync: at least its OOM floor, with what calibration taught; a new Pod starts
    # at a whole sync of it; the steady state, once seen, replaces its price of what remains.
    profile = replace(profile, sizing=_learned(profile.sizing, floor, calibration if applies else None))
    start = _start(load, profile) if config.in_place else None
    steady = None if peak is None else peak.steady_need(covered.target, config.margin)
    if steady is not None:
        profile = replace(profile, sizing=replace(profile.sizing, steady_mib=steady))
    state = replace(state, oom_floor=floor, synced_source=synced, calibration=calibration, peak=peak)
    # Sized from the counts that cover what the reconciler holds; the counts recorded are the real ones.
    plan = replace(_sized(seen, state, config, covered, profile), counts=counts)
    if plan.outcome == Outcome.HANDS_OFF:
        return plan
    decided = plan.state.decision.recommended if plan.state.decision else None
    if start is not None and decided is not None:  # the steady state seen to need more: that
        start = start.at_least(decided)
    wanted = {
        OOM_FLOOR_ANNOTATION: None if floor is None else oom_floor_annotation(floor),
        CALIBRATION_ANNOTATION: None if calibration is None else calibration_annotation(calibration),
        START_ANNOTATION: None if start is None else resources_annotation(start),
    }
    if synced is not None:
        wanted[SYNCED_SOURCE_ANNOTATION] = synced_source_annotation(synced)
    waiting = plan.waiting_for_room
    wanted[WAITING_ANNOTATION] = None if waiting is None else resources_annotation(waiting)
    return replace(
        plan,
        publish={**plan.publish, **view.lacks(wanted)},
        oom_raised=(seen.reading.oom_kill, floor)
        if seen.reading.oom_kill and floor and floor != stored
        else None,
        calibrated=(known, calibration) if calibration is not None and calibration is not known else None,
    )


def _held(
    seen: Observation, peak: Peak | None, covered: ObjectCounts, load: Load | None, model: Fraction | None
) -> Peak | None:
    """The window's peak with the model's prediction for the counts the reconciler holds now (both
    commits' during a transition) folded in, and whether it is in its steady state: resized without a
    restart (a rollout restarts the reconciler into a whole sync again), the window's container still the
    one that runs, the reconciler reports the window's commit finished, and no newer commit of the source
    seen."""
    if peak is None or load is None or model is None:
        return peak
    window = peak.window
    newer = _moved_on(seen, covered, window)
    finished = finished_in(window, seen.view.finished_commit, seen.view.written_at) and not newer
    current = seen.reading.resizes_running and running(seen.reading.pod) == (window.pod, window.started)
    steady = finished and current and seen.view.progress.pending is None
    # Counts of a commit newer than the window's are not what its reconciler held: not its prediction.
    return held(peak, Fraction(0) if newer else model, load.objects, finished=finished, steady=steady)


def _moved_on(seen: Observation, covered: ObjectCounts, window: Window) -> bool:
    """Whether a commit newer than the window's is seen: fetched by the reconciler (the window's next
    sample starts a new one), counted by us, or linked and being counted."""
    commits = (seen.view.fetched_commit, covered.source_commit, covered.source_reading)
    return any(commit not in (None, window.commit) for commit in commits)


def _start(load: Load | None, profile: Profile) -> Resources | None:
    """The size a new reconciler Pod starts at (our webhook reads it): a new container syncs its commit
    from the start, so the size of that sync, not of the steady state; None when none can be given."""
    if load is None:
        return None
    try:
        return fitted(size(load, profile), profile)[0]
    except SizingError:
        return None


def _calibration(
    seen: Observation, peak: Peak | None, covered: ObjectCounts, known: Calibration | None, *, margin: Margin
) -> Calibration | None:
    """What is known of this RSync's real cost after this reconcile: learned anew when the reconciler
    reports its window's commit finished, no newer commit is seen (its counts are not what the window
    held), and the lesson differs from the one known, else as known."""
    if peak is None or not peak.predicted:
        return known
    finished = finished_in(peak.window, seen.view.finished_commit, seen.view.written_at)
    if not finished or _moved_on(seen, covered, peak.window):
        return known
    lesson = learned(peak, margin, seen.wall)
    lowers = lesson.factor < (Fraction(1) if known is None else known.factor)
    if same_lesson(known, lesson) or (lowers and not peak.transition_seen):
        return known
    return lesson


def _lowers_a_prune(
    calibration: Calibration,
    counts: ObjectCounts,
    covered: ObjectCounts,
    view: RSyncView,
    model: Fraction | None,
) -> bool:
    """Whether a factor below 1 would lower the size of a prune: the reconciler holds objects the new
    commit drops. A prune holds both commits and costs more than the apply a factor is usually learned
    from (seen: 411 to 424 MiB pruning 4,000 objects whose apply peaked at 318 to 328), and the model
    was fitted to the larger of the two: a prune is given the model's own price at least. The source tells
    a prune; without it (cluster mode: the inventory alone) a sync not finished of no more than the factor
    was learned on may be one (the inventory holds what it held, the objects to prune among them), where
    an apply that grows the inventory past it is not."""
    if calibration.factor >= 1:
        return False
    source = counts.source
    if source is None:
        unfinished = view.progress.pending is not None
        return unfinished and model is not None and model <= calibration.predicted_mib
    return (covered.target or 0) > source


def _observed(seen: Observation, profile: Profile, config: DecideConfig) -> Profile:
    """The profile with what was read of the cluster: the Pod's other containers, the largest node."""
    others = _others(seen, profile, config)
    cpu, memory = others if others is not None else (profile.others_cpu_m, profile.others_memory_mib)
    return replace(profile, others_cpu_m=cpu, others_memory_mib=memory, node_room=seen.reading.node_room)


def _learned(sizing: Sizing, floor: OomFloor | None, calibration: Calibration | None) -> Sizing:
    """The model with what this RSync taught: the least memory after an OOM kill, whatever its count;
    the learned factor, bounded by where it was learned (no floor of the window's peak: a transition's
    peak is what the transition needed, not what the objects that remain need)."""
    min_mib = sizing.min_mib if floor is None else max(sizing.min_mib, floor.memory_mib)
    if calibration is None:
        return replace(sizing, min_mib=min_mib)
    factor, at = calibration.factor, Fraction(calibration.predicted_mib)
    return replace(sizing, min_mib=min_mib, calibration_factor=factor, calibrated_at_mib=at)


def _synced_source(seen: Observation, state: RSyncState, counts: ObjectCounts) -> ObjectCounts | None:
    """The source counts of the commit the reconciler last finished: the counts of our source once the
    reconciler reports its commit finished, else the last ones we knew (after a restart, from the RSync)."""
    if counts.source_commit is not None and counts.source_commit == seen.view.finished_commit:
        return ObjectCounts(
            counts.source,
            source_kib=counts.source_kib,
            source_kinds=counts.source_kinds,
            source_crd_path_steps=counts.source_crd_path_steps,
            source_workload_path_steps=counts.source_workload_path_steps,
        )
    return state.synced_source or seen.view.synced_source


def _covered(view: RSyncView, counts: ObjectCounts, synced: ObjectCounts | None) -> ObjectCounts:
    """The counts to size from: until the reconciler reports our source's commit finished, it may still
    hold the last finished commit's objects (a prune deletes them last), so both are covered; the
    objects it will prune are then sized by what they are, not at the cost of any kind."""
    if counts.source_commit is not None and counts.source_commit == view.finished_commit:
        return counts
    return counts.covering(synced)


def _newest(*floors: OomFloor | None) -> OomFloor | None:
    """The floor that answers the latest kill (the annotation after a restart, else what we decided)."""
    return max((f for f in floors if f is not None), key=lambda f: (f.killed_at, f.since), default=None)


def _sized(
    seen: Observation, state: RSyncState, config: DecideConfig, counts: ObjectCounts, profile: Profile
) -> Plan:
    current = seen.reading.current
    if config.in_place and current is not None and current != _ours(seen, state):
        return _resized_from_the_template(seen, state, config, counts, profile)
    last = state.decision or initial(current)
    if config.reread_current and current is not None and current != last.resources:
        last = replace(last, resources=current)  # a new pod, or a resize that did not take
    if seen.reading.deferred is not None:  # asked for already: the kubelet applies it when it fits
        last = replace(last, resources=seen.reading.deferred[0])
    if state.hands_off_until is not None and state.hands_off_until > seen.now:
        return Plan(Outcome.HANDS_OFF, "another writer keeps reverting our size", state, counts)
    foreign = _foreign_size(seen, state)
    if foreign is not None and foreign != last.resources and seen.reading.held_by_owner is None:
        return _reverted(
            seen, replace(state, decision=replace(last, resources=foreign)), config, counts, profile
        )
    return _decided(seen, replace(state, decision=last), config, counts, profile)


def _ours(seen: Observation, state: RSyncState) -> Resources | None:
    """The size we last decided for the reconciler (after a restart of the service: the one recorded as
    applied on the RSync), a resize the kubelet defers counting as that."""
    if seen.reading.deferred is not None:
        return seen.reading.current  # waited out, not a size of another's
    if state.decision is not None:
        return state.decision.resources
    return parse_resources_annotation(seen.view.annotations.get(APPLIED_ANNOTATION))


def _resized_from_the_template(
    seen: Observation, state: RSyncState, config: DecideConfig, counts: ObjectCounts, profile: Profile
) -> Plan:
    """The Pod runs a size that is not ours (its template's: a Pod our webhook did not size, or the first
    one before we decided anything): it is sized at once, up or down, as a Pod admitted with our size
    would have been; no scale-down delay holds a size we never set."""
    plan = _decided(seen, replace(state, decision=initial(None)), config, counts, profile)
    decision = plan.state.decision
    running = seen.reading.current
    if plan.apply is None or decision is None or running is None or plan.apply.covers(running):
        return plan
    down = replace(decision, outcome=Outcome.SCALED_DOWN)
    return replace(plan, outcome=Outcome.SCALED_DOWN, state=replace(plan.state, decision=down))


def _foreign_size(seen: Observation, state: RSyncState) -> Resources | None:
    """The size another writer put in the RSync after our last write of it; None when there is none."""
    if state.written is None or seen.reading.declared is None:
        return None
    generation, ours = state.written
    if seen.view.generation <= generation or seen.reading.declared == ours:
        return None
    return seen.reading.declared


def _reverted(
    seen: Observation, state: RSyncState, config: DecideConfig, counts: ObjectCounts, profile: Profile
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
    seen: Observation, state: RSyncState, config: DecideConfig, counts: ObjectCounts, profile: Profile
) -> Plan:
    last = state.decision
    assert last is not None
    hysteresis = config.hysteresis.of_target(seen.reading.resizes_running)
    decision = decide_size(
        counts,
        profile,
        last,
        now=seen.now,
        hysteresis=hysteresis,
        progress=seen.view.progress,
        api_resources=seen.reading.api_resources,
        room_wanted=seen.reading.room_wanted,
        steady_since=_steady_since(state, profile),
    )
    recheck = None
    if decision.lower_since is not None:
        remaining = decision.lower_since + hysteresis.delay(decision.lower_steady) - seen.now
        recheck = max(remaining, 0.0) + 0.01
        if config.in_place and decision.lower_steady:  # its room may be wanted before the delay ends
            recheck = min(recheck, ROOM_RECHECK_S)
    if decision.changes and seen.reading.held_by_owner is not None:
        return _held_by_owner(seen, state, counts, decision, last)
    split = not profile.platform.has_pod_rules  # Autopilot's ratio rules tie the CPU to the memory
    roomless = _deferred(seen, state, counts, decision, split=split, target=config.target)
    if roomless is None and split and decision.changes:
        roomless = _cpu_still_held(seen, state, counts, decision, target=config.target)
    if roomless is not None:
        return roomless
    if config.in_place and decision.changes:  # the kubelet answers a resize later: look at its answer soon
        recheck = RESIZE_ANSWER_S if recheck is None else min(recheck, RESIZE_ANSWER_S)
    starts = decision.outcome in (Outcome.POSTPONED, Outcome.ERROR) and last.outcome != decision.outcome
    return Plan(
        decision.outcome,
        decision.reason,
        replace(state, decision=decision),
        counts,
        apply=decision.resources if decision.changes else None,
        publish=seen.view.lacks(published(decision.recommended, decision.resources, target=config.target)),
        recheck_after=recheck,
        log_level=logging.INFO if starts else logging.DEBUG,
    )


def _steady_since(state: RSyncState, profile: Profile) -> float | None:
    """When the reconciler's steady state began (its first sample after the sync), while it sizes it."""
    if state.peak is None or profile.sizing.steady_mib is None:
        return None
    return state.peak.steady_from


def _waiting_for_the_kubelet(
    seen: Observation,
    state: RSyncState,
    counts: ObjectCounts,
    decision: SizeDecision,
    target: str,
) -> Plan:
    """The size is asked for and the kubelet defers it (the node has no room now): the running Pod keeps
    its size, nothing is asked again and nothing is rolled out; looked at again in a while."""
    assert seen.reading.deferred is not None
    asked, why = seen.reading.deferred
    reason = (
        f"the kubelet deferred the resize to {asked} ({why}); the running Pod keeps {seen.reading.current}"
    )
    plan = _postponed(seen, state, counts, decision, reason=reason, kept=asked, target=target)
    return replace(plan, recheck_after=DEFERRED_RECHECK_S, waiting_for_room=asked)


def _postponed(
    seen: Observation,
    state: RSyncState,
    counts: ObjectCounts,
    decision: SizeDecision,
    *,
    reason: str,
    kept: Resources,
    target: str,
) -> Plan:
    """The decision's size is not asked now: `kept` stands for it (what the kubelet holds asked, or what
    runs), nothing is written but what describes it; said when the wait begins."""
    waiting = replace(decision, outcome=Outcome.POSTPONED, reason=reason, resources=kept)
    starts = state.decision is None or state.decision.outcome != Outcome.POSTPONED
    return Plan(
        Outcome.POSTPONED,
        reason,
        replace(state, decision=waiting),
        counts,
        publish=seen.view.lacks(published(decision.recommended, kept, target=target)),
        log_level=logging.INFO if starts else logging.DEBUG,
    )


def _with_cpu_of(size: Resources, other: Resources) -> Resources:
    return replace(size, cpu_request_m=other.cpu_request_m, cpu_limit_m=other.cpu_limit_m)


def _waits_for(asked: Resources, decision: SizeDecision) -> bool:
    """Whether the decision waits for the resize the kubelet defers: it wants that size, or that size with
    more CPU (its memory asked for first and deferred too: more CPU would not fit either)."""
    if decision.outcome == Outcome.UNCHANGED:
        return True
    wanted = decision.resources
    return (
        decision.outcome == Outcome.SCALED_UP and wanted is not None and _with_cpu_of(wanted, asked) == asked
    )


def _memory_first(seen: Observation) -> Resources | None:
    """The deferred size with the running CPU: memory is what keeps the reconciler alive, CPU only makes
    it faster, and a node short of CPU (the usual case: CPU is requested, memory is used) often has the
    memory. None when that is what was deferred already, or what runs (nothing new to ask)."""
    assert seen.reading.deferred is not None
    asked, running = seen.reading.deferred[0], seen.reading.current
    if running is None:
        return None
    memory = _with_cpu_of(asked, running)
    return None if memory in (asked, running) else memory


def _deferred(
    seen: Observation,
    state: RSyncState,
    counts: ObjectCounts,
    decision: SizeDecision,
    *,
    split: bool,
    target: str,
) -> Plan | None:
    """In place, while the kubelet defers this Pod's resize for want of room on its node: the memory asked
    first, CPU as it runs (`split`: where the platform lets the two apart), also for a new, larger size;
    what still does not fit waited for. None: no resize is deferred, or the decision is not held by it."""
    deferred = seen.reading.deferred
    if deferred is None:
        return None
    if _waits_for(deferred[0], decision):
        memory = _memory_first(seen) if split else None
        if memory is not None:
            return _memory_first_plan(seen, state, counts, decision, memory=memory, target=target)
        return _waiting_for_the_kubelet(seen, state, counts, decision, target)
    held = _cpu_held(seen, decision) if split and decision.changes else None
    if held is None:
        return None
    return _memory_first_plan(seen, state, counts, decision, memory=held, target=target)


def _cpu_still_held(
    seen: Observation, state: RSyncState, counts: ObjectCounts, decision: SizeDecision, *, target: str
) -> Plan | None:
    """A moment after the kubelet deferred this Pod's resize (`CPU_HOLD_S`), a new size's memory is asked
    with the CPU it runs with, and a size that only asks more CPU waits. None: no hold, or it ended."""
    if state.cpu_held_until is None or seen.now >= state.cpu_held_until:
        return None
    held = _cpu_held(seen, decision)
    if held is not None:
        plan = _memory_first_plan(seen, state, counts, decision, memory=held, target=target)
        return replace(plan, state=replace(plan.state, cpu_held_until=state.cpu_held_until))
    return _cpu_waits(seen, state, counts, decision, target) if _asks_more_cpu(seen, decision) else None


def _asks_more_cpu(seen: Observation, decision: SizeDecision) -> bool:
    wanted, running = decision.resources, seen.reading.current
    return wanted is not None and running is not None and wanted.cpu_request_m > running.cpu_request_m


def _cpu_waits(
    seen: Observation, state: RSyncState, counts: ObjectCounts, decision: SizeDecision, target: str
) -> Plan:
    """More CPU is all a new size asks, and the kubelet deferred this Pod's last resize for want of room
    a moment ago: not asked until the hold ends (it would be deferred too); the Pod keeps what it runs."""
    running, until = seen.reading.current, state.cpu_held_until
    assert running is not None
    assert until is not None
    reason = (
        f"{decision.reason}; more CPU is asked again in {until - seen.now:.0f}s (the kubelet had no room "
        f"for this Pod's last resize); the running Pod keeps {running}"
    )
    plan = _postponed(seen, state, counts, decision, reason=reason, kept=running, target=target)
    return replace(plan, recheck_after=until - seen.now + 0.01)


def _cpu_held(seen: Observation, decision: SizeDecision) -> Resources | None:
    """A new size that asks more CPU while the kubelet defers this Pod's last resize: its memory asked
    with the CPU the Pod runs with, as `_memory_first` does (the node could not hold the last ask; more
    CPU would wait there too, the memory may not), the CPU asked again once that is in. None when it
    asks no more CPU than runs, or nothing new is left to ask."""
    wanted, running = decision.resources, seen.reading.current
    if wanted is None or running is None or wanted.cpu_request_m <= running.cpu_request_m:
        return None
    held = _with_cpu_of(wanted, running)
    return None if held == running else held


def _memory_first_plan(
    seen: Observation,
    state: RSyncState,
    counts: ObjectCounts,
    decision: SizeDecision,
    *,
    memory: Resources,
    target: str,
) -> Plan:
    """The kubelet defers the whole resize (or did a moment ago): its memory part is asked for alone (CPU
    as it runs); more CPU is asked again once the hold ends (`CPU_HOLD_S`: the kubelet then defers it, or
    applies it when the node has room)."""
    deferred = seen.reading.deferred
    asked = None if deferred is None else deferred[0]
    wanted = (
        f"the memory of {decision.resources}" if decision.resources not in (None, asked) else "the memory"
    )
    if deferred is None:
        reason = (
            f"{wanted} first, CPU as it runs (the kubelet had no room for this Pod's last resize): {memory}"
        )
    else:
        reason = f"the kubelet deferred the resize to {asked} ({deferred[1]}); {wanted} first: {memory}"
    first = replace(decision, outcome=Outcome.SCALED_UP, resources=memory, reason=reason)
    return Plan(
        Outcome.SCALED_UP,
        reason,
        replace(state, decision=first, cpu_held_until=seen.now + CPU_HOLD_S),
        counts,
        apply=memory,
        publish=seen.view.lacks(published(decision.recommended, memory, target=target)),
        recheck_after=RESIZE_ANSWER_S,
        log_level=logging.INFO,
    )


def _held_by_owner(
    seen: Observation, state: RSyncState, counts: ObjectCounts, decision: SizeDecision, last: SizeDecision
) -> Plan:
    """A change is due but its field is another owner's: recommend it, keep the size, write nothing."""
    assert seen.reading.held_by_owner is not None
    reason = f"{decision.reason}; not applied: {seen.reading.held_by_owner}"
    # What the reconciler gets is the owner's: the size the RSync declares, if it declares one.
    theirs = seen.reading.declared or last.resources
    held = replace(decision, outcome=Outcome.HELD_BY_OWNER, resources=theirs, reason=reason)
    return Plan(
        Outcome.HELD_BY_OWNER,
        reason,
        replace(state, decision=held),
        counts,
        publish=seen.view.lacks(published(held.recommended, held.resources, seen.reading.held_by_owner)),
        log_level=logging.WARNING if last.outcome != Outcome.HELD_BY_OWNER else logging.DEBUG,
    )


def after_write(before: RSyncState, plan: Plan, written: Written | WriteError, now: float) -> RSyncState:
    """The state to keep after a plan's write: settled once its size is written, `failed` when the write
    failed, the plan's own state when it wrote no size."""
    if isinstance(written, WriteError):
        return failed(before, plan, written.reason)
    applied = written.applied
    if applied is None:
        return plan.state
    return settled(plan, applied.restarted, applied.rsync_generation, now)


def settled(plan: Plan, restarted: bool, rsync_generation: int | None, now: float) -> RSyncState:
    """The state after the plan's write succeeded: a restart it really caused counts toward the cap;
    a write into the RSync is remembered to tell it from another writer's."""
    state = replace(plan.state, failed=None)
    if restarted and state.decision is not None:
        state = replace(state, decision=replace(state.decision, restarts=(*state.decision.restarts, now)))
    if rsync_generation is not None and plan.apply is not None:
        state = replace(state, written=(rsync_generation, plan.apply))
    return state


def failed(before: RSyncState, plan: Plan, reason: Reason) -> RSyncState:
    """The state after the plan's size could not be written: the decision is made again next time from
    what was known before it; what was observed and learned (other writers, the OOM floor, the
    calibration, the finished commit's counts, the working set's peak) is kept, so it is not learned and
    told again on every retry, and the failure is remembered (the same one again is not news)."""
    return replace(
        before,
        reverts=plan.state.reverts,
        hands_off_until=plan.state.hands_off_until,
        oom_floor=plan.state.oom_floor,
        calibration=plan.state.calibration,
        synced_source=plan.state.synced_source,
        peak=plan.state.peak,
        failed=None if plan.apply is None else (reason, plan.apply),
    )
