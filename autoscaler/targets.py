"""How a decision reaches the reconciler: a Deployment template, an RSync override, an in-place pod
resize, or nowhere (recommend only).

Every target reads what the reconciler has now (`current`), writes only when that differs, and returns
what the API server accepted and whether that restarts the reconciler (`Applied`). Errors are raised
as `ApplyError` with a short, bounded `reason` for the metric: conflict, rejected, forbidden,
not_found, infeasible, reverted, transient, unreadable, no-container, owned.

Adding a target is this file only: a class with `name`, `current`, `apply` and `declared`, and an entry
in `TARGETS` (settings, the CLI and the README's table are derived from it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol, cast

import orjson

from autoscaler import quantity
from autoscaler.annotations import (
    MANAGE_OVERRIDE_ANNOTATION,
    OVERRIDE_WRITTEN_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    parse_resources_annotation,
    resources_annotation,
)
from autoscaler.codecs import override_entry, resources_json, resources_of, resources_of_override
from autoscaler.policy import Resources
from inventory import kubeapi
from inventory.backoff import with_retries
from inventory.ids import (
    RECONCILER_CONTAINER,
    RECONCILER_NAMESPACE,
    SYNC_KIND_LABEL,
    RSyncKey,
    reconciler_name,
)
from inventory.objects import (
    CONFIG_SYNC_APPLIER,
    OUR_FIELD_MANAGER,
    Container,
    Deployment,
    OverrideEntry,
    Pod,
    RSync,
    annotations_of,
    applied_by_others,
    block_of,
    generation_of,
    named,
)

log = logging.getLogger(__name__)

RECONCILER_MANAGER = "reconciler-manager"  # Config Sync's field manager for the reconciler Deployments
_REASONS: dict[type[kubeapi.ApiError], str] = {
    kubeapi.Conflict: "conflict",
    kubeapi.Invalid: "rejected",
    kubeapi.Forbidden: "forbidden",
    kubeapi.NotFound: "not_found",
    kubeapi.Gone: "transient",
    kubeapi.Transient: "transient",
}


class ApplyError(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _translated(error: kubeapi.ApiError, what: str) -> ApplyError:
    return ApplyError(_REASONS.get(type(error), "transient"), f"{what}: {error}")


@dataclass(frozen=True)
class Applied:
    """What an apply did: the size the API server stored, whether it restarts the reconciler (a
    template or override change rolls its pod out), and the RSync's generation when the size was
    written into the RSync (to tell a later foreign write from our own)."""

    resources: Resources
    restarted: bool
    rsync_generation: int | None = None


class Target(Protocol):
    name: str

    def current(self, key: RSyncKey) -> Resources | None: ...

    def apply(self, key: RSyncKey, resources: Resources) -> Applied: ...

    def declared(self, rsync: RSync) -> Resources | None:
        """The size this target keeps in the RSync itself, as the cached RSync shows it; None when it
        keeps none there (or it is unreadable: `current` reports that when the size is next read)."""
        ...

    def held_by_owner(self, rsync: RSync) -> str | None:
        """Why writing this RSync's size would fight the owner of what this target writes, as the
        cached RSync shows it; None when nothing stands in the way."""
        ...


class _NothingInTheRSync:
    def declared(self, rsync: RSync) -> Resources | None:
        return None

    def held_by_owner(self, rsync: RSync) -> str | None:
        return None


def _container(containers: object, name: str = RECONCILER_CONTAINER) -> Container | None:
    found = named(containers, name)
    return cast(Container, found) if found else None


def _container_resources(containers: object, where: str) -> Resources | None:
    """The reconciler container's resources; ApplyError when they cannot be read (never "unset")."""
    container = _container(containers)
    if container is None:
        raise ApplyError("no-container", f"{where} has no {RECONCILER_CONTAINER!r} container")
    return _readable(container.get("resources"), where)


def _readable(block: object, where: str) -> Resources | None:
    try:
        return resources_of(block)
    except quantity.QuantityError as error:
        raise ApplyError(
            "unreadable", f"{where}: the reconciler's resources are unreadable: {error}"
        ) from error


def _accepted(containers: object, wanted: Resources, where: str) -> Resources:
    """What the server stored; a mutating webhook that changed it is reported, not fought."""
    stored = _container_resources(containers, where)
    if stored != wanted:
        raise ApplyError(
            "rejected", f"{where}: stored {stored} instead of {wanted} (mutated by an admission webhook?)"
        )
    return stored


