"""Typed views of the raw JSON objects the service reads: RSyncs, Deployments and Pods.

They describe the fields we use, as the API server sends them; nothing checks them on arrival, so a
value that comes from users (annotations, the override) is still checked where it is read. Every
TypedDict is `total=False`: a field may be missing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypedDict, cast


class ManagedFieldsEntry(TypedDict, total=False):
    manager: str
    operation: str
    fieldsV1: dict[str, object]


# The field manager of a Config Sync reconciler's applies: what an RSync declared in git and synced by
# another RSync has in it, as the declaring sync applies it (whether or not Config Sync's admission
# webhook keeps the `configsync.gke.io/declared-fields` annotation).
CONFIG_SYNC_APPLIER = "configsync.gke.io"
# Config Sync's managers that write an RSync back whole: its reconciler-manager, and an RSync's own
# reconciler (as CONFIG_SYNC_APPLIER, by Update), each adding its finalizer to a new RSync.
CONFIG_SYNC_MANAGERS = frozenset({CONFIG_SYNC_APPLIER, "configsync.gke.io/reconciler-manager"})
# Ours, in every write (server-side apply of a Deployment, update of an RSync).
OUR_FIELD_MANAGER = "objcount-autoscaler"


def declaring_entries(entries: object) -> list[ManagedFieldsEntry]:
    """The managed-fields entries that say who declares an RSync's fields: others' server-side applies
    (Config Sync's `configsync.gke.io` for an RSync declared in git, or a user's `kubectl apply
    --server-side`), each putting back what it declares at its next apply; and Config Sync's own updates.
    Config Sync v1.25.0 adds its finalizers by a typed Update of the whole RSync (reconciler-manager's
    `reconciler_base.go`, the reconciler's finalizer controller), which writes `spec.override.resources`
    back with its unset quantities as "0": that list is atomic, so the update takes it from the apply's
    entry until the declaring sync's next apply takes it back."""
    return [
        cast(ManagedFieldsEntry, e)
        for e in (entries if isinstance(entries, list) else [])
        if isinstance(e, dict)
        and e.get("manager") != OUR_FIELD_MANAGER
        and (e.get("operation") == "Apply" or e.get("manager") in CONFIG_SYNC_MANAGERS)
    ]


class ObjectMeta(TypedDict, total=False):
    name: str
    namespace: str
    generation: int
    resourceVersion: str
    creationTimestamp: str
    deletionTimestamp: str
    labels: dict[str, str]
    annotations: dict[str, str]
    managedFields: list[ManagedFieldsEntry]


class ResourcesBlock(TypedDict, total=False):
    requests: dict[str, str]
    limits: dict[str, str]


class Container(TypedDict, total=False):
    name: str
    resources: ResourcesBlock


class PodSpec(TypedDict, total=False):
    containers: list[Container]


class Condition(TypedDict, total=False):
    type: str
    status: str
    reason: str
    message: str


class PodStatus(TypedDict, total=False):
    conditions: list[Condition]


class Pod(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec
    status: PodStatus


class PodTemplate(TypedDict, total=False):
    metadata: ObjectMeta
    spec: PodSpec


class DeploymentSpec(TypedDict, total=False):
    template: PodTemplate


class Deployment(TypedDict, total=False):
    metadata: ObjectMeta
    spec: DeploymentSpec


class OverrideEntry(TypedDict, total=False):
    containerName: str
    cpuRequest: str
    memoryRequest: str
    cpuLimit: str
    memoryLimit: str


class Override(TypedDict, total=False):
    resources: list[OverrideEntry]


class SourceSpec(TypedDict, total=False):
    repo: str
    dir: str


class RSyncSpec(TypedDict, total=False):
    sourceType: str
    git: SourceSpec
    oci: SourceSpec
    override: Override


class RSync(TypedDict, total=False):
    """A RootSync or RepoSync."""

    apiVersion: str
    kind: str
    metadata: ObjectMeta
    spec: RSyncSpec
    status: dict[str, object]


def block_of(obj: Mapping[str, object] | None, name: str) -> Mapping[str, object]:
    """The object under `name`; empty when it is missing or not an object."""
    value = (obj or {}).get(name)
    return value if isinstance(value, Mapping) else {}


def named(items: object, name: str) -> Mapping[str, object]:
    """The entry of a list (containers, container statuses) whose `name` is `name`; empty when there is
    none or the list is not one."""
    entries = items if isinstance(items, list) else []
    return next((e for e in entries if isinstance(e, dict) and e.get("name") == name), {})


def annotations_of(obj: Mapping[str, object]) -> Mapping[str, str]:
    """The object's annotations; empty when it has none (or they are not a mapping)."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    return annotations if isinstance(annotations, Mapping) else {}


def generation_of(obj: Mapping[str, object]) -> int:
    metadata = obj.get("metadata")
    generation = metadata.get("generation", 0) if isinstance(metadata, Mapping) else 0
    return generation if isinstance(generation, int) else 0


# ----- typed views (as kopf's Body and Meta): each field read once, its type checked where it is read ------
def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


@dataclass(frozen=True)
class Meta:
    """An object's `metadata`, each field of the type it should have, or empty where it has not."""

    raw: Mapping[str, object]

    @classmethod
    def of(cls, obj: Mapping[str, object] | None) -> Meta:
        return cls(block_of(obj, "metadata"))

    @property
    def name(self) -> str:
        return _text(self.raw.get("name")) or ""

    @property
    def namespace(self) -> str:
        return _text(self.raw.get("namespace")) or ""

    @property
    def uid(self) -> str:
        return _text(self.raw.get("uid")) or ""

    @property
    def created(self) -> str:
        return _text(self.raw.get("creationTimestamp")) or ""

    @property
    def deleting(self) -> bool:
        return bool(self.raw.get("deletionTimestamp"))

    @property
    def labels(self) -> Mapping[str, str]:
        labels = block_of(self.raw, "labels")
        return {k: v for k, v in labels.items() if isinstance(v, str)}


@dataclass(frozen=True)
class ContainerStatus:
    """One entry of a Pod's `status.containerStatuses` (empty: the container reports nothing yet)."""

    raw: Mapping[str, object]

    @property
    def running_since(self) -> str | None:
        """`state.running.startedAt`: when the running container started (None: it does not run)."""
        return _text(block_of(block_of(self.raw, "state"), "running").get("startedAt"))

    @property
    def runs(self) -> bool:
        return "running" in block_of(self.raw, "state")

    @property
    def resources(self) -> object:
        """What the kubelet reports the container runs with (None: it reports nothing)."""
        return self.raw.get("resources") or None

    @property
    def allocated(self) -> bool:
        """Whether the kubelet reports resources it allocated (InPlacePodVerticalScaling on)."""
        return bool(self.raw.get("resources") or self.raw.get("allocatedResources"))

    def terminated(self) -> list[Mapping[str, object]]:
        """How the container ended, now (`state`) and the time before (`lastState`), where it did."""
        ended = (block_of(block_of(self.raw, key), "terminated") for key in ("state", "lastState"))
        return [terminated for terminated in ended if terminated]


@dataclass(frozen=True)
class PodView:
    """A Pod as the service reads it: its metadata, one container's spec and status, its conditions."""

    raw: Mapping[str, object]
    meta: Meta

    @classmethod
    def of(cls, pod: Mapping[str, object] | None) -> PodView:
        raw = pod or {}
        return cls(raw, Meta.of(raw))

    @property
    def containers(self) -> object:
        """`spec.containers` as sent (checked by whoever reads an entry of it)."""
        return block_of(self.raw, "spec").get("containers")

    def container(self, name: str) -> Mapping[str, object]:
        return named(self.containers, name)

    def status_of(self, name: str) -> ContainerStatus:
        return ContainerStatus(named(block_of(self.raw, "status").get("containerStatuses"), name))

    @property
    def node(self) -> str | None:
        return _text(block_of(self.raw, "spec").get("nodeName"))

    @property
    def conditions(self) -> list[Mapping[str, object]]:
        conditions = block_of(self.raw, "status").get("conditions")
        return [c for c in conditions if isinstance(c, Mapping)] if isinstance(conditions, list) else []

    @property
    def answered_conditions(self) -> list[Mapping[str, object]]:
        """The conditions the kubelet wrote of the Pod's spec as it is now. A kubelet of Kubernetes 1.34+
        writes the generation it looked at (`observedGeneration`); one of an older generation speaks of
        a resize asked before, and the kubelet has not answered the newest yet (a Pod read right after
        our resize still carries the last one's `Deferred`). Without the fields, each is taken as current."""
        generation = generation_of(self.raw)
        return [c for c in self.conditions if _observed(c, generation) >= generation]


def _observed(condition: Mapping[str, object], otherwise: int) -> int:
    """The generation a condition was written of; `otherwise` where it says none."""
    observed = condition.get("observedGeneration")
    return observed if isinstance(observed, int) and not isinstance(observed, bool) else otherwise
