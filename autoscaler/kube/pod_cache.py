"""The reconciler Pods, listed once and then watched: a cache, as client-go's informers keep, instead of a
list per reconcile.

A reconcile reads its RSync's Pods here (the port); in cluster mode the cache holds every reconciler Pod,
so who waits for room on a node is read here too. A change the kubelet makes to a Pod (it applied a
resize, deferred one, a container was OOM-killed or restarted; the Pod came or went) calls `on_change`
with the Pod's Deployment, so its RSync is reconciled at once rather than when a timer looks again; a
change of the spec alone (our own resize, before the kubelet answers) calls nothing. Pods are kept
trimmed to what the service reads (the reconciler's size, the node, the status), not whole.

Until the first list has completed, `of` and `every` answer None and the port lists as before; a cache
that cannot list or watch (a Role without `watch` on pods) says so once and the port keeps listing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from autoscaler.core.pods import waits_for_memory
from inventory.core.ids import DEPLOYMENT_NAME_LABEL, RECONCILER_NAMESPACE, reconciler_pods
from inventory.core.objects import Pod, PodView
from inventory.core.tally import Tally
from inventory.kube import kubeapi
from inventory.kube.watch import (
    Key,
    ObjectCodec,
    RawObject,
    Reflector,
    WatchSettings,
)

# What a change of a Pod means to the service, and who waits for room: (Deployment, node the Pod began
# to wait for room on, or None).
PodChanged = Callable[[str, str | None], None]


def trimmed(body: dict[str, Any]) -> RawObject:
    """A Pod as the service reads it: its metadata (without managedFields), each container's name and
    resources, its node, its whole status."""
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    spec = body.get("spec") or {}
    containers = [
        {"name": c.get("name"), "resources": c.get("resources") or {}}
        for c in spec.get("containers") or []
        if isinstance(c, dict)
    ]
    kept = {
        "metadata": metadata,
        "spec": {"containers": containers, "nodeName": spec.get("nodeName")},
        "status": body.get("status") or {},
    }
    return RawObject(
        metadata.get("namespace", ""), metadata.get("name", ""), metadata.get("resourceVersion", ""), kept
    )


def newer(cached: RawObject | None, new: RawObject) -> RawObject:
    """The newer of two versions of a Pod: a watch event older than the Pod our own write returned does
    not replace it (resourceVersions of one object compared as integers, as client-go's mutation cache
    does; where they are not integers, the one that came last)."""
    if cached is None:
        return new
    try:
        return cached if int(cached.resource_version) > int(new.resource_version) else new
    except ValueError:
        return new


def what_the_kubelet_says(pod: RawObject | None) -> object:
    """What a change must alter to concern the service: the Pod's status, its node, whether it is being
    deleted (a spec changed alone is a resize not answered yet). A condition's probe time is not news: the
    kubelet writes it each time it looks at a deferred resize again, which on a full node is often."""
    if pod is None:
        return None
    metadata = pod.body.get("metadata") or {}
    status = dict(pod.body.get("status") or {})
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        status["conditions"] = [_without_probe_time(c) for c in conditions]
    return (status, pod.body["spec"].get("nodeName"), metadata.get("deletionTimestamp"))


def _without_probe_time(condition: object) -> object:
    if not isinstance(condition, dict):
        return condition
    return {k: v for k, v in condition.items() if k != "lastProbeTime"}


def _pod(item: RawObject) -> Pod:
    return cast(Pod, item.body)


def deployment_of(pod: RawObject) -> str:
    labels = (pod.body.get("metadata") or {}).get("labels") or {}
    return str(labels.get(DEPLOYMENT_NAME_LABEL) or "")


@dataclass
class ReconcilerPods:
    """The reconciler Pods of one RSync (`deployment`: its reconciler's name) or of every RSync (None)."""

    api: kubeapi.KubeApi
    on_change: PodChanged
    tally: Tally = field(kw_only=True)  # the watch's restarts, for /metrics
    deployment: str | None = None
    namespace: str = RECONCILER_NAMESPACE
    settings: WatchSettings = field(default_factory=WatchSettings)
    reflector: Reflector[RawObject] = field(init=False)
    _known: dict[Key, Known] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        selector = reconciler_pods()
        if self.deployment is not None:
            selector = f"{selector},{DEPLOYMENT_NAME_LABEL}={self.deployment}"
        self.reflector = Reflector(
            self.api,
            kubeapi.POD,
            ObjectCodec(trimmed),
            self._changed,
            namespace=self.namespace,
            label_selector=selector,
            settings=self.settings,
            keep=newer,
            tally=self.tally,
        )

    def start(self) -> ReconcilerPods:
        self.reflector.start()
        return self

    def signal_stop(self) -> None:
        self.reflector.signal_stop()

    def stop(self) -> None:
        self.reflector.stop()

    @property
    def holds_every_reconciler(self) -> bool:
        return self.deployment is None

    def _pods(self) -> list[RawObject] | None:
        if not self.reflector.synced.is_set():
            return None
        # A copy taken at once (the watch's thread writes the store): list() of a dict's values runs
        # without releasing the interpreter's lock.
        return list(self.reflector.store.values())

    def of(self, deployment: str) -> list[Pod] | None:
        """The Pods of one reconciler Deployment, those being deleted too; None until the cache synced."""
        pods = self._pods()
        return None if pods is None else [_pod(p) for p in pods if deployment_of(p) == deployment]

    def every(self) -> list[Pod] | None:
        """Every reconciler Pod the cache holds; None until it synced."""
        pods = self._pods()
        return None if pods is None else [_pod(p) for p in pods]

    def on_node(self, node: str) -> list[str]:
        """The Deployments with a Pod on this node."""
        return sorted({deployment_of(p) for p in self._pods() or () if PodView.of(p.body).node == node})

    def wrote(self, pod: Pod) -> None:
        """A Pod as our own write returned it (a resize): cached at once, so the next reconcile reads it
        even before its watch event comes. Unlocked: the watch's thread may store an older version over
        it in the same moment, which is what a cache without this would read until the event comes."""
        item = trimmed(dict(pod))
        key = (item.namespace, item.name)
        if key in self.reflector.store:
            self.reflector.store[key] = newer(self.reflector.store.get(key), item)

    def _changed(self, change: str, key: Key, pod: RawObject | None) -> None:
        """The watch's callback (its thread alone reads and writes `_known`)."""
        before = self._known.pop(key, None) if pod is None else self._known.get(key)
        now = None if pod is None else Known.of(pod)
        if now is not None:
            self._known[key] = now
        if now is None:  # deleted: its RSync is told by the Deployment last seen
            if before is not None:
                self.on_change(before.deployment, None)
            return
        if before is not None and (before.deployment, before.said) == (now.deployment, now.said):
            return
        began = now.waiting_on is not None and (before is None or before.waiting_on is None)
        self.on_change(now.deployment, now.waiting_on if began else None)


@dataclass(frozen=True)
class Known:
    """What the cache last saw of a Pod: its Deployment, what the kubelet says of it, and the node it
    waits for room on (its resize deferred), if it does."""

    deployment: str
    said: object
    waiting_on: str | None

    @classmethod
    def of(cls, pod: RawObject) -> Known:
        view = PodView.of(pod.body)
        waiting = waits_for_memory(pod.body) and not view.meta.deleting
        return cls(deployment_of(pod), what_the_kubelet_says(pod), view.node if waiting else None)
