"""Calibration: each RSync's size learned from what its reconciler really uses on this cluster. Pure.

The model is fitted on one Config Sync version on one cluster; others differ (Config Sync's docs: 30-40 %
less memory from 1.16 to 1.18), and a kind the model never measured may cost far less than it assumes.
Where the cluster serves the metrics API (`metrics.k8s.io`: metrics-server), the service samples the
reconciler container's working set and keeps, per RSync, the largest one seen in a *window*: one
reconciler Pod syncing one fetched commit. A new commit or a new Pod starts a new window: the peak of a
Pod that is gone, or of a commit already replaced, says nothing of what is needed now.

When the reconciler reports the window's commit finished (applied and pruned, no errors), that peak is
compared with the model's largest prediction for what the reconciler held in the window: during a
transition it holds the last finished commit's objects and the new commit's at once (a prune deletes the
old ones last), so a prune's peak is set against the prediction for both, not for what remains:

    needed = max(peak x (1 + margin), peak + margin_mib)          (25 % and 0 MiB by default)
    factor = needed / predicted                      (clamped to [1/4, 4])

The factor sizes transitions (the model x the factor, ahead of the work: a change of counts still moves
the size before the apply); a repository the model overprices is lowered toward what it uses and one it
underprices is raised. A window whose transition the service never saw (it started after the commit
was synced) holds the steady state's samples only, less than a transition needs: a lesson from it may
raise the factor, never lower it.

What a transition needed never holds the size of the steady state after it: once the sync finished,
and in place (a resize restarts nothing), the reconciler is sized by what it then uses, its working set
over the last `STEADY_S` past the sync's tail (`in_tail`) plus the margin (`Peak.steady_need`), up or
down; a lower size goes through the same scale-down rules as any other (a pending prune, the restart
cap) but the steady state's own delay (`steady_scale_down_delay_seconds`, 0 by default) counted from its
start; the OOM floor still wins upward. A new Pod starts a new window, syncing its commit from the
start: a transition.

A factor does not travel far from where it was learned. One above 1 scales the whole model (the
model underprices this repository: more objects, more so). One below 1 lowers the model by its ratio up
to the prediction it was learned at, and beyond it by the MiB it saved there, no more: what a few
hundred objects showed (mostly the model's fixed part overpriced) says nothing of what each of thousands
more costs (a factor of 0.43 learned on 500 ConfigMaps sized a commit of 4,000 objects under its peak:
two OOM kills, BENCHMARKS.md). The margin covers what sampling misses: the metrics API reports a working
set scraped every 10-60 s, not the peak (the cgroup's maximum is not exposed), and a Go heap peaks
between scrapes. The clamp keeps one odd reading (or a hand-written annotation) from moving a size more
than four-fold.

What was learned is kept on the RSync (annotation `objcount.dev/calibration`), so a restart of the
service keeps it. Without the metrics API nothing is sampled and nothing is learned.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

from autoscaler.core import quantity
from inventory.core.ids import DEPLOYMENT_NAME_LABEL, RECONCILER_CONTAINER
from inventory.core.objects import Meta, PodView, block_of, named
from inventory.core.times import timestamp

MIN_FACTOR = Fraction(1, 4)
MAX_FACTOR = Fraction(4)


@dataclass(frozen=True)
class Margin:
    """What is added to an observed peak: a fraction of it, and at least some MiB."""

    fraction: Fraction = Fraction(1, 4)
    # 0 by default: the size is rounded up to the sizing step after it (up to 31 MiB more on the default
    # 32 MiB grid), and peak x 1.25 + one step stays within 1.5 x peak + one step at any peak.
    at_least_mib: int = 0

    def needed(self, peak_mib: int) -> int:
        """Whole MiB: the peak plus the margin, rounded up."""
        return math.ceil(max(peak_mib * (1 + self.fraction), Fraction(peak_mib + self.at_least_mib)))


@dataclass(frozen=True, order=True)
class Window:
    """One reconciler container (its Pod, and when it started: a restart in the same Pod is another)
    syncing one fetched commit."""

    pod: str
    started: float  # the container's `startedAt`, wall-clock seconds
    commit: str


@dataclass(frozen=True)
class Peak:
    """The largest working set of the reconciler container seen in a window (whole MiB, rounded up), and
    the model's largest prediction (raw MiB, uncalibrated) for what the reconciler held in it (0 until a
    reconcile of the window saw its counts). Once the reconciler reports the window's commit finished
    (`steady_objects`: what it then holds), the samples after that are its steady state's, kept apart."""

    window: Window
    mib: int
    predicted: Fraction = Fraction(0)
    transition_seen: bool = False  # a reconcile saw the window's commit not finished yet
    steady_objects: int | None = None
    steady_predicted: Fraction = Fraction(0)  # the model's prediction for those objects (raw MiB)
    steady: tuple[tuple[float, int], ...] = ()  # the steady state's samples of the last STEADY_S: (at, MiB)
    steady_from: float | None = None  # when the steady state's first sample was taken (its tail began)

    @property
    def steady_mib(self) -> int:
        """The steady state's largest working set over its last `STEADY_S` (0 before its first sample)."""
        return max((mib for _, mib in self.steady), default=0)

    def steady_need(self, objects: int | None, margin: Margin) -> int | None:
        """What the reconciler needs while it holds the `objects` its finished commit left (its recent
        steady working set plus the margin); None during a transition, or before a steady sample."""
        if self.steady_objects is None or objects != self.steady_objects or not self.steady:
            return None
        return margin.needed(self.steady_mib)