def _template_containers(deployment: Deployment) -> object:
    return ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []


# ----- deployment ------------------------------------------------------------------------------------------
def reconciler_manager_owns(deployment: Deployment) -> bool:
    """Config Sync's reconciler-manager applies the Deployment (its field manager) or labelled it as
    the reconciler of an RSync: it rewrites the template from the RSync on every reconcile."""
    metadata = deployment.get("metadata") or {}
    if SYNC_KIND_LABEL in (metadata.get("labels") or {}):
        return True
    return any(entry.get("manager") == RECONCILER_MANAGER for entry in metadata.get("managedFields") or [])


@dataclass
class DeploymentTarget(_NothingInTheRSync):
    """Server-side apply of the reconciler container's resources in the Deployment's pod template, for
    reconcilers nobody else manages.

    Our field manager owns those fields only; every other container and field stays as it is. Forced,
    because whoever created the Deployment (kubectl, a Helm chart) owns them at first. A Deployment of
    Config Sync's reconciler-manager is refused (`owned`): it would put its own values back, and each
    round trip rolls the reconciler out; `rsync-override` and `in-place` work with it.
    """

    api: kubeapi.KubeApi
    namespace: str = RECONCILER_NAMESPACE
    name: str = "deployment"

    def _deployment(self, key: RSyncKey) -> Deployment:
        try:
            return cast(Deployment, self.api.get(kubeapi.DEPLOYMENT, self.namespace, reconciler_name(key)))
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading Deployment {self.namespace}/{reconciler_name(key)}") from error

    def current(self, key: RSyncKey) -> Resources | None:
        return _container_resources(
            _template_containers(self._deployment(key)), f"Deployment {reconciler_name(key)}"
        )

    def refusal(self, key: RSyncKey) -> str | None:
        """Why this target must not write the reconciler Deployment of `key`, or None."""
        if not reconciler_manager_owns(self._deployment(key)):
            return None
        return (
            f"Deployment {self.namespace}/{reconciler_name(key)} is managed by Config Sync's "
            f"{RECONCILER_MANAGER}, which would revert every change to its template (a rollout each time); "
            "use target rsync-override (through the RSync) or in-place (the running Pod) instead"
        )

    def apply(self, key: RSyncKey, resources: Resources) -> Applied:
        refusal = self.refusal(key)
        if refusal is not None:
            raise ApplyError("owned", refusal)
        name = reconciler_name(key)
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": RECONCILER_CONTAINER, "resources": resources_json(resources)}]
                    }
                }
            },
        }
        try:
            written = self.api.patch(
                kubeapi.DEPLOYMENT,
                self.namespace,
                name,
                body,
                patch_type="apply",
                field_manager=OUR_FIELD_MANAGER,
                force=True,
            )
        except kubeapi.ApiError as error:
            raise _translated(error, f"applying to Deployment {self.namespace}/{name}") from error
        stored = _accepted(_template_containers(cast(Deployment, written)), resources, f"Deployment {name}")
        return Applied(stored, restarted=True)


# ----- RSync spec.override.resources -------------------------------------------------------------------
def _override_entries(rsync: RSync) -> list[OverrideEntry]:
    override = (rsync.get("spec") or {}).get("override") or {}
    entries = override.get("resources") or [] if isinstance(override, Mapping) else None
    if not isinstance(entries, list):
        raise ApplyError("unreadable", f"spec.override.resources is not a list: {str(entries)[:80]!r}")
    return entries


def _is_reconciler_entry(entry: object) -> bool:
    return isinstance(entry, Mapping) and entry.get("containerName") == RECONCILER_CONTAINER


def _reconciler_override(rsync: RSync) -> Resources | None:
    entry = next((e for e in _override_entries(rsync) if _is_reconciler_entry(e)), None)
    try:
        return resources_of_override(entry)
    except quantity.QuantityError as error:
        raise ApplyError("unreadable", f"the reconciler's override entry is unreadable: {error}") from error


DECLARED_FIELDS_ANNOTATION = "configsync.gke.io/declared-fields"


