"""How a decision reaches the reconciler: a Deployment template, an RSync override, an in-place pod
resize, or nowhere (recommend only).

Every target reads what the reconciler has now (`current`), writes only when that differs, and returns
what the API server accepted. Errors are raised as `ApplyError` with a short, bounded `reason` for the
metric: conflict, rejected, forbidden, not_found, infeasible, reverted, transient.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from autoscaler import quantity
from autoscaler.policy import Resources
from inventory import kubeapi
from inventory.counts import APPLIED_ANNOTATION, RECOMMENDED_ANNOTATION
from inventory.ids import RECONCILER_CONTAINER, RECONCILER_NAMESPACE, RSyncKey, reconciler_name

log = logging.getLogger(__name__)

FIELD_MANAGER = "objcount-autoscaler"
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


class Target(Protocol):
    name: str
    causes_restart: bool

    def current(self, key: RSyncKey) -> Resources | None: ...

    def apply(self, key: RSyncKey, resources: Resources) -> Resources: ...

    def overwritten(self, key: RSyncKey, rsync: dict[str, Any]) -> Resources | None:
        """What another writer replaced our last applied size with, as seen in the cached RSync;
        None when nothing was replaced or this target cannot tell from the RSync."""
        ...


class _NoRevertCheck:
    def overwritten(self, key: RSyncKey, rsync: dict[str, Any]) -> Resources | None:
        return None


# ----- container resources <-> JSON ------------------------------------------------------------------------
def resources_json(resources: Resources) -> dict[str, dict[str, str]]:
    body: dict[str, dict[str, str]] = {
        "requests": {
            "cpu": quantity.format_cpu(resources.cpu_request_m),
            "memory": quantity.format_memory(resources.memory_request_mib),
        }
    }
    limits = {}
    if resources.cpu_limit_m is not None:
        limits["cpu"] = quantity.format_cpu(resources.cpu_limit_m)
    if resources.memory_limit_mib is not None:
        limits["memory"] = quantity.format_memory(resources.memory_limit_mib)
    if limits:
        body["limits"] = limits
    return body


def resources_of(block: object) -> Resources | None:
    """Resources from a container's `resources` block (or our annotation of one); None when it sets no
    CPU or memory at all. A request that is not set counts as zero, so a container that sets only memory
    is never sized below that memory. Raises QuantityError when the block is not readable (not a
    mapping, or a quantity that is not one): unknown is never taken for "nothing set"."""
    if block is None:
        return None
    if not isinstance(block, dict):
        raise quantity.QuantityError(f"resources are not a mapping: {str(block)[:80]!r}")
    requests, limits = block.get("requests"), block.get("limits")
    requests, limits = {} if requests is None else requests, {} if limits is None else limits
    if not isinstance(requests, dict) or not isinstance(limits, dict):
        raise quantity.QuantityError(f"requests or limits are not a mapping: {str(block)[:80]!r}")
    if not any(r in part for part in (requests, limits) for r in ("cpu", "memory")):
        return None
    return Resources(
        quantity.millicores(requests["cpu"]) if "cpu" in requests else 0,
        quantity.mebibytes(requests["memory"]) if "memory" in requests else 0,
        quantity.millicores(limits["cpu"]) if "cpu" in limits else None,
        quantity.mebibytes(limits["memory"]) if "memory" in limits else None,
    )


def _container(containers: list[dict[str, Any]], name: str = RECONCILER_CONTAINER) -> dict[str, Any] | None:
    return next((c for c in containers if isinstance(c, dict) and c.get("name") == name), None)


def _container_resources(containers: list[dict[str, Any]], where: str) -> Resources | None:
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


# ----- deployment ------------------------------------------------------------------------------------------
@dataclass
class DeploymentTarget(_NoRevertCheck):
    """Server-side apply of the reconciler container's resources in the Deployment's pod template.

    Our field manager owns those fields only; every other container and field stays as it is. Forced,
    because the reconciler manager that created the Deployment owns them at first.
    """

    api: kubeapi.KubeApi
    namespace: str = RECONCILER_NAMESPACE
    name: str = "deployment"
    causes_restart: bool = True

    def _deployment(self, key: RSyncKey) -> dict[str, Any]:
        try:
            return self.api.get(kubeapi.DEPLOYMENT, self.namespace, reconciler_name(key))
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading Deployment {self.namespace}/{reconciler_name(key)}") from error

    def current(self, key: RSyncKey) -> Resources | None:
        containers = self._deployment(key)["spec"]["template"]["spec"].get("containers") or []
        return _container_resources(containers, f"Deployment {reconciler_name(key)}")

    def apply(self, key: RSyncKey, resources: Resources) -> Resources:
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
                field_manager=FIELD_MANAGER,
                force=True,
            )
        except kubeapi.ApiError as error:
            raise _translated(error, f"applying to Deployment {self.namespace}/{name}") from error
        return _accepted(written["spec"]["template"]["spec"]["containers"], resources, f"Deployment {name}")


def _accepted(containers: list[dict[str, Any]], wanted: Resources, where: str) -> Resources:
    """What the server stored; a mutating webhook that changed it is reported, not fought."""
    stored = _container_resources(containers, where)
    if stored != wanted:
        raise ApplyError(
            "rejected", f"{where}: stored {stored} instead of {wanted} (mutated by an admission webhook?)"
        )
    return stored


# ----- RSync spec.override.resources -------------------------------------------------------------------
_OVERRIDE_FIELDS = {
    "cpuRequest": ("requests", "cpu"),
    "memoryRequest": ("requests", "memory"),
    "cpuLimit": ("limits", "cpu"),
    "memoryLimit": ("limits", "memory"),
}


def override_entry(resources: Resources) -> dict[str, str]:
    block = resources_json(resources)
    entry = {"containerName": RECONCILER_CONTAINER}
    for field_name, (kind, resource) in _OVERRIDE_FIELDS.items():
        if resource in block.get(kind, {}):
            entry[field_name] = block[kind][resource]
    return entry


def resources_of_override(entry: object) -> Resources | None:
    """Resources of an override entry; QuantityError when it is not readable."""
    if not entry:
        return None
    if not isinstance(entry, dict):
        raise quantity.QuantityError(f"override entry is not a mapping: {str(entry)[:80]!r}")
    block: dict[str, dict[str, Any]] = {"requests": {}, "limits": {}}
    for field_name, (kind, resource) in _OVERRIDE_FIELDS.items():
        if field_name in entry:
            block[kind][resource] = entry[field_name]
    return resources_of(block)


def _override_entries(rsync: dict[str, Any]) -> list[Any]:
    override = (rsync.get("spec") or {}).get("override") or {}
    entries = override.get("resources") or [] if isinstance(override, dict) else None
    if not isinstance(entries, list):
        raise ApplyError("unreadable", f"spec.override.resources is not a list: {str(entries)[:80]!r}")
    return entries


def _is_reconciler_entry(entry: object) -> bool:
    return isinstance(entry, dict) and entry.get("containerName") == RECONCILER_CONTAINER


def _reconciler_override(rsync: dict[str, Any]) -> Resources | None:
    entry = next((e for e in _override_entries(rsync) if _is_reconciler_entry(e)), None)
    try:
        return resources_of_override(entry)
    except quantity.QuantityError as error:
        raise ApplyError("unreadable", f"the reconciler's override entry is unreadable: {error}") from error


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
    causes_restart: bool = True
    conflicts: int = 0
    # Generation and size of our last write per RSync, to tell a later foreign write from a stale cache.
    written: dict[RSyncKey, tuple[int, Resources]] = field(default_factory=dict)

    def _get(self, key: RSyncKey) -> dict[str, Any]:
        try:
            return self.api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading {key}") from error

    def current(self, key: RSyncKey) -> Resources | None:
        return _reconciler_override(self._get(key))

    def overwritten(self, key: RSyncKey, rsync: dict[str, Any]) -> Resources | None:
        if key not in self.written:
            return None
        generation, ours = self.written[key]
        if int((rsync.get("metadata") or {}).get("generation", 0)) <= generation:
            return None
        try:
            seen = _reconciler_override(rsync)
        except ApplyError:
            return None  # unreadable: `current` reports it when the size is next read
        return None if seen == ours else seen

    def apply(self, key: RSyncKey, resources: Resources) -> Resources:
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        for attempt in range(self.attempts):
            rsync = self._get(key)
            others = [e for e in _override_entries(rsync) if not _is_reconciler_entry(e)]
            spec = rsync.setdefault("spec", {})
            override = spec.get("override") or {}
            override["resources"] = [*others, override_entry(resources)]
            spec["override"] = override
            try:
                written = self.api.replace(resource, key.namespace, key.name, rsync)
            except kubeapi.Conflict:
                self.conflicts += 1
                self.sleep(min(0.01 * 2**attempt, 1.0))
                continue
            except kubeapi.ApiError as error:
                raise _translated(error, f"writing the override of {key}") from error
            stored = _reconciler_override(written)
            if stored != resources:
                raise ApplyError("rejected", f"{key}: override stored as {stored} instead of {resources}")
            self.written[key] = (int(written["metadata"].get("generation", 0)), resources)
            return resources
        raise ApplyError("conflict", f"{key}: still conflicting after {self.attempts} attempts")


# ----- in-place pod resize -------------------------------------------------------------------------------
@dataclass
class InPlaceTarget(_NoRevertCheck):
    """Resize the running reconciler pod through `pods/resize` (no restart).

    The size is also recorded on the Deployment as an annotation (metadata, so no rollout). Writing it
    into the pod template instead would roll the pod out, which is the restart an in-place resize exists
    to avoid; a new pod is brought to size by the next reconcile. When the kubelet reports the resize
    infeasible (`PodResizePending`, reason `Infeasible`), the size goes to `fallback` (a template
    change, so a restart).
    """

    api: kubeapi.KubeApi
    fallback: Target
    namespace: str = RECONCILER_NAMESPACE
    name: str = "in-place"
    causes_restart: bool = False
    fell_back: bool = field(default=False)

    def _pod(self, key: RSyncKey) -> dict[str, Any] | None:
        return reconciler_pod(self.api, self.namespace, key)

    def current(self, key: RSyncKey) -> Resources | None:
        pod = self._pod(key)
        if pod is None:
            return self.fallback.current(key)
        return _container_resources(pod["spec"].get("containers") or [], f"pod {pod['metadata']['name']}")

    def apply(self, key: RSyncKey, resources: Resources) -> Resources:
        pod = self._pod(key)
        if pod is None or _resize_infeasible(pod):
            self.fell_back = True
            log.warning(
                "%s: in-place resize %s; applying through %s",
                key,
                "impossible without a pod" if pod is None else "reported infeasible",
                self.fallback.name,
            )
            return self.fallback.apply(key, resources)
        name = pod["metadata"]["name"]
        patch = {
            "spec": {"containers": [{"name": RECONCILER_CONTAINER, "resources": resources_json(resources)}]}
        }
        try:
            written = self.api.patch(
                kubeapi.POD, self.namespace, name, patch, patch_type="strategic", subresource="resize"
            )
        except kubeapi.ApiError as error:
            raise _translated(error, f"resizing pod {self.namespace}/{name}") from error
        accepted = _accepted(written["spec"]["containers"], resources, f"pod {name}")
        self._record_on_deployment(key, resources)
        return accepted

    def _record_on_deployment(self, key: RSyncKey, resources: Resources) -> None:
        patch = {"metadata": {"annotations": {APPLIED_ANNOTATION: annotation_value(resources)}}}
        try:
            self.api.patch(kubeapi.DEPLOYMENT, self.namespace, reconciler_name(key), patch)
        except kubeapi.ApiError as error:
            raise _translated(error, f"recording the size on Deployment {reconciler_name(key)}") from error


def reconciler_pod(api: kubeapi.KubeApi, namespace: str, key: RSyncKey) -> dict[str, Any] | None:
    """The newest live reconciler Pod of an RSync (None when there is none)."""
    selector = f"app=reconciler,configsync.gke.io/deployment-name={reconciler_name(key)}"
    try:
        page = orjson.loads(api.list_page(kubeapi.POD, namespace, label_selector=selector))
    except kubeapi.ApiError as error:
        raise _translated(error, f"listing the reconciler pod of {key}") from error
    live = [p for p in page.get("items") or [] if not (p.get("metadata") or {}).get("deletionTimestamp")]
    return max(live, key=lambda p: p["metadata"].get("creationTimestamp", ""), default=None)


def other_containers_requests(api: kubeapi.KubeApi, namespace: str, key: RSyncKey) -> tuple[int, int] | None:
    """CPU (millicores) and memory (MiB) requested by the reconciler pod's other containers, as they
    are: read from the running Pod (which has what admission added, a sidecar among them), else from
    the Deployment's template; None when neither exists. ApplyError when they cannot be read."""
    pod = reconciler_pod(api, namespace, key)
    if pod is not None:
        containers, where = pod["spec"].get("containers") or [], f"pod {pod['metadata']['name']}"
    else:
        try:
            deployment = api.get(kubeapi.DEPLOYMENT, namespace, reconciler_name(key))
        except kubeapi.NotFound:
            return None
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading Deployment {reconciler_name(key)}") from error
        containers, where = deployment["spec"]["template"]["spec"].get("containers") or [], "its Deployment"
    cpu = memory = 0
    for container in containers:
        if isinstance(container, dict) and container.get("name") != RECONCILER_CONTAINER:
            resources = _readable(container.get("resources"), f"{where}, container {container.get('name')}")
            if resources is not None:
                cpu, memory = cpu + resources.cpu_request_m, memory + resources.memory_request_mib
    return cpu, memory


