"""The reconcile loop of the service, read top to bottom: what it sees (`Observer`: the RSyncs, their
inventories and, in a sidecar, the source, each cached once; every change queues its RSync's key), the
workers that take a key at a time (`Controller`), and the reconcile itself (`Executor.reconcile`, the loop
in one screen: read once, decide, write once, keep the state, say).

A reconcile is keyed by RSync, reads its inputs from the caches, and is idempotent. Until every cache
has synced (which is also when the stored counts are restored, since they are read from the cached
RSync) no decision is made: the outcome is `deferred_startup`. A malformed inventory keeps its last good
count (unknown is not zero, and one bad version is no reason to forget a good one); a deleted
inventory's count is forgotten.

Every "look again later" is a timer of the work queue: a reconcile before the caches synced, a retry
after an error (its backoff), a held scale-down falling due, and the periodic resync of each RSync.

Order of the writes (`KubePort.write`): what was learned (the OOM floor, the calibration: kept even when
the size cannot be written), then the size, then the other published annotations; the counts last (a
scale-up should not wait for a counts write). A failed read or write ends the reconcile `failed` (the work
queue tries again after its backoff); the counts are still recorded when the sizing failed.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from autoscaler.core.calibration import Margin, Peak, Sample, Window, folded, newest_per_deployment, observed
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
    of_no_metrics_api,
    of_read_failure,
    of_usage_unparsed,
    of_usage_unread,
)
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import Profile
from autoscaler.core.written import Written
from autoscaler.kube.events import Occurrence, regarding_rsync
from autoscaler.kube.pod_cache import ReconcilerPods
from autoscaler.kube.port import KubePort, Port
from autoscaler.kube.targets import RecommendTarget, Target
from autoscaler.service.logs import CURRENT_RSYNC
from autoscaler.service.metrics import (
    COUNTED,
    DECISIONS,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    SHOWN,
    TALLY,
    WORKING_SET,
)
from autoscaler.service.workqueue import ShutDown, WorkQueue
from inventory.core.counts import ObjectCounts, describe_kinds
from inventory.core.ids import (
    RECONCILER_NAMESPACE,
    RSyncKey,
    key_from_inventory_labels,
    managed_by_config_sync_selector,
    own_inventory_selector,
    reconciler_name,
    reconciler_pods,
)
from inventory.core.inventory_count import InventorySummary
from inventory.core.objects import RSync
from inventory.core.sync_progress import sync_progress
from inventory.kube import kubeapi
from inventory.kube.watch import InventoryCodec, Key, ObjectCodec, RawObject, Reflector, WatchSettings
from inventory.source.source_count import SourceCount, rejection
from inventory.source.source_watch import SourceLayout, SourceWatcher

__all__ = ["Controller", "Executor", "Observer", "Scope"]

log = logging.getLogger(__name__)


Mode = Literal["sidecar", "cluster"]


@dataclass(frozen=True)
class Scope:
    """What the service manages: its own RSync (sidecar) or every RSync it can see (cluster)."""

    mode: Mode
    rsync: RSyncKey | None = None
    inventory_selector: str = ""
    namespace: str | None = None

    @classmethod
    def sidecar(cls, key: RSyncKey) -> Scope:
        return cls("sidecar", key, own_inventory_selector(key), key.namespace)

    @classmethod
    def cluster(cls, selector: str = "", namespace: str | None = None) -> Scope:
        return cls("cluster", None, selector or managed_by_config_sync_selector(), namespace)


def keep_last_good_count(cached: InventorySummary | None, new: InventorySummary) -> InventorySummary:
    if new.count is None and cached is not None and cached.count is not None:
        return replace(new, count=cached.count, kinds=cached.kinds)
    return new


# ===== 1. What the loop sees: each change of a count queues its RSync's key ==============================
class Observer:
    """The RSyncs in scope, the entry counts of their inventories, and (sidecar) the object count of the
    source, each cached once. Every change calls `on_change(key)` with the RSync it concerns; the
    reconcile then reads `rsync(key)` and `observed(key)`."""

    def __init__(
        self,
        api: kubeapi.KubeApi,
        scope: Scope,
        on_change: Callable[[RSyncKey], None],
        *,
        source_layout: SourceLayout | None = None,
        watch_settings: WatchSettings | None = None,
    ) -> None:
        self.scope = scope
        self._on_change = on_change
        settings = watch_settings or WatchSettings()
        self._lock = threading.Lock()
        self._source: ObjectCounts | None = None  # the source's count, KiB and kinds, once counted
        # Which inventory belongs to which RSync (the counts stay in the reflector's store only).
        self._inventory_of: dict[RSyncKey, Key] = {}
        self.inventories: Reflector[InventorySummary] = Reflector(
            api,
            kubeapi.RESOURCEGROUP,
            InventoryCodec(TALLY),
            self._on_inventory,
            tally=TALLY,
            namespace=scope.namespace,
            label_selector=scope.inventory_selector,
            # Config Sync names the inventory after its RSync; a Role limited to it by `resourceNames`
            # allows a list or watch only with this selector.
            field_selector=f"metadata.name={scope.rsync.name}" if scope.rsync else "",
            settings=settings,
            keep=keep_last_good_count,
        )
        kinds = [scope.rsync.kind] if scope.rsync else list(kubeapi.RSYNC_RESOURCES)
        self.rsyncs: dict[str, Reflector[RawObject]] = {
            kind: Reflector(
                api,
                kubeapi.RSYNC_RESOURCES[kind],
                ObjectCodec(),
                functools.partial(self._on_rsync, kind),
                tally=TALLY,
                namespace=scope.namespace,
                field_selector=f"metadata.name={scope.rsync.name}" if scope.rsync else "",
                settings=settings,
            )
            for kind in kinds
        }
        self.source_watcher = (
            SourceWatcher(source_layout, self._on_source, on_linked=self._on_linked, tally=TALLY)
            if source_layout is not None and scope.rsync is not None
            else None
        )

    # ----- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        # The source watcher first: once the watches have synced the service is ready, and /healthz must
        # not find a part it checks not started yet (seen under load: ready, then "source watcher" down).
        if self.source_watcher is not None:
            self.source_watcher.start()
        for reflector in self._reflectors():
            reflector.start()

    def signal_stop(self) -> None:
        if self.source_watcher is not None:
            self.source_watcher.stop()
        for reflector in self._reflectors():
            reflector.signal_stop()

    def stop(self) -> None:
        for reflector in self._reflectors():
            reflector.stop()

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self._reflectors())

    def unhealthy(self) -> list[str]:
        broken = [f"watch {r.resource.plural}" for r in self._reflectors() if not r.alive]
        if self.source_watcher is not None and not self.source_watcher.alive:
            broken.append("source watcher")
        return broken

    def problems(self) -> list[str]:
        """Why a watched resource cannot be read, where that is no passing fault."""
        return [r.problem for r in self._reflectors() if r.problem is not None]

    def _reflectors(self) -> list[Reflector[Any]]:
        return [self.inventories, *self.rsyncs.values()]

    # ----- what is seen --------------------------------------------------------------------------------
    def rsync(self, key: RSyncKey) -> RSync | None:
        reflector = self.rsyncs.get(key.kind)
        cached = reflector.store.get((key.namespace, key.name)) if reflector else None
        return cast(RSync, cached.body) if cached else None

    def observed(self, key: RSyncKey) -> ObjectCounts:
        """The counts seen this run (None where not seen yet or never valid)."""
        with self._lock:
            inventory = self._inventory_of.get(key)
            source = self._source if key == self.scope.rsync else None
        summary = self.inventories.store.get(inventory) if inventory else None
        if summary is None:
            return replace(source or ObjectCounts(), sync=None)
        return replace(source or ObjectCounts(), sync=summary.count, sync_kinds=summary.kinds)

    def rsync_keys(self) -> list[RSyncKey]:
        """Every RSync in the caches that this service manages."""
        keys = [
            RSyncKey(kind, namespace, name)  # type: ignore[arg-type]
            for kind, reflector in self.rsyncs.items()
            for namespace, name in list(reflector.store)
        ]
        return [key for key in keys if self.manages(key)]

    def manages(self, key: RSyncKey) -> bool:
        """A sidecar manages its own RSync. The cluster controller with the default selector manages
        every RSync (one whose reconciler has not yet written an inventory too: an OOM kill in its first
        parse is seen); narrowed by `inventory_selector`, only an RSync whose inventory the selector
        matched (the RSyncs are watched unfiltered: an RSync has no label of its inventory's). Before
        this, a narrowed controller sized every RSync it saw, from the counts others had written on them
        (seen in the side-by-side run)."""
        if self.scope.rsync is not None:
            return key == self.scope.rsync
        if self.scope.inventory_selector == managed_by_config_sync_selector():
            return True
        with self._lock:
            return key in self._inventory_of

    # ----- changes -------------------------------------------------------------------------------------
    def _on_inventory(self, change: str, key: Key, summary: InventorySummary | None) -> None:
        with self._lock:
            if summary is None:
                rsync_key = self._rsync_of_deleted_inventory(key)
                self._inventory_of.pop(rsync_key, None)
            else:
                rsync_key = key_from_inventory_labels(summary.labels, summary.namespace, summary.name)
                self._inventory_of[rsync_key] = key
        self._on_change(rsync_key)

    def _rsync_of_deleted_inventory(self, key: Key) -> RSyncKey:
        if self.scope.rsync is not None:
            return self.scope.rsync
        known = next((rsync for rsync, inventory in self._inventory_of.items() if inventory == key), None)
        return known or key_from_inventory_labels({}, *key)

    def _on_rsync(self, kind: str, change: str, key: Key, obj: object) -> None:
        rsync_key = RSyncKey(kind, *key)  # type: ignore[arg-type]
        if self.manages(rsync_key):
            self._on_change(rsync_key)

    def _on_source(self, count: SourceCount) -> None:
        assert self.scope.rsync is not None
        if count.rejected:
            self._on_rejected_source(count)
            return
        source = count.object_counts()
        with self._lock:
            self._source = source
        log.info(
            "%s: source has %d objects in %d files, %d KiB; by kind: %s",
            self.scope.rsync,
            count.objects,
            count.files,
            source.source_kib,
            describe_kinds(count.kinds, most=10),
        )
        self._on_change(self.scope.rsync)

    def _on_rejected_source(self, count: SourceCount) -> None:
        """Config Sync syncs nothing of this commit: the last good source count stands, marked with why."""
        assert self.scope.rsync is not None
        reason = rejection(count)
        with self._lock:
            self._source = replace(
                self._source or ObjectCounts(), source_rejected=reason, source_reading=None
            )
        self._on_change(self.scope.rsync)

    def _on_linked(self, commit: str) -> None:
        """A commit is linked and being counted: the counts of the last one no longer say what the
        reconciler will hold (it may parse the new commit before we have counted it)."""
        assert self.scope.rsync is not None
        with self._lock:
            last = self._source or ObjectCounts()
            if last.source_commit == commit:
                return
            self._source = replace(last, source_reading=commit)
        self._on_change(self.scope.rsync)


# ===== 2. The workers: a key at a time from the queue to the reconcile, and when to look again ==========
@dataclass
class Controller:
    """The service's loop wired up: the observer feeding the keyed queue, the cache of the reconciler Pods,
    the port, and `workers` threads each taking a key at a time to `Executor.reconcile`."""

    api: kubeapi.KubeApi
    scope: Scope
    source_layout: SourceLayout | None = None
    watch_settings: WatchSettings = field(default_factory=WatchSettings)
    # None: only the counts are recorded.
    target: Target | None = None
    profile: Profile = field(default_factory=Profile)
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    margin: Margin = field(default_factory=Margin)  # added to an observed peak (calibration)
    clock: Callable[[], float] = time.monotonic
    queue: WorkQueue[RSyncKey] = field(default_factory=WorkQueue)
    max_reverts_per_hour: int = 3
    workers: int = 8
    # On platforms with pod-level rules, size against the other containers' requests as the reconciler
    # pod really has them (read from its Pod or Deployment) instead of the profile's assumed ones.
    measure_others: bool = False
    reconciler_namespace: str = RECONCILER_NAMESPACE
    own_pod: str | None = None  # a sidecar's own Pod, by name: it sizes nothing once that is deleted
    # Counts in the RSync status instead of our annotations (a future Config Sync defining the fields).
    counts_in_status: bool = False
    # The port to the cluster (default: on `api`, through `target`).
    port: Port | None = None
    # Where decisions go as Kubernetes Events (None: no Events).
    events: Callable[[Occurrence], None] | None = None
    # Each RSync is reconciled again this long after its last reconcile (None: only on changes).
    resync_interval_s: float | None = None
    source_poll_s: float = 1.0  # how often a sidecar looks for a new commit of its source
    # When each worker last turned its loop (a hung one is seen even while the others turn).
    heartbeats: dict[str, float] = field(default_factory=dict)
    _no_metrics_api_said: bool = False
    _usage_error: str = ""  # the last error reading the metrics API
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.observer = Observer(
            self.api,
            self.scope,
            self.queue.add,
            source_layout=self.source_layout,
            watch_settings=self.watch_settings,
        )
        self.source_watcher = self.observer.source_watcher
        if self.source_watcher is not None:
            self.source_watcher.interval = self.source_poll_s
        # The reconciler Pods, watched (with a port of our own): a sidecar its own, cluster mode every one.
        self.pods = (
            None
            if self.port is not None
            else ReconcilerPods(
                self.api,
                self._pod_changed,
                deployment=reconciler_name(self.scope.rsync) if self.scope.rsync else None,
                namespace=self.reconciler_namespace,
                settings=self.watch_settings,
                tally=TALLY,
            )
        )
        port = self.port or KubePort(
            self.api,
            self.target or RecommendTarget(self.api),
            self.reconciler_namespace,
            self.counts_in_status,
            pods=self.pods,
            own_pod=self.own_pod,
        )
        config = DecideConfig(
            self.profile,
            self.hysteresis,
            self.max_reverts_per_hour,
            measure_others=self.measure_others,
            reread_current=port.target.rereads_current,
            in_place=port.target.in_place,
            margin=self.margin,
            reads_source=self.source_layout is not None,
            target=port.target.name,
        )
        self.executor = Executor(port, config, self.clock, self.queue.add_after, events=self.events)

    # ----- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Controller:
        self.observer.start()
        if self.pods is not None:
            self.pods.start()
        # Reconciles wait on API round trips; several workers overlap them. The queue never hands the
        # same RSync to two workers at once.
        for number in range(self.workers):
            worker = threading.Thread(target=self._work, name=f"reconcile-{number}", daemon=True)
            self.heartbeats[worker.name] = time.monotonic()
            worker.start()
            self._threads.append(worker)
        return self

    def stop(self) -> None:
        """Stop the watches, let the reconcile in flight finish, then stop the workers."""
        self.observer.signal_stop()
        if self.pods is not None:
            self.pods.signal_stop()
        self.queue.shutdown()
        for thread in self._threads:
            thread.join(30)
        self.observer.stop()
        if self.pods is not None:
            self.pods.stop()

    @property
    def synced(self) -> bool:
        return self.observer.synced

    # ----- what tests and the service look at ----------------------------------------------------------
    def observed(self, key: RSyncKey) -> ObjectCounts:
        return self.observer.observed(key)

    # ----- reconcile ---------------------------------------------------------------------------------
    def reconcile(self, key: RSyncKey) -> Outcome:
        if not self.synced:
            DECISIONS.labels(Outcome.DEFERRED_STARTUP).inc()
            return Outcome.DEFERRED_STARTUP
        return self.executor.reconcile(key, self.observer.rsync(key), self.observer.observed(key))

    def _pod_changed(self, deployment: str, waiting_on: str | None) -> None:
        """A reconciler Pod changed as the kubelet tells it (a resize applied or deferred, a kill, a new
        Pod): its RSync is reconciled now, not when a timer looks again. When it began to wait for room on
        a node, so is every RSync with a Pod there: one may give back what it holds above its need."""
        names = {deployment}
        if waiting_on is not None and self.pods is not None:
            names.update(self.pods.on_node(waiting_on))
        for key in self.observer.rsync_keys():
            if reconciler_name(key) in names:
                self.queue.add(key)

    def sample_usage(self) -> None:
        """One look at every managed reconciler's working set (calibration); each RSync whose window's
        peak rose is queued, so `decide` learns from it once the reconciler reports its sync finished."""
        keys = self.observer.rsync_keys()
        if not keys or not self.synced:
            return
        # A sidecar reads its own reconciler's Pod; the cluster controller every reconciler's at once.
        selector = reconciler_pods(keys[0] if len(keys) == 1 else None)
        try:
            sampled = self.executor.port.reconciler_usage(selector)
        except kubeapi.ApiError as error:
            self.executor.tell(of_usage_unread(str(error), repeated=str(error) == self._usage_error))
            self._usage_error = str(error)
            return
        self._usage_error = ""
        if sampled is None:
            if not self._no_metrics_api_said:
                self.executor.tell(of_no_metrics_api())
                self._no_metrics_api_said = True
            return
        for pod in sampled.unreadable:
            self.executor.tell(of_usage_unparsed(pod))
        newest = newest_per_deployment(sampled.usages)
        for key in keys:
            sample, rsync = newest.get(reconciler_name(key)), self.observer.rsync(key)
            commit = sync_progress(rsync).fetched if rsync is not None else None
            if sample is None or commit is None:
                continue
            window = Window(sample.pod, sample.started, commit)
            if self.executor.sampled(key, Sample(window, sample.working_set_mib, self.clock())):
                self.queue.add(key)

    def unhealthy(self) -> list[str]:
        """The parts that are not running as they should (empty when all are): every watch thread, the
        source watcher, every reconcile worker, and each worker's loop turned in the last 30 s."""
        broken = self.observer.unhealthy()
        if self.pods is not None and not self.pods.reflector.alive:
            broken.append("watch pods")
        broken += [f"worker {t.name}" for t in self._threads if not t.is_alive()]
        now = time.monotonic()
        broken += [
            f"worker {name} stalled" for name, beat in dict(self.heartbeats).items() if now - beat >= 30
        ]
        return broken

    @property
    def healthy(self) -> bool:
        return not self.unhealthy()

    def _work(self) -> None:
        name = threading.current_thread().name
        while True:
            self.heartbeats[name] = time.monotonic()
            try:
                key = self.queue.get(timeout=1.0)
            except ShutDown:
                return
            if key is None:
                continue
            token = CURRENT_RSYNC.set(str(key))
            try:
                outcome = self.reconcile(key)
                if outcome == Outcome.DEFERRED_STARTUP:
                    self.queue.add_after(key, 0.2)
                elif retried(outcome):
                    delay = self.queue.retry(key, at_least=self.executor.retry_after.pop(key, None))
                    log.debug("%s: retrying in %.1f s", key, delay)
                else:
                    self.queue.forget(key)
                    if outcome != Outcome.GONE and self.resync_interval_s is not None:
                        self.queue.add_after(key, self.resync_interval_s)
            finally:
                CURRENT_RSYNC.reset(token)
                self.queue.done(key)


def retried(outcome: Outcome) -> bool:
    """Whether a reconcile is tried again with backoff: a read or a write that failed (it may pass next
    time). A decision's own error (an unknown platform asked, a size over the platform's maximum) is not: the
    same inputs give the same error, so it waits for a change of them or the next resync."""
    return outcome is Outcome.FAILED


# ===== 3. One reconcile: read once, decide, write once, keep the state, say ===============================
@dataclass
class Executor:
    """One reconcile of one RSync at a time: read, decide, write, say.

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
    # Working sets sampled since each RSync's last reconcile, written by the sampler's thread: `decide`
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
        decision = decide(seen, before, self.config)
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