def users_own_override(rsync: RSync) -> str | None:
    """Why the RSync's `reconciler` override entry is a user's, or None when it is ours to write.

    Ours: there is none, or it is the one we last wrote (recorded in the same update, so no crash can
    split the two), or the user handed it to us (`objcount.dev/manage-override: "true"`). Anything else
    someone set by hand, and we leave it alone.
    """
    annotations = annotations_of(rsync)
    if annotations.get(MANAGE_OVERRIDE_ANNOTATION) == "true":
        return None
    try:
        entry = _reconciler_override(rsync)
    except ApplyError as error:  # not something we wrote: we write only readable entries
        return f"{error}; it is left as it is"
    if entry is None or entry == parse_resources_annotation(annotations.get(OVERRIDE_WRITTEN_ANNOTATION)):
        return None
    return (
        "the reconciler entry of spec.override.resources was set by someone else and is theirs "
        f'(annotate {MANAGE_OVERRIDE_ANNOTATION}: "true" to hand it to us)'
    )


def override_declared_by_another(rsync: RSync) -> str | None:
    """Why `spec.override` of this RSync belongs to the sync or the user that declares it, or None.

    An RSync declared in git by another RSync is applied by that sync (server-side apply, field manager
    `configsync.gke.io`), which puts its declared fields back as git says; with Config Sync's admission
    webhook on, they are also in the `configsync.gke.io/declared-fields` annotation and other writers'
    changes to them are refused. When they cover `spec.override`, our write would be reverted or
    refused; a declaration without it leaves the override to us. The managed fields are read too because
    the webhook, and with it the annotation, is off by default. Any other server-side applier that owns
    `spec.override.resources` (a user's `kubectl apply --server-side`) would put its list back the same
    way, and the guard refuses taking fields from it.
    """
    for entry in applied_by_others(block_of(rsync, "metadata").get("managedFields")):
        override = block_of(block_of(entry, "fieldsV1"), "f:spec").get("f:override")
        if not isinstance(override, dict):
            continue
        if entry.get("manager") == CONFIG_SYNC_APPLIER:
            return "spec.override is applied from git by Config Sync (its managed fields): change it there"
        if "f:resources" in override:
            manager = str(entry.get("manager"))[:64]
            return f"spec.override.resources is server-side applied by {manager!r}: change it there"
    text = annotations_of(rsync).get(DECLARED_FIELDS_ANNOTATION)
    if text is None:
        return None
    try:
        fields = orjson.loads(text)
    except orjson.JSONDecodeError:
        fields = None
    if not isinstance(fields, dict):  # unknown is not "not declared"
        return f"{DECLARED_FIELDS_ANNOTATION} is unreadable: spec.override may be declared in git"
    spec = fields.get("f:spec")
    if isinstance(spec, dict) and "f:override" in spec:
        return "spec.override is declared in git (configsync.gke.io/declared-fields): change it there"
    return None


@dataclass
class RSyncOverrideTarget:
    """The `reconciler` entry of the RSync's `spec.override.resources`, other entries preserved.

    The list has no merge key, so it is a read-modify-write with the resourceVersion as precondition,
    retried on conflict. Config Sync's reconciler manager then rolls the reconciler out.
    """

    api: kubeapi.KubeApi
    attempts: int = 8
    sleep: Callable[[float], None] = time.sleep
    name: str = "rsync-override"
    conflicts: int = 0

    def _get(self, key: RSyncKey) -> RSync:
        try:
            return cast(RSync, self.api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name))
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading {key}") from error

    def current(self, key: RSyncKey) -> Resources | None:
        return _reconciler_override(self._get(key))

    def declared(self, rsync: RSync) -> Resources | None:
        try:
            return _reconciler_override(rsync)
        except ApplyError:
            return None

    def held_by_owner(self, rsync: RSync) -> str | None:
        return override_declared_by_another(rsync) or users_own_override(rsync)

    def apply(self, key: RSyncKey, resources: Resources) -> Applied:
        resource = kubeapi.RSYNC_RESOURCES[key.kind]

        def write() -> RSync:
            rsync = self._get(key)
            owner = self.held_by_owner(rsync)
            if owner is not None:  # since the cached copy was read, someone took it: theirs
                raise ApplyError("owned", f"{key}: {owner}")
            metadata = rsync.setdefault("metadata", {})
            metadata["annotations"] = {
                **(metadata.get("annotations") or {}),
                OVERRIDE_WRITTEN_ANNOTATION: resources_annotation(resources),
            }
            others = [e for e in _override_entries(rsync) if not _is_reconciler_entry(e)]
            spec = rsync.setdefault("spec", {})
            override = spec.get("override") or {}
            override["resources"] = [*others, override_entry(resources)]
            spec["override"] = override
            try:
                return cast(RSync, self.api.replace(resource, key.namespace, key.name, dict(rsync)))
            except kubeapi.Conflict:
                raise
            except kubeapi.ApiError as error:
                raise _translated(error, f"writing the override of {key}") from error

        def count_conflict(error: Exception) -> None:
            self.conflicts += 1

        try:
            written = with_retries(
                write,
                retry_on=(kubeapi.Conflict,),
                attempts=self.attempts,
                initial=0.01,
                maximum=1.0,
                sleep=self.sleep,
                on_retry=count_conflict,
            )
        except kubeapi.Conflict as error:
            raise ApplyError(
                "conflict", f"{key}: still conflicting after {self.attempts} attempts"
            ) from error
        stored = _reconciler_override(written)
        if stored != resources:
            raise ApplyError("rejected", f"{key}: override stored as {stored} instead of {resources}")
        return Applied(resources, restarted=True, rsync_generation=generation_of(written))


