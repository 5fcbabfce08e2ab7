"""The reconcile loop: the observer's changes feed a keyed queue; workers take a key at a time and hand
it to the executor, which decides (a pure step) and acts (through the cluster operations).

A reconcile is keyed by RSync, reads its inputs from the caches, and is idempotent. Until every cache
has synced (which is also when the stored counts are restored, since they are read from the cached
RSync) no decision is made: the outcome is `deferred_startup`.

Every "look again later" is a timer of the work queue: a reconcile before the caches synced, a retry
after an error (its backoff), a held scale-down falling due, and the periodic resync of each RSync.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autoscaler.core.calibration import Margin, Sample, Window, newest_per_deployment
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig
from autoscaler.core.said import of_no_metrics_api, of_usage_unparsed, of_usage_unread
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import Profile
from autoscaler.kube.events import Occurrence
from autoscaler.kube.pod_cache import ReconcilerPods
from autoscaler.kube.port import KubePort, Port
from autoscaler.kube.targets import RecommendTarget, Target
from autoscaler.service.executor import Executor
from autoscaler.service.logs import CURRENT_RSYNC
from autoscaler.service.metrics import DECISIONS, TALLY
from autoscaler.service.observer import Observer, Scope
from autoscaler.service.workqueue import ShutDown, WorkQueue
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RECONCILER_NAMESPACE, RSyncKey, reconciler_name, reconciler_pods
from inventory.core.sync_progress import sync_progress
from inventory.kube import kubeapi
from inventory.kube.watch import WatchSettings
from inventory.source.source_watch import SourceLayout

__all__ = ["Controller", "Scope"]

log = logging.getLogger(__name__)


@dataclass
class Controller:
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
    workers: int = 4
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
        peak rose is queued, so the step learns from it once the reconciler reports its sync finished."""
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
    time). A step's own error (an unknown platform asked, a size over the platform's maximum) is not: the
    same inputs give the same error, so it waits for a change of them or the next resync."""
    return outcome is Outcome.FAILED