def _resize_infeasible(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible" for c in conditions)


# ----- recommend only ------------------------------------------------------------------------------------
@dataclass
class RecommendTarget(_NoRevertCheck):
    """Apply nothing: publish the recommendation as an annotation on the RSync (metadata: no restart)."""

    api: kubeapi.KubeApi
    name: str = "recommend"
    causes_restart: bool = False

    def current(self, key: RSyncKey) -> Resources | None:
        try:
            rsync = self.api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
        except kubeapi.ApiError as error:
            raise _translated(error, f"reading {key}") from error
        text = ((rsync.get("metadata") or {}).get("annotations") or {}).get(RECOMMENDED_ANNOTATION)
        return parse_resources_annotation(text)

    def apply(self, key: RSyncKey, resources: Resources) -> Resources:
        patch = {"metadata": {"annotations": {RECOMMENDED_ANNOTATION: annotation_value(resources)}}}
        try:
            self.api.patch(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, patch)
        except kubeapi.ApiError as error:
            raise _translated(error, f"annotating {key}") from error
        return resources


def annotation_value(resources: Resources) -> str:
    return orjson.dumps(resources_json(resources)).decode()


def parse_resources_annotation(text: str | None) -> Resources | None:
    """Our published resources annotation; None when absent or unreadable (we only ever rewrite it)."""
    if not text:
        return None
    try:
        return resources_of(orjson.loads(text))
    except (orjson.JSONDecodeError, quantity.QuantityError):
        return None