# ----- in-place pod resize -------------------------------------------------------------------------------
@dataclass
class InPlaceTarget(_NothingInTheRSync):
    """Resize the running reconciler pod through `pods/resize` (no restart).

    Nothing else is written: not the Deployment (Config Sync's reconciler-manager owns it), not the
    template (a rollout is the restart an in-place resize exists to avoid). The size is what the kubelet
    reports the container has (`status.containerStatuses[].resources`), read on every reconcile, so a
    new pod of a rollout, which starts with its template's size, is resized again. A lower limit the
    kubelet refused (the container uses more: it compares the usage before lowering a memory limit) is
    reported with the kubelet's message and not sent again until it is higher than what runs. When there
    is no pod, or the kubelet reports the resize infeasible (`PodResizePending`, reason `Infeasible`),
    the size goes to `fallback` (for Config Sync: the RSync override, a rollout: the result says it
    restarted).
    """

    api: kubeapi.KubeApi
    fallback: Target
    namespace: str = RECONCILER_NAMESPACE
    name: str = "in-place"

    def _pod(self, key: RSyncKey) -> Pod | None:
        return reconciler_pod(self.api, self.namespace, key)

    def current(self, key: RSyncKey) -> Resources | None:
        pod = self._pod(key)
        if pod is None:
            return self.fallback.current(key)
        return _running_resources(pod) or _container_resources(
            (pod.get("spec") or {}).get("containers"), f"pod {_name(pod)}"
        )

    def apply(self, key: RSyncKey, resources: Resources) -> Applied:
        pod = self._pod(key)
        if pod is None or _resize_infeasible(pod):
            log.warning(
                "%s: in-place resize %s; applying through %s",
                key,
                "impossible without a pod" if pod is None else "reported infeasible",
                self.fallback.name,
            )
            return self.fallback.apply(key, resources)
        name = _name(pod)
        refused = _resize_refused(pod)
        if refused and _limit_lowered(pod, resources):
            raise ApplyError("refused", f"pod {self.namespace}/{name}: a lower limit was refused: {refused}")
        patch = {
            "spec": {"containers": [{"name": RECONCILER_CONTAINER, "resources": resources_json(resources)}]}
        }
        try:
            written = self.api.patch(
                kubeapi.POD, self.namespace, name, patch, patch_type="strategic", subresource="resize"
            )
        except kubeapi.ApiError as error:
            raise _translated(error, f"resizing pod {self.namespace}/{name}") from error
        accepted = _accepted((written.get("spec") or {}).get("containers"), resources, f"pod {name}")
        return Applied(accepted, restarted=False)


def _name(obj: Pod) -> str:
    return (obj.get("metadata") or {}).get("name", "")