# How far back the steady state's working set is looked at: after an apply the Go runtime returns the
# memory it no longer holds over a few minutes (seen: 294 MiB at the end of an apply of 4,000 objects,
# 155 two minutes later, 112 after five), so the latest samples say what the objects that remain need;
# two minutes is two to eight samples at the sampling interval.
STEADY_S = 120.0
# The sync's tail: the samples of the steady state's first TAIL_S are not what its objects need. The
# reconciler reports its commit synced while it still holds what the apply or the prune used, and the
# metrics API's sample may have been scraped before the report. In the 105 syncs of the v1.25.0
# side-by-side runs 8 to 10 (`python -m profiles.sync_tail`), 30 s after the report the working set was
# within 10 % (or 8 MiB) of what it held 1 to 3 minutes on in 97; in run 10 a prune's last sample (about
# 435 MiB) sized the steady state at 544Mi for 269 s while it used about 100 (BENCHMARKS, "Closer to the
# clairvoyant").
TAIL_S = 30.0
# Some tails are longer: in run 13 the reconciler held 371 to 404 MiB of its prune's 404 for 82 s after
# the report, then 108. So past TAIL_S the tail goes on, up to TAIL_MAX_S, while the working set stays at
# the sync's level: within TAIL_LEVEL of the window's peak, and above the model's prediction for the
# objects that remain (what a small repository holds at its peak all along is its need, not a tail). Its
# first sample below that level ends it: from then on every sample is the steady state's, a rebound too.
# While the tail lasts the size is what it was (a scale-down waits its usual delay), never lower.
TAIL_LEVEL = Fraction(9, 10)
TAIL_MAX_S = 150.0


@dataclass(frozen=True)
class Calibration:
    """What was learned for an RSync: the factor on the model, and the peak and window it came from."""

    factor: Fraction
    peak_mib: int
    window: Window
    predicted_mib: int  # the model's prediction it was compared with (whole MiB, rounded up)
    since: float  # wall-clock seconds when it was learned


@dataclass(frozen=True)
class Usage:
    """One sample: the reconciler container of a reconciler Deployment's Pod, and its working set."""

    deployment: str  # the reconciler Deployment (`configsync.gke.io/deployment-name`)
    pod: str
    started: float  # the container's `startedAt`, wall-clock seconds
    working_set_mib: int


@dataclass(frozen=True)
class Sampled:
    """What one look at the metrics API gave: the samples, and the Pods whose usage did not parse."""

    usages: list[Usage]
    unreadable: list[str]


def running(pod: Mapping[str, object] | None) -> tuple[str, float] | None:
    """The reconciler container running in this Pod: the Pod's name and the container's `startedAt` (what
    a window is of); None when none runs."""
    view = PodView.of(pod)
    started = timestamp(view.status_of(RECONCILER_CONTAINER).running_since)
    return (view.meta.name, started) if view.meta.name and started is not None else None


def usages(pods: Iterable[Mapping[str, object]], metrics: Iterable[Mapping[str, object]]) -> Sampled:
    """The samples of the live reconciler Pods whose container runs and that the metrics API reports.
    A Pod reported with a usage that does not parse gives no sample (unknown is not zero: the peak stays
    as it was) and is named in `unreadable`."""
    working_sets = {Meta.of(m).name: working_set_mib(m) for m in metrics}
    samples, unreadable = [], []
    for pod in pods:
        meta = Meta.of(pod)
        name, deployment = meta.name, meta.labels.get(DEPLOYMENT_NAME_LABEL)
        if not name or name not in working_sets or meta.deleting:
            continue
        mib, container = working_sets[name], running(pod)
        if mib is None:
            unreadable.append(name)
        elif deployment is not None and container is not None:
            samples.append(Usage(deployment, name, container[1], mib))
    return Sampled(samples, unreadable)


