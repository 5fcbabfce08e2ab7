"""The cluster operations a reconcile performs, as a small protocol, and their implementation on the
Kubernetes API (the target for the reconciler's size, the count writer for the counts). Tests of the
reconcile logic use an in-memory fake of `Cluster`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

import orjson

from autoscaler.annotations import annotation_patch
from autoscaler.calibration import Sampled, usages
from autoscaler.count_writer import CountWriter, WriteOutcome
from autoscaler.metrics import RECONCILE_ERRORS
from autoscaler.oom import OomKill, oom_kill_of
from autoscaler.policy import Resources
from autoscaler.targets import Applied, Target, other_containers_requests, reconciler_pod
from inventory import kubeapi
from inventory.counts import ObjectCounts
from inventory.ids import RECONCILER_NAMESPACE, RSyncKey
from inventory.objects import RSync

log = logging.getLogger(__name__)

API_SURFACE_TTL_S = 600.0


class Cluster(Protocol):
    """Errors: ApplyError from reading and applying a size, kubeapi.ApiError from the rest."""

    @property
    def target_name(self) -> str: ...

    def current(self, key: RSyncKey) -> Resources | None:
        """What the reconciler has now, as the target keeps it."""
        ...

    def others(self, key: RSyncKey) -> tuple[int, int] | None:
        """Requests of the reconciler pod's other containers (CPU m, MiB); None when there is no pod."""
        ...

    def declared(self, rsync: RSync) -> Resources | None:
        """The size the target keeps in the RSync itself (no I/O)."""
        ...

    def held_by_owner(self, rsync: RSync) -> str | None:
        """Why the target must not write this RSync's size: its owner would fight it (no I/O)."""
        ...

    def last_oom_kill(self, key: RSyncKey) -> OomKill | None:
        """The latest OOM kill of the reconciler container, as its Pod reports it."""
        ...

    def api_resources(self) -> int | None:
        """Resource types the API server serves (the API surface the reconciler holds the schemas of);
        None when discovery cannot be read (the preset's assumption is used)."""
        ...

    def reconciler_usage(self, selector: str) -> Sampled | None:
        """A sample of the working set of every running reconciler Pod the label selector picks; None when
        the cluster does not serve the metrics API."""
        ...

    def apply(self, key: RSyncKey, resources: Resources) -> Applied: ...

    def publish(self, key: RSyncKey, annotations: Mapping[str, str | None]) -> None:
        """Set these annotations on the RSync (None: remove it)."""
        ...

    def write_counts(
        self, key: RSyncKey, rsync: RSync, counts: ObjectCounts, *, in_annotations: bool
    ) -> WriteOutcome: ...


@dataclass
class KubeCluster:
    api: kubeapi.KubeApi
    target: Target
    reconciler_namespace: str = RECONCILER_NAMESPACE
    counts_in_status: bool = False
    surface_ttl_s: float = API_SURFACE_TTL_S
    clock: Callable[[], float] = time.monotonic
    writer: CountWriter = field(init=False)
    _surface: tuple[float, int | None] | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.writer = CountWriter(self.api, in_status=self.counts_in_status)

    @property
    def target_name(self) -> str:
        return self.target.name

    def current(self, key: RSyncKey) -> Resources | None:
        return self.target.current(key)

    def others(self, key: RSyncKey) -> tuple[int, int] | None:
        return other_containers_requests(self.api, self.reconciler_namespace, key)

    def declared(self, rsync: RSync) -> Resources | None:
        return self.target.declared(rsync)

    def held_by_owner(self, rsync: RSync) -> str | None:
        return self.target.held_by_owner(rsync)

    def last_oom_kill(self, key: RSyncKey) -> OomKill | None:
        return oom_kill_of(reconciler_pod(self.api, self.reconciler_namespace, key))

    def api_resources(self) -> int | None:
        """Read from discovery at most once per `surface_ttl_s` (CRDs come and go rarely); after a failed
        read the last value stays (None before any), retried after the same interval."""
        now = self.clock()
        if self._surface is not None and now - self._surface[0] < self.surface_ttl_s:
            return self._surface[1]
        last = self._surface[1] if self._surface else None
        try:
            served: int | None = self.api.api_resource_types()
        except kubeapi.ApiError as error:
            RECONCILE_ERRORS.labels("discovery").inc()
            log.warning("cannot read the API surface from discovery (%s); sizing with %s", error, last)
            served = last
        self._surface = (now, served)
        return served

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

    def apply(self, key: RSyncKey, resources: Resources) -> Applied:
        return self.target.apply(key, resources)

    def publish(self, key: RSyncKey, annotations: Mapping[str, str | None]) -> None:
        self.api.patch(
            kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, annotation_patch(annotations)
        )

    def write_counts(
        self, key: RSyncKey, rsync: RSync, counts: ObjectCounts, *, in_annotations: bool
    ) -> WriteOutcome:
        return self.writer.write(key, rsync, counts, in_annotations=in_annotations)
