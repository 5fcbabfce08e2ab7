"""The port between a reconcile and the cluster: `read` what `decide` decides from, `write` what it
decided, then the counts. The loop (`Executor`, autoscaler.service.controller) talks to the cluster
through nothing else; its unit tests use an in-memory fake of `Port`.

One read per reconcile: the RSync comes parsed from the cache (`RSyncView`), the reconciler's Pods from
the cache of the reconciler Pods (`pods`, a watch; listed once where it is not synced, or not given):
its size where the target keeps it there, the other containers, the OOM kills; the target reads only
what it keeps elsewhere (a Deployment's template). Errors: `ReadError` from `read`,
`WriteError` from `write`'s size, kubeapi.ApiError from the counts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, Protocol, TypeVar, cast

import orjson

from autoscaler.core.annotations import (
    FALLBACK_ANNOTATION,
    annotation_counts,
    annotation_patch,
    count_annotations,
    learned_first,
    status_counts,
    status_patch,
)
from autoscaler.core.calibration import Sampled, usages
from autoscaler.core.nodes import largest_node, largest_node_of
from autoscaler.core.observation import Needs, Reading, RSyncView, Unread
from autoscaler.core.oom import oom_kill_of
from autoscaler.core.pods import (
    ResizesWaiting,
    newest_live,
    others_requests,
    resize_deferred,
    resizes_waiting,
    room_wanted,
)
from autoscaler.core.reasons import ReadError
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import template_containers
from autoscaler.core.sizing import NodeRoom
from autoscaler.core.written import CountsWritten, Written
from autoscaler.kube.pod_cache import ReconcilerPods
from autoscaler.kube.targets import InPlaceTarget, Target, read_error
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RECONCILER_NAMESPACE, RSyncKey, reconciler_name, reconciler_pods
from inventory.core.objects import Deployment, Pod, PodView, RSync
from inventory.kube import kubeapi

API_SURFACE_TTL_S = 600.0  # how often discovery and the Nodes are read again
# In place, without a cache of every reconciler Pod (a sidecar caches its own): how often the reconciler
# Pods whose resize the kubelet defers are listed again (one list for every RSync: a neighbour's wait for
# room is seen within this, and a reconcile costs no list of its own).
ROOM_TTL_S = 5.0
T = TypeVar("T")


class Port(Protocol):
    @property
    def target(self) -> Target: ...

    def read(self, key: RSyncKey, view: RSyncView, needs: Needs) -> Reading: ...

    def write(
        self, key: RSyncKey, reading: Reading, apply: Resources | None, publish: Mapping[str, str | None]
    ) -> Written:
        """Apply the size (if any is due) through the target and publish the annotations; what was learned
        (annotations.LEARNED_ANNOTATIONS) is published before the size, so a failed write keeps it."""
        ...

    def write_counts(
        self, key: RSyncKey, view: RSyncView, counts: ObjectCounts, *, in_annotations: bool
    ) -> CountsWritten: ...

    def reconciler_usage(self, selector: str) -> Sampled | None:
        """A sample of the working set of every running reconciler Pod the label selector picks; None when
        the cluster does not serve the metrics API."""
        ...


@dataclass
class Periodic(Generic[T]):
    """A value read at most once per `ttl_s`: after a failed read the last value stays (None before any),
    retried after the same interval. A failure is told once while it lasts (the same status again, a
    403 where the install does not grant the read, is not news), again once a read has succeeded."""

    read: Callable[[], T | None]
    ttl_s: float
    _last: tuple[float, T | None] | None = field(default=None, init=False)
    _failing: int | None = field(default=None, init=False)  # the status of the failure told

    def get(self, now: float) -> tuple[T | None, kubeapi.ApiError | None]:
        """The value, and the error of a read made now that is news (None: none, or it succeeded)."""
        last = self._last[1] if self._last else None
        if self._last is not None and now - self._last[0] < self.ttl_s:
            return last, None
        try:
            value: T | None = self.read()
        except kubeapi.ApiError as error:
            self._last = (now, last)
            news = error.status != self._failing
            self._failing = error.status
            return last, error if news else None
        self._last, self._failing = (now, value), None
        return value, None


@dataclass
class KubePort:
    api: kubeapi.KubeApi
    target: Target
    reconciler_namespace: str = RECONCILER_NAMESPACE
    counts_in_status: bool = False
    surface_ttl_s: float = API_SURFACE_TTL_S
    clock: Callable[[], float] = time.monotonic
    pods: ReconcilerPods | None = None  # the cache of the reconciler Pods (None: each read lists them)
    own_pod: str | None = None  # a sidecar's own Pod, by name (None: cluster mode, or not known)
    _surface: Periodic[int] = field(init=False)
    _nodes: Periodic[NodeRoom] = field(init=False)
    _waiting: Periodic[ResizesWaiting] = field(init=False)

    def __post_init__(self) -> None:
        self._surface = Periodic(self.api.api_resource_types, self.surface_ttl_s)
        self._nodes = Periodic(self._largest_node, self.surface_ttl_s)
        self._waiting = Periodic(self._resizes_waiting, ROOM_TTL_S)
        if self.pods is not None and isinstance(self.target, InPlaceTarget):
            self.target.on_resized = self.pods.wrote

    # ----- read ---------------------------------------------------------------------------------------
    def read(self, key: RSyncKey, view: RSyncView, needs: Needs) -> Reading:
        unread: list[Unread] = []
        pods: list[Pod] = []
        try:
            pods = self._reconciler_pods(key)
        except ReadError as error:
            if (needs.current and self.target.in_place) or needs.others:
                raise
            unread.append(Unread("read", f"cannot read the reconciler's OOM kills: {error}"))
        pod = newest_live(pods)
        now = self.clock()
        surface, surface_error = self._surface.get(now)
        if surface_error is not None:
            unread.append(
                Unread(
                    "discovery",
                    f"cannot read the API surface from discovery ({surface_error}); sizing with {surface}",
                )
            )
        room, nodes_error = self._nodes.get(now) if needs.nodes else (None, None)
        if nodes_error is not None:
            unread.append(
                Unread(
                    "nodes",
                    f"cannot list the Nodes ({nodes_error}); "
                    + (
                        "no size is capped to a node"
                        if room is None
                        else f"capping to {room.node}, as last read"
                    ),
                )
            )
        current = self.target.current(key, view, pod) if needs.current else None
        waiting, waiting_error = self._room(now) if self.target.in_place and pod else (None, None)
        if waiting_error is not None:
            unread.append(
                Unread(
                    "room",
                    f"cannot list the reconciler Pods waiting for room ({waiting_error}); a scale-down "
                    "waits out its delay",
                )
            )
        return Reading(
            current=current,
            resizes_running=self.target.resizes_running(key),  # as `current` found the target
            declared=self.target.declared(view),
            held_by_owner=self.target.held_by_owner(view),
            others=self._others(key, pod) if needs.others else None,
            oom_kill=oom_kill_of(pod),
            api_resources=surface,
            node_room=room,
            pod=pod,
            pods_going=pod is None and bool(pods),
            own_pod_going=self._own_pod_going(pods),
            unread=tuple(unread),
            deferred=resize_deferred(pod) if pod is not None and self.target.in_place else None,
            room_wanted=room_wanted(pod, waiting or ()),
        )

    def _room(self, now: float) -> tuple[ResizesWaiting | None, kubeapi.ApiError | None]:
        """Who waits for room: from the cache where it holds every reconciler Pod, else listed."""
        every = self.pods.every() if self.pods is not None and self.pods.holds_every_reconciler else None
        return (resizes_waiting(every), None) if every is not None else self._waiting.get(now)

    def _own_pod_going(self, pods: list[Pod]) -> bool:
        """Whether this sidecar's own Pod, among its reconciler's Pods, is being deleted."""
        views = (PodView.of(pod) for pod in pods)
        return any(view.meta.name == self.own_pod and view.meta.deleting for view in views)

    def _reconciler_pods(self, key: RSyncKey) -> list[Pod]:
        """The reconciler Pods of an RSync, those being deleted too: cached, else listed."""
        cached = self.pods.of(reconciler_name(key)) if self.pods is not None else None
        if cached is not None:
            return cached
        selector = reconciler_pods(key)
        namespace = self.reconciler_namespace
        try:
            page = orjson.loads(self.api.list_page(kubeapi.POD, namespace, label_selector=selector))
        except kubeapi.ApiError as error:
            raise read_error(error, f"listing the reconciler pod of {key}") from error
        pods: list[Pod] = page.get("items") or []
        return pods

    def _others(self, key: RSyncKey, pod: Pod | None) -> tuple[int, int] | None:
        """CPU (millicores) and memory (MiB) requested by the reconciler pod's other containers, as they
        are: read from the running Pod (which has what admission added, a sidecar among them), else from
        the Deployment's template; None when neither exists."""
        if pod is not None:
            view = PodView.of(pod)
            return others_requests(view.containers or [], f"pod {view.meta.name}")
        name = reconciler_name(key)
        try:
            deployment = cast(Deployment, self.api.get(kubeapi.DEPLOYMENT, self.reconciler_namespace, name))
        except kubeapi.NotFound:
            return None
        except kubeapi.ApiError as error:
            raise read_error(error, f"reading Deployment {name}") from error
        return others_requests(template_containers(deployment), "its Deployment")

    def _resizes_waiting(self) -> ResizesWaiting:
        """Every reconciler Pod whose resize the kubelet defers (node, Pod, what it asks), page by page."""
        pages = self.api.pages(kubeapi.POD, self.reconciler_namespace, reconciler_pods())
        return tuple(waiting for page in pages for waiting in resizes_waiting(page.get("items") or []))

    def _largest_node(self) -> NodeRoom | None:
        """The schedulable node with the most allocatable memory, a page of Nodes at a time (a page's
        largest kept, not the page)."""
        return largest_node_of(
            [largest_node(page.get("items")) for page in self.api.pages(kubeapi.NODE, None)]
        )

    # ----- write --------------------------------------------------------------------------------------
    def write(
        self, key: RSyncKey, reading: Reading, apply: Resources | None, publish: Mapping[str, str | None]
    ) -> Written:
        applied, unpublished = None, None
        if apply is not None:
            learned, publish = learned_first(publish)
            unpublished = self._publish(key, learned)  # kept on the RSync if the size cannot be written
            applied = self.target.apply(key, apply, reading.pod)
            if self.target.in_place:  # why the size went through the fallback, or no longer
                publish = {**publish, FALLBACK_ANNOTATION: applied.fell_back}
        return Written(applied, self._publish(key, publish) or unpublished)

    def _publish(self, key: RSyncKey, annotations: Mapping[str, str | None]) -> str | None:
        """Set these annotations on the RSync (none: no request); why they could not be, if so."""
        if not annotations:
            return None
        try:
            self.api.patch(
                kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, annotation_patch(annotations)
            )
        except kubeapi.ApiError as error:
            return str(error)
        return None

    def write_counts(
        self, key: RSyncKey, view: RSyncView, desired: ObjectCounts, *, in_annotations: bool
    ) -> CountsWritten:
        """Make the RSync hold `desired` (its known counts): our annotations, or (`counts_in_status`) its
        status subresource. Annotations by default: Config Sync (v1.22.0 and before) defines no count
        fields in the RSync status and its reconciler writes the status with typed updates, which would
        erase them even where a CRD defined them. `counts_in_status` is for a future Config Sync that
        defines `status.source.objectCount` and `status.sync.objectCount`: only those two are then sent
        (a merge patch on the status subresource), so no other writer's fields are touched. A write the
        server drops (a CRD without those fields) is seen in the response and said as fallen back: the
        counts went to annotations, and the caller keeps writing them there for that RSync
        (`in_annotations`). What became of it is said by `said.of_counts_written`."""
        annotated = view.in_annotations
        if in_annotations or not self.counts_in_status:
            return CountsWritten(self._write_count_annotations(key, annotated, desired))
        # The status has no field for the source's KiB and kinds: they stay in annotations either way.
        counts = replace(
            desired,
            source_kib=None,
            source_kinds=None,
            source_crd_path_steps=None,
            source_workload_path_steps=None,
        )
        kib_only = ObjectCounts(
            source_kib=desired.source_kib,
            source_kinds=desired.source_kinds,
            source_crd_path_steps=desired.source_crd_path_steps,
            source_workload_path_steps=desired.source_workload_path_steps,
        )
        if not counts.differs_where_known(view.in_status):
            return CountsWritten(self._write_count_annotations(key, annotated, kib_only))
        written = self._patch_counts(key, status_patch(counts), subresource="status")
        if written is None:
            return CountsWritten()
        if counts.differs_where_known(status_counts(written)):  # pruned: the CRD lacks the fields
            return CountsWritten(
                self._write_count_annotations(key, annotation_counts(written), desired), fell_back=True
            )
        annotations = self._write_count_annotations(key, annotation_counts(written), kib_only)
        return CountsWritten(("status", *annotations))

    def _write_count_annotations(
        self, key: RSyncKey, held: ObjectCounts, desired: ObjectCounts
    ) -> tuple[str, ...]:
        if not desired.differs_where_known(held):
            return ()
        if self._patch_counts(key, annotation_patch(count_annotations(desired))) is None:
            return ()
        return ("annotations",)

    def _patch_counts(
        self, key: RSyncKey, body: Mapping[str, object], subresource: str | None = None
    ) -> RSync | None:
        """One merge patch (no resourceVersion: it never conflicts); None when the RSync is gone. A
        failure is raised: the reconcile ends `failed` and the work queue writes again after its
        backoff (no worker waits in between)."""
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        try:
            written = self.api.patch(resource, key.namespace, key.name, body, subresource=subresource)
        except kubeapi.NotFound:
            return None
        return cast(RSync, written)

    # ----- the working sets (calibration) ------------------------------------------------------------
    def reconciler_usage(self, selector: str) -> Sampled | None:
        namespace = self.reconciler_namespace
        try:
            metrics = orjson.loads(
                self.api.list_page(kubeapi.POD_METRICS, namespace, label_selector=selector)
            )
        except kubeapi.NotFound:
            return None  # no metrics-server (or no aggregated metrics API): nothing to learn from
        pods = orjson.loads(self.api.list_page(kubeapi.POD, namespace, label_selector=selector))
        return usages(pods.get("items") or [], metrics.get("items") or [])
