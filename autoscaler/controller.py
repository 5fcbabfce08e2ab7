"""The reconcile loop: watches and the source feed a keyed queue; each reconcile records the counts,
decides the reconciler's size and applies it through the configured target.

A reconcile is keyed by RSync, reads its inputs from the caches, and is idempotent. Until every cache
has synced (which is also when the stored counts are restored, since they are read from the cached
RSync) no decision is made: the outcome is `deferred_startup`.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from autoscaler.logs import CURRENT_RSYNC
from autoscaler.metrics import (
    APPLIED,
    APPLY_ERRORS,
    DECISIONS,
    OBJECTS,
    RECOMMENDED,
    RECONCILE_SECONDS,
    RESTARTS_CAUSED,
)
from autoscaler.policy import PLATFORMS, Decision, Hysteresis, Outcome, Profile, Resources, decide, initial
from autoscaler.targets import ApplyError, Target, annotation_value, other_containers_requests
from autoscaler.workqueue import ShutDown, WorkQueue
from inventory import kubeapi
from inventory.counts import APPLIED_ANNOTATION, RECOMMENDED_ANNOTATION, ObjectCounts, restored_counts
from inventory.ids import (
    RECONCILER_NAMESPACE,
    RSyncKey,
    key_from_inventory_labels,
    managed_by_config_sync_selector,
    own_inventory_selector,
)
from inventory.inventory_count import InventorySummary
from inventory.source_count import SourceCount
from inventory.source_watch import SourceLayout, SourceWatcher
from inventory.status import CountWriter
from inventory.watch import InventoryCodec, Key, ObjectCodec, RawObject, Reflector, WatchSettings

log = logging.getLogger(__name__)

# Per-RSync settings, as annotations on the RSync.
AUTOSCALE_ANNOTATION = "objcount.dev/autoscale"  # "false": record counts, size nothing
PLATFORM_ANNOTATION = "objcount.dev/platform"  # standard | autopilot | autopilot-bursting

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


@dataclass
class Controller:
    api: kubeapi.KubeApi
    scope: Scope
    source_layout: SourceLayout | None = None
    watch_settings: WatchSettings = field(default_factory=WatchSettings)
    writer: CountWriter | None = None
    target: Target | None = None
    profile: Profile = field(default_factory=Profile)
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    clock: Callable[[], float] = time.monotonic
    queue: WorkQueue[RSyncKey] = field(default_factory=WorkQueue)
    decisions: dict[RSyncKey, Decision] = field(default_factory=dict)
    max_reverts_per_hour: int = 3
    workers: int = 4
    # On platforms with pod-level rules, size against the other containers' requests as the reconciler
    # pod really has them (read from its Pod or Deployment) instead of the profile's assumed ones.
    measure_others: bool = False
    reconciler_namespace: str = RECONCILER_NAMESPACE
    # How a re-evaluation is scheduled later (the service uses APScheduler); default: a timer.
    schedule_after: Callable[[RSyncKey, float], None] | None = None
    heartbeat: float = field(default_factory=time.monotonic)
    _reverts: dict[RSyncKey, list[float]] = field(default_factory=dict)
    _hands_off: dict[RSyncKey, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _sync_counts: dict[RSyncKey, int] = field(default_factory=dict)
    _source_counts: dict[RSyncKey, int] = field(default_factory=dict)
    _threads: list[threading.Thread] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.writer = self.writer or CountWriter(self.api)
        self.inventories: Reflector[InventorySummary] = Reflector(
            self.api,
            kubeapi.RESOURCEGROUP,
            InventoryCodec(),
            self._on_inventory,
            namespace=self.scope.namespace,
            label_selector=self.scope.inventory_selector,
            settings=self.watch_settings,
        )
        self.rsyncs: dict[str, Reflector[RawObject]] = {}
        kinds = [self.scope.rsync.kind] if self.scope.rsync else list(kubeapi.RSYNC_RESOURCES)
        for kind in kinds:
            self.rsyncs[kind] = Reflector(
                self.api,
                kubeapi.RSYNC_RESOURCES[kind],
                ObjectCodec(),
                functools.partial(self._on_rsync, kind),
                namespace=self.scope.namespace,
                field_selector=f"metadata.name={self.scope.rsync.name}" if self.scope.rsync else "",
                settings=self.watch_settings,
            )
        self.source_watcher = (
            SourceWatcher(self.source_layout, self._on_source)
            if self.source_layout is not None and self.scope.rsync is not None
            else None
        )

    # ----- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> Controller:
        for reflector in self._reflectors():
            reflector.start()
        if self.source_watcher is not None:
            self.source_watcher.start()
        # Reconciles wait on API round trips; several workers overlap them. The queue never hands the
        # same RSync to two workers at once.
        for number in range(self.workers):
            worker = threading.Thread(target=self._work, name=f"reconcile-{number}", daemon=True)
            worker.start()
            self._threads.append(worker)
        return self

    def stop(self) -> None:
        """Stop the watches, let the reconcile in flight finish, then stop the worker."""
        if self.source_watcher is not None:
            self.source_watcher.stop()
        reflectors = self._reflectors()
        for reflector in reflectors:
            reflector.signal_stop()
        self.queue.shutdown()
        for thread in self._threads:
            thread.join(30)
        for reflector in reflectors:
            reflector.stop()

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self._reflectors())

    def _reflectors(self) -> list[Reflector[Any]]:
        return [self.inventories, *self.rsyncs.values()]

    # ----- inputs ------------------------------------------------------------------------------------
    def _on_inventory(self, change: str, key: Key, summary: Any) -> None:
        if summary is None:
            rsync_key = self._key_of_deleted_inventory(key)
            with self._lock:
                self._sync_counts.pop(rsync_key, None)
        else:
            rsync_key = key_from_inventory_labels(summary.labels, summary.namespace, summary.name)
            if summary.count is not None:
                with self._lock:
                    self._sync_counts[rsync_key] = summary.count
        self.queue.add(rsync_key)

    def _key_of_deleted_inventory(self, key: Key) -> RSyncKey:
        if self.scope.rsync is not None:
            return self.scope.rsync
        return key_from_inventory_labels({}, *key)

    def _on_rsync(self, kind: str, change: str, key: Key, obj: object) -> None:
        self.queue.add(RSyncKey(kind, *key))  # type: ignore[arg-type]

    def _on_source(self, count: SourceCount) -> None:
        assert self.scope.rsync is not None
        with self._lock:
            self._source_counts[self.scope.rsync] = count.objects
        log.info("%s: source has %d objects in %d files", self.scope.rsync, count.objects, count.files)
        self.queue.add(self.scope.rsync)

    # ----- reconcile ---------------------------------------------------------------------------------
    def observed(self, key: RSyncKey) -> ObjectCounts:
        """The counts seen this run (None where not seen yet or not valid)."""
        with self._lock:
            return ObjectCounts(self._source_counts.get(key), self._sync_counts.get(key))

    def rsync_body(self, key: RSyncKey) -> dict[str, Any] | None:
        reflector = self.rsyncs.get(key.kind)
        cached = reflector.store.get((key.namespace, key.name)) if reflector else None
        return cached.body if cached else None

    def reconcile(self, key: RSyncKey) -> str:
        with RECONCILE_SECONDS.time():
            outcome = self._reconcile(key)
        DECISIONS.labels(outcome).inc()
        return outcome

    def _reconcile(self, key: RSyncKey) -> str:
        if not self.synced:
            return Outcome.DEFERRED_STARTUP
        rsync = self.rsync_body(key)
        if rsync is None:
            self._forget(key)
            return Outcome.UNCHANGED
        assert self.writer is not None
        observed = self.observed(key)
        # Size first: a scale-up should not wait for the counts' status write (which follows at once).
        outcome = (
            self._size(key, rsync, observed.over(restored_counts(rsync)))
            if self.target
            else Outcome.UNCHANGED
        )
        self.writer.write(key, rsync, observed)
        return outcome

    def _size(self, key: RSyncKey, rsync: dict[str, Any], counts: ObjectCounts) -> str:
        assert self.target is not None
        for name, value in (("source", counts.source), ("sync", counts.sync)):
            if value is not None:
                OBJECTS.labels(str(key), name).set(value)
        annotations = (rsync.get("metadata") or {}).get("annotations") or {}
        if annotations.get(AUTOSCALE_ANNOTATION, "true").lower() == "false":
            return Outcome.UNCHANGED  # opted out: counts are still recorded, nothing is sized
        profile = self._profile_for(key, annotations.get(PLATFORM_ANNOTATION))
        if profile is not None and self.measure_others and profile.platform.has_pod_rules:
            profile = self._with_measured_others(key, profile)
        last = self._last_decision(key, rsync)
        if profile is None or last is None:
            return Outcome.ERROR
        decision = decide(
            counts,
            profile,
            last,
            now=self.clock(),
            hysteresis=self.hysteresis,
            causes_restart=self.target.causes_restart,
        )
        if decision.changes and not self._apply(key, decision):
            return Outcome.ERROR
        if decision.outcome in (Outcome.POSTPONED, Outcome.ERROR):
            # Said once when it starts; every reconcile while it lasts would only repeat it.
            level = logging.DEBUG if last.outcome == decision.outcome else logging.INFO
            log.log(level, "%s: %s: %s", key, decision.outcome, decision.reason)
        self.decisions[key] = decision
        self._publish(key, rsync, decision)
        if decision.lower_since is not None:
            remaining = decision.lower_since + self.hysteresis.scale_down_delay_s - self.clock()
            (self.schedule_after or self.queue.add_after)(key, max(remaining, 0.0) + 0.01)
        return decision.outcome

    def _forget(self, key: RSyncKey) -> None:
        """The RSync is gone: drop what we knew of it and its metric series. A new RSync of the same
        name starts from what it has, not from the old one's decisions."""
        for state in (self.decisions, self._reverts, self._hands_off):
            state.pop(key, None)
        for gauge, labels in (
            (OBJECTS, ("source", "sync")),
            (RECOMMENDED, ("cpu_millicores", "memory_mib")),
            (APPLIED, ("cpu_millicores", "memory_mib")),
        ):
            for label in labels:
                with contextlib.suppress(KeyError):
                    gauge.remove(str(key), label)

    def _last_decision(self, key: RSyncKey, rsync: dict[str, Any]) -> Decision | None:
        """The state to decide from: what we decided last, or what the reconciler has now; None when it
        cannot be known or another writer keeps reverting us."""
        assert self.target is not None
        try:
            last = self.decisions.get(key) or initial(self.target.current(key))
        except ApplyError as error:
            APPLY_ERRORS.labels(self.target.name, error.reason).inc()
            log.error("%s: cannot read the reconciler's resources: %s", key, error)
            return None
        if self._hands_off.get(key, float("-inf")) > self.clock():
            return None  # logged when it started
        foreign = self.target.overwritten(key, rsync)
        if foreign is not None and foreign != last.resources:
            last = self.decisions[key] = replace(last, resources=foreign)
            if not self._accept_revert(key, foreign):
                return None
        return last

    def _apply(self, key: RSyncKey, decision: Decision) -> bool:
        assert self.target is not None
        assert decision.resources is not None
        try:
            self.target.apply(key, decision.resources)
        except ApplyError as error:
            APPLY_ERRORS.labels(self.target.name, error.reason).inc()
            log.error("%s: %s failed: %s", key, decision.outcome, error)
            return False
        if self.target.causes_restart:
            RESTARTS_CAUSED.inc()
        log.info("%s: %s via %s: %s", key, decision.outcome, self.target.name, decision.reason)
        return True

    def _profile_for(self, key: RSyncKey, platform: str | None) -> Profile | None:
        """The service's profile, or the one an RSync asks for with its platform annotation."""
        if platform is None or platform == self.profile.platform.name:
            return self.profile
        if platform not in PLATFORMS:
            log.error(
                "%s: unknown %s %r (known: %s); not sizing it until fixed",
                key,
                PLATFORM_ANNOTATION,
                platform,
                ", ".join(sorted(PLATFORMS)),
            )
            return None
        return replace(self.profile, platform=PLATFORMS[platform])

    def _with_measured_others(self, key: RSyncKey, profile: Profile) -> Profile | None:
        """The profile with the other containers' requests read from the cluster; None when they
        cannot be read (no decision then: a wrong pod total would be rounded again by the platform)."""
        assert self.target is not None
        try:
            others = other_containers_requests(self.api, self.reconciler_namespace, key)
        except ApplyError as error:
            APPLY_ERRORS.labels(self.target.name, error.reason).inc()
            log.error("%s: cannot read the reconciler pod's other containers: %s", key, error)
            return None
        if others is None:
            return profile  # no pod and no Deployment yet: the profile's assumption is all there is
        return replace(profile, others_cpu_m=others[0], others_memory_mib=others[1])

    def _accept_revert(self, key: RSyncKey, foreign: Resources) -> bool:
        """Another writer replaced our size: report it; re-apply unless it keeps doing so (no fight)."""
        assert self.target is not None
        APPLY_ERRORS.labels(self.target.name, "reverted").inc()
        now = self.clock()
        reverts = [t for t in self._reverts.get(key, []) if now - t < 3600] + [now]
        self._reverts[key] = reverts
        if len(reverts) > self.max_reverts_per_hour:
            self._hands_off[key] = now + 3600
            log.error(
                "%s: another writer reverted the reconciler's size %d times in an hour (now %s); "
                "not applying for an hour (check admission webhooks and other managers of %s)",
                key,
                len(reverts),
                foreign,
                self.target.name,
            )
            return False
        log.warning(
            "%s: another writer replaced the reconciler's size with %s; applying ours again", key, foreign
        )
        return True

    def _publish(self, key: RSyncKey, rsync: dict[str, Any], decision: Decision) -> None:
        """Recommended and applied resources: metrics, and annotations on the RSync for `status`."""
        annotations: dict[str, str] = {}
        for gauge, annotation, resources in (
            (RECOMMENDED, RECOMMENDED_ANNOTATION, decision.recommended),
            (APPLIED, APPLIED_ANNOTATION, decision.resources),
        ):
            if resources is None:
                continue
            _set_gauges(gauge, key, resources)
            annotations[annotation] = annotation_value(resources)
        current = (rsync.get("metadata") or {}).get("annotations") or {}
        changed = {k: v for k, v in annotations.items() if current.get(k) != v}
        if changed:
            try:
                self.api.patch(
                    kubeapi.RSYNC_RESOURCES[key.kind],
                    key.namespace,
                    key.name,
                    {"metadata": {"annotations": changed}},
                )
            except kubeapi.ApiError as error:
                log.warning("%s: could not publish the recommendation: %s", key, error)

    def resync(self) -> None:
        """Queue every RSync known to the caches (the periodic full resync)."""
        for kind, reflector in self.rsyncs.items():
            for namespace, name in list(reflector.store):
                self.queue.add(RSyncKey(kind, namespace, name))  # type: ignore[arg-type]

    def unhealthy(self) -> list[str]:
        """The parts that are not running as they should (empty when all are): every watch thread, the
        source watcher, every reconcile worker, and a worker loop that turned in the last 30 s."""
        broken = [f"watch {r.resource.plural}" for r in self._reflectors() if not r.alive]
        if self.source_watcher is not None and not self.source_watcher.alive:
            broken.append("source watcher")
        broken += [f"worker {t.name}" for t in self._threads if not t.is_alive()]
        if time.monotonic() - self.heartbeat >= 30:
            broken.append("reconcile loop stalled")
        return broken

    @property
    def healthy(self) -> bool:
        return not self.unhealthy()

    def _work(self) -> None:
        while True:
            self.heartbeat = time.monotonic()
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
                elif outcome == Outcome.ERROR:
                    self.queue.retry(key)
                else:
                    self.queue.forget(key)
            except kubeapi.ApiError as error:
                delay = self.queue.retry(key)
                log.warning("%s: reconcile failed (%s); retrying in %.1f s", key, error, delay)
            except Exception:
                delay = self.queue.retry(key)
                log.exception("%s: reconcile crashed; retrying in %.1f s", key, delay)
            finally:
                CURRENT_RSYNC.reset(token)
                self.queue.done(key)


def _set_gauges(gauge: Any, key: RSyncKey, resources: Resources) -> None:
    gauge.labels(str(key), "cpu_millicores").set(resources.cpu_request_m)
    gauge.labels(str(key), "memory_mib").set(resources.memory_request_mib)