def reconciler_pod(api: kubeapi.KubeApi, namespace: str, key: RSyncKey) -> Pod | None:
    """The newest live reconciler Pod of an RSync (None when there is none)."""
    selector = f"app=reconciler,configsync.gke.io/deployment-name={reconciler_name(key)}"
    try:
        page = orjson.loads(api.list_page(kubeapi.POD, namespace, label_selector=selector))
    except kubeapi.ApiError as error:
        raise _translated(error, f"listing the reconciler pod of {key}") from error
    live: list[Pod] = [
        p for p in page.get("items") or [] if not (p.get("metadata") or {}).get("deletionTimestamp")
    ]
    return max(live, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp", ""), default=None)


def other_containers_requests(api: kubeapi.KubeApi, namespace: str, key: RSyncKey) -> tuple[int, int] | None:
    """CPU (millicores) and memory (MiB) requested by the reconciler pod's other containers, as they
    are: read from the running Pod (which has what admission added, a sidecar among them), else from
    the Deployment's template; None when neither exists. ApplyError when they cannot be read."""
    pod = reconciler_pod(api, namespace, key)
    containers: object
    if pod is not None:
        containers, where = (pod.get("spec") or {}).get("containers") or [], f"pod {_name(pod)}"
    else:
        try:
            deployment = cast(Deployment, api.get(kubeapi.DEPLOYMENT, namespace, reconciler_name(key)))
        except kubeapi.NotFound:
            return None
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading Deployment {reconciler_name(key)}") from error
        containers, where = _template_containers(deployment), "its Deployment"
    cpu = memory = 0
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, dict) and container.get("name") != RECONCILER_CONTAINER:
            resources = _readable(container.get("resources"), f"{where}, container {container.get('name')}")
            if resources is not None:
                cpu, memory = cpu + resources.cpu_request_m, memory + resources.memory_request_mib
    return cpu, memory


def _resize_refused(pod: Pod) -> str:
    """The kubelet's message when it could not apply the last resize (`PodResizeInProgress`, reason
    `Error`: it refused a memory limit below what the container uses), else empty."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    for condition in conditions:
        if condition.get("type") == "PodResizeInProgress" and condition.get("reason") == "Error":
            return str(condition.get("message") or "the kubelet could not apply the resize")
    return ""


def _running_resources(pod: Pod) -> Resources | None:
    """What the kubelet reports the reconciler container runs with; None before it reports it."""
    statuses = (pod.get("status") or {}).get("containerStatuses")
    status = _container(statuses)
    if status is None or not status.get("resources"):
        return None
    return _readable(status.get("resources"), f"pod {_name(pod)} (status)")


def _limit_lowered(pod: Pod, resources: Resources) -> bool:
    running = _running_resources(pod)
    wanted, now = resources.memory_limit_mib, running.memory_limit_mib if running else None
    return wanted is not None and (now is None or wanted < now)


def _resize_infeasible(pod: Pod) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible" for c in conditions)


# ----- recommend only ------------------------------------------------------------------------------------
@dataclass
class RecommendTarget(_NothingInTheRSync):
    """Apply nothing: publish the recommendation as an annotation on the RSync (metadata: no restart)."""

    api: kubeapi.KubeApi
    name: str = "recommend"

    def current(self, key: RSyncKey) -> Resources | None:
        try:
            rsync = self.api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading {key}") from error
        return parse_resources_annotation(annotations_of(rsync).get(RECOMMENDED_ANNOTATION))

    def apply(self, key: RSyncKey, resources: Resources) -> Applied:
        patch = {"metadata": {"annotations": {RECOMMENDED_ANNOTATION: resources_annotation(resources)}}}
        try:
            self.api.patch(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, patch)
        except kubeapi.ApiError as error:
            raise _translated(error, f"annotating {key}") from error
        return Applied(resources, restarted=False)


# ----- the registry ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetKind:
    """A target as settings name it: its description (the README's) and how it is built from the API
    client and the reconcilers' namespace."""

    description: str
    build: Callable[[kubeapi.KubeApi, str], Target] = field(repr=False)


TARGETS: dict[str, TargetKind] = {
    "rsync-override": TargetKind(
        "the RSync's `spec.override.resources` (Config Sync rolls the reconciler out)",
        lambda api, namespace: RSyncOverrideTarget(api),
    ),
    "deployment": TargetKind(
        "the reconciler Deployment's pod template (server-side apply; a rollout)",
        lambda api, namespace: DeploymentTarget(api, namespace=namespace),
    ),
    "in-place": TargetKind(
        "an in-place resize of the running pod (`pods/resize`, no restart); else the RSync override",
        lambda api, namespace: InPlaceTarget(api, RSyncOverrideTarget(api), namespace=namespace),
    ),
    "recommend": TargetKind(
        "nothing: the recommendation is published (annotation, metric, `objcount status`)",
        lambda api, namespace: RecommendTarget(api),
    ),
}
