"""The executor: the loop that carries out a Decision. Per reconcile it reads once through the port, has
the pure `decide` (autoscaler.core.decide) make the Decision, writes once through the port, keeps the
state the Decision gives for that write's result, and delivers what it says as log lines, Events and
metrics. It decides nothing itself.

Order of the writes (`KubePort.write`): what was learned (the OOM floor, the calibration: kept even when
the size cannot be written), then the size, then the other published annotations; the counts last (a
scale-up should not wait for a counts write). A failed read or write ends the reconcile `failed` (the work
queue tries again after its backoff); the counts are still recorded when the sizing failed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from autoscaler.core.calibration import Peak, Sample, folded, observed
from autoscaler.core.decide import decide, needs
from autoscaler.core.observation import Observation, RSyncView
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig, RSyncState
from autoscaler.core.reasons import ReadError, WriteError
from autoscaler.core.said import (
    SHOWN_SERIES,
    Gauged,
    Said,
    of_counts_unwritten,
    of_counts_written,
    of_read_failure,
)
from autoscaler.core.written import Written
from autoscaler.kube.events import Occurrence, regarding_rsync
from autoscaler.kube.port import Port
from autoscaler.service.metrics import (
    COUNTED,
    DECISIONS,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    SHOWN,
    WORKING_SET,
)
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import RSync
from inventory.kube import kubeapi

log = logging.getLogger(__name__)


@dataclass
class Executor:
    """One reconcile of one RSync at a time: read, step, write, say.

    Threads: an RSync's entries (`states`, `retry_after`) are written only by the worker reconciling it
    (the work queue hands a key to one worker at a time); the sampler's thread only reads its state's peak
    and hands samples over under `_samples_lock`; `decisions` (tests, the API) copies `states` whole."""

    port: Port
    config: DecideConfig
    clock: Callable[[], float]
    later: Callable[[RSyncKey, float], None]  # look at the RSync again after so many seconds
    states: dict[RSyncKey, RSyncState] = field(default_factory=dict)
    wall_clock: Callable[[], float] = time.time  # for what outlives the service (an OOM floor's age)
    events: Callable[[Occurrence], None] | None = None  # where decisions go as Kubernetes Events
    # The wait the API server asked for (Retry-After) when an RSync's last reconcile failed on it.
    retry_after: dict[RSyncKey, float] = field(default_factory=dict)
    # Working sets sampled since each RSync's last reconcile, written by the sampler's thread: the step
    # folds them into the state's peak.
    _samples: dict[RSyncKey, list[Sample]] = field(default_factory=dict)
    _samples_lock: threading.Lock = field(default_factory=threading.Lock)

    # ----- the sampler's side ----------------------------------------------------------------------
    def sampled(self, key: RSyncKey, sample: Sample) -> bool:
        """A sample of the reconciler's working set, kept for the next reconcile; whether it raises the
        window's peak (or begins a new window), so a reconcile should look at it."""
        WORKING_SET.labels(str(key)).set(sample.mib)
        with self._samples_lock:
            pending = self._samples.setdefault(key, [])
            known = folded(self._state(key).peak, pending)
            pending.append(sample)
        return observed(known, sample.window, sample.mib, sample.at) != known

    def peak(self, key: RSyncKey) -> Peak | None:
        """The largest working set of the reconciler's current window, with the samples not yet used."""
        with self._samples_lock:
            return folded(self._state(key).peak, self._samples.get(key, ()))

    def _state(self, key: RSyncKey) -> RSyncState:
        return self.states.get(key, RSyncState())

    def _take_samples(self, key: RSyncKey) -> tuple[Sample, ...]:
        with self._samples_lock:
            return tuple(self._samples.pop(key, ()))

    # ----- one reconcile -----------------------------------------------------------------------------
    def reconcile(self, key: RSyncKey, rsync: RSync | None, counts: ObjectCounts) -> Outcome:
        """One reconcile of `key`, from its cached RSync (None: deleted) and the counts seen."""
        with RECONCILE_SECONDS.time():
            try:
                outcome = self._reconcile(key, rsync, counts)
            except Exception:
                RECONCILE_ERRORS.labels("crash").inc()
                log.exception("%s: reconcile crashed", key)
                outcome = Outcome.FAILED
        DECISIONS.labels(outcome).inc()
        return outcome

    def _reconcile(self, key: RSyncKey, rsync: RSync | None, counts: ObjectCounts) -> Outcome:
        if rsync is None:
            self.forget(key)
            return Outcome.GONE
        view = RSyncView.of(rsync)
        outcome = self._size(key, view, counts)
        try:
            self._write_counts(key, view, counts)
        except kubeapi.ApiError as error:
            self._say(key, view, of_counts_unwritten(type(error).__name__.lower(), str(error)))
            return Outcome.FAILED
        return outcome

    def _size(self, key: RSyncKey, view: RSyncView, counts: ObjectCounts) -> Outcome:
        """Read once, decide, write once, keep the state, say."""
        before = self._state(key)
        try:
            reading = self.port.read(key, view, needs(view, before, self.config))
        except ReadError as error:
            self._asked_to_wait(key, error.retry_after)
            self._say(key, view, of_read_failure(self.port.target.name, error.reason, str(error)))
            return Outcome.FAILED
        seen = Observation(
            key, view, reading, counts, self.clock(), self.wall_clock(), self._take_samples(key)
        )
        decision = decide(seen, before, self.config, self.port.target.name)
        self._show(key, decision.shown)
        self._say(key, view, decision.said)
        written: Written | WriteError
        try:
            written = self.port.write(key, reading, decision.plan.apply, decision.plan.publish)
        except WriteError as error:
            self._asked_to_wait(key, error.retry_after)
            written = error
        result = decision.after(written, self.clock())
        self.states[key] = result.state
        self._say(key, view, result.said)
        self._show(key, result.shown)
        if result.recheck_after is not None:
            self.later(key, result.recheck_after)
        return result.outcome

    def _asked_to_wait(self, key: RSyncKey, seconds: float | None) -> None:
        if seconds is not None:
            self.retry_after[key] = seconds

    def _say(self, key: RSyncKey, view: RSyncView, said: Iterable[Said]) -> None:
        """Deliver what happened to an RSync: its log line, its Event on the RSync, its counter."""
        said = list(said)
        regarding = regarding_rsync(view.rsync, key.kind) if self.events is not None else None
        for each in said:
            if each.event is not None and self.events is not None and regarding is not None:
                note = each.note or each.message or ""
                self.events(Occurrence.of(regarding, each.event, note, self.wall_clock()))
        self.tell(said, f"{key}: ")

    @staticmethod
    def tell(said: Iterable[Said], prefix: str = "") -> None:
        """Deliver the log lines and counters of what was said (of the service: no Event)."""
        for each in said:
            if each.message is not None:
                log.log(each.level, "%s%s", prefix, each.message)
            if each.counted is not None:
                counter, labels = each.counted
                (COUNTED[counter].labels(*labels) if labels else COUNTED[counter]).inc()

    @staticmethod
    def _show(key: RSyncKey, shown: Iterable[Gauged]) -> None:
        """Set what /metrics shows of an RSync, as the plan says (`autoscaler.core.said.shown_of_*`)."""
        for gauge, labels, value in shown:
            SHOWN[gauge].labels(str(key), *labels).set(value)

    # ----- the counts ----------------------------------------------------------------------------------
    def _write_counts(self, key: RSyncKey, view: RSyncView, counts: ObjectCounts) -> None:
        state = self._state(key)
        written = self.port.write_counts(key, view, counts, in_annotations=state.counts_in_annotations)
        self._say(key, view, of_counts_written(written, counts))
        if written.fell_back:
            self.states[key] = replace(state, counts_in_annotations=True)

    def forget(self, key: RSyncKey) -> None:
        """The RSync is gone: drop what we knew of it and its metric series. A new RSync of the same
        name starts from what it has, not from the old one's decisions."""
        self.states.pop(key, None)
        self.retry_after.pop(key, None)
        with self._samples_lock:
            self._samples.pop(key, None)
        with contextlib.suppress(KeyError):
            WORKING_SET.remove(str(key))
        for gauge, series in SHOWN_SERIES.items():
            for labels in series:
                with contextlib.suppress(KeyError):
                    SHOWN[gauge].remove(str(key), *labels)
