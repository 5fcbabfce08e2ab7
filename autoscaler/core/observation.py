"""What one reconcile of one RSync sees, read once: the RSync parsed into a view, and what was read of its
reconciler (one Pod list: the size, the other containers, the OOM kills). Pure: the Kubernetes side
(`autoscaler.kube.port`) fills an `Observation`; `autoscaler.core.decide` decides from it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.annotations import (
    CALIBRATION_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    annotation_counts,
    autoscale_enabled,
    parse_calibration,
    parse_oom_floor,
    parse_synced_source,
    platform_asked,
    restored_of,
    status_counts,
)
from autoscaler.core.calibration import Calibration, Sample
from autoscaler.core.oom import OomFloor, OomKill
from autoscaler.core.reasons import ReadError
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import monitoring_enabled, reconciler_override
from autoscaler.core.sizing import NodeRoom
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import Pod, RSync, annotations_of, generation_of
from inventory.core.sync_progress import SyncProgress, sync_progress


@dataclass(frozen=True)
class RSyncView:
    """An RSync as one reconcile needs it, parsed once."""

    rsync: RSync  # the cached object itself (targets read their own fields of it)
    generation: int
    annotations: Mapping[str, str]
    autoscale: bool  # False: objcount.dev/autoscale is "false"
    platform: str | None  # the platform the RSync asks for (None: the service's)
    monitoring: bool  # False: spec.monitoring.enabled is false, the Pod has no otel-agent
    in_status: ObjectCounts  # the counts its status holds (a CRD that defines the fields)
    in_annotations: ObjectCounts  # the counts our annotations hold
    oom_floor: OomFloor | None  # objcount.dev/oom-floor
    calibration: Calibration | None  # objcount.dev/calibration
    synced_source: ObjectCounts | None  # objcount.dev/synced-source
    progress: SyncProgress  # what the reconciler reports of its sync
    # The reconciler's entry of `spec.override.resources` (None: none), or why it cannot be read.
    override: Resources | None = None
    override_unreadable: ReadError | None = None

    @property
    def restored(self) -> ObjectCounts:
        """The counts recorded on it: the status's, else our annotations'."""
        return restored_of(self.in_status, self.in_annotations)

    @property
    def finished_commit(self) -> str | None:
        """The commit the reconciler reports synced."""
        return self.progress.finished

    @property
    def fetched_commit(self) -> str | None:
        """The commit the reconciler works on."""
        return self.progress.fetched

    @property
    def written_at(self) -> float | None:
        """When the reconciler last wrote its sync status."""
        return self.progress.written_at

    @classmethod
    def of(cls, rsync: RSync) -> RSyncView:
        annotations = annotations_of(rsync)
        in_status, in_annotations = status_counts(rsync), annotation_counts(rsync)
        try:
            override, unreadable = reconciler_override(rsync), None
        except ReadError as error:
            override, unreadable = None, error
        return cls(
            rsync,
            generation_of(rsync),
            annotations,
            autoscale_enabled(rsync),
            platform_asked(rsync),
            monitoring_enabled(rsync),
            in_status,
            in_annotations,
            parse_oom_floor(annotations.get(OOM_FLOOR_ANNOTATION)),
            parse_calibration(annotations.get(CALIBRATION_ANNOTATION)),
            parse_synced_source(annotations.get(SYNCED_SOURCE_ANNOTATION)),
            sync_progress(rsync),
            override,
            unreadable,
        )

    def lacks(self, wanted: Mapping[str, str | None]) -> dict[str, str | None]:
        """The annotations of `wanted` the RSync does not hold yet (None: holds, and should not)."""
        return {name: value for name, value in wanted.items() if self.annotations.get(name) != value}


@dataclass(frozen=True)
class Needs:
    """What a reconcile must read beyond the RSync (each read can fail the reconcile)."""

    current: bool = False  # what the reconciler has, as the target keeps it
    others: bool = False  # the other containers' requests (platforms with pod-level rules)
    nodes: bool = False  # the cluster's largest node (a size is capped to what it holds)


@dataclass(frozen=True)
class Unread:
    """A read that failed without failing the reconcile: said and counted (the `stage` label of
    objcount_reconcile_errors_total), and the decision is made without it."""

    stage: str
    message: str


@dataclass(frozen=True)
class Reading:
    """What was read of the reconciler and the API server for one reconcile."""

    current: Resources | None = None  # what the reconciler has, when `Needs.current`
    declared: Resources | None = None  # the size the target keeps in the RSync, as the RSync shows it
    held_by_owner: str | None = None  # why the target must not write (its owner would fight it)
    others: tuple[int, int] | None = None  # the other containers' requests (CPU m, MiB), when needed
    oom_kill: OomKill | None = None  # the reconciler's latest OOM kill its Pod reports
    api_resources: int | None = None  # resource types the API server serves (None: not read)
    node_room: NodeRoom | None = None  # the cluster's largest node (None: not read)
    pod: Pod | None = None  # the reconciler Pod as listed (a target resizing it in place writes it)
    # Every Pod of the reconciler is being deleted (a Recreate rollout between two Pods): its Deployment's
    # template is not what the next Pod will hold (admission adds a sidecar to it).
    pods_going: bool = False
    # A sidecar's own Pod is being deleted: it is leaving, and sizes no other Pod on its way out (a
    # replacement created meanwhile is sized by its own sidecar, or keeps its template's size without one).
    own_pod_going: bool = False
    # A resize of the running Pod the kubelet defers (the size asked, the kubelet's message): asked for
    # already, so it is not asked again; the running container keeps its size meanwhile.
    deferred: tuple[Resources, str] | None = None
    # Another reconciler on this one's node whose resize the kubelet defers (who, and what it asks):
    # room this one holds above its steady need is given back at once (in place only).
    room_wanted: str | None = None
    # A size written now reaches the running reconciler without restarting it (our in-place target; a
    # VPA whose updater resizes in place): only then is its steady state sized (a restart re-syncs).
    resizes_running: bool = False
    unread: tuple[Unread, ...] = ()  # the Pod list where only the OOM kills needed it; discovery


@dataclass(frozen=True)
class Observation:
    """Everything one reconcile decides from."""

    key: RSyncKey
    view: RSyncView
    reading: Reading
    observed: ObjectCounts  # counts seen this run (None where not seen yet or not valid)
    now: float  # the service's monotonic clock
    wall: float = 0.0  # wall-clock seconds (an OOM floor's quiet period outlives the service)
    samples: tuple[Sample, ...] = ()  # the working set sampled since the last reconcile