def newest_per_deployment(samples: Iterable[Usage]) -> dict[str, Usage]:
    """One sample per reconciler Deployment: its newest container's (a rollout runs two Pods a while)."""
    newest: dict[str, Usage] = {}
    for sample in samples:
        if sample.deployment not in newest or sample.started > newest[sample.deployment].started:
            newest[sample.deployment] = sample
    return newest


def finished_in(window: Window, finished_commit: str | None, finished_at: float | None) -> bool:
    """Whether the reconciler reports the window's commit finished by this container: a status written
    before the container started (by the Pod it replaced) does not count, since the new container syncs
    the same commit again from the start."""
    return finished_commit == window.commit and finished_at is not None and finished_at >= window.started


def working_set_mib(pod_metrics: Mapping[str, object]) -> int | None:
    """The reconciler container's working set in whole MiB (rounded up) from a `PodMetrics` object; None
    when it reports none, or a quantity that does not parse (unknown, never zero)."""
    usage = block_of(named(pod_metrics.get("containers"), RECONCILER_CONTAINER), "usage")
    memory = usage.get("memory")
    if memory is None:
        return None
    try:
        value = quantity.parse(memory)
    except quantity.QuantityError:
        return None
    return None if value <= 0 else quantity.mib_up(value)


def observed(last: Peak | None, window: Window, mib: int, at: float = 0.0) -> Peak:
    """The window's peak after a sample of `mib` taken `at`: a new window starts from the sample; once the
    window's commit is finished the sample is the steady state's too (those of the last STEADY_S kept),
    past the sync's tail (`in_tail`, from the steady state's first sample)."""
    if last is None or last.window != window:
        return Peak(window, mib)
    peak = replace(last, mib=max(last.mib, mib))
    if last.steady_objects is None:
        return peak
    since = at if last.steady_from is None else last.steady_from
    if in_tail(last, at - since, mib):
        return replace(peak, steady_from=since)
    steady = (*((t, m) for t, m in last.steady if t > at - STEADY_S), (at, mib))
    return replace(peak, steady=steady, steady_from=since)


def in_tail(last: Peak, elapsed: float, mib: int) -> bool:
    """Whether a sample taken `elapsed` s into the steady state is still the sync's tail: within its first
    TAIL_S, or, until TAIL_MAX_S and before any steady sample, at the sync's level (near the window's peak,
    above the model's prediction for what remains)."""
    if elapsed < TAIL_S:
        return True
    at_level = mib >= TAIL_LEVEL * last.mib and mib > last.steady_predicted
    return not last.steady and elapsed < TAIL_MAX_S and at_level


@dataclass(frozen=True)
class Sample:
    """One look at the reconciler container's working set, and when (the service's clock)."""

    window: Window
    mib: int
    at: float = 0.0


def folded(peak: Peak | None, samples: Iterable[Sample]) -> Peak | None:
    """The window's peak after these samples, in order."""
    for sample in samples:
        peak = observed(peak, sample.window, sample.mib, sample.at)
    return peak


def held(
    peak: Peak | None, predicted: Fraction, objects: int, *, finished: bool, steady: bool
) -> Peak | None:
    """The window's peak with the model's prediction for what the reconciler holds now (raw MiB,
    uncalibrated) folded in (the largest of the window is kept), whether its commit is `finished`, and,
    in its `steady` state, the objects that state holds (other objects, as a new inventory before the
    next commit is fetched, end the steady state: its samples start again)."""
    if peak is None:
        return None
    steady_objects = objects if steady else None
    same = steady_objects == peak.steady_objects
    return replace(
        peak,
        predicted=max(peak.predicted, predicted),
        transition_seen=peak.transition_seen or not finished,
        steady_objects=steady_objects,
        steady_predicted=predicted if steady else Fraction(0),
        steady=peak.steady if same else (),
        steady_from=peak.steady_from if same else None,
    )


def learned(peak: Peak, margin: Margin, now: float) -> Calibration:
    """The calibration after the window's commit finished with `peak`, set against the model's largest
    prediction for what the reconciler held in the window."""
    needed = margin.needed(peak.mib)
    exact = min(max(Fraction(needed) / max(peak.predicted, Fraction(1)), MIN_FACTOR), MAX_FACTOR)
    factor = Fraction(math.ceil(exact * 10_000), 10_000)  # four decimals, as stored; rounded up
    return Calibration(factor, peak.mib, peak.window, math.ceil(peak.predicted), now)


# A lesson within this of the one known is not news: the annotation is not rewritten and the size not
# moved (each move restarts the reconciler; its peak varies by a few percent from one sync to the next).
SAME_LESSON = Fraction(1, 10)


def same_lesson(known: Calibration | None, new: Calibration) -> bool:
    """Whether a new lesson says what the known one says: a factor within 10 % of it."""
    return known is not None and abs(new.factor - known.factor) <= SAME_LESSON * known.factor
