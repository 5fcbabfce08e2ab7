"""What the admission webhook does to a reconciler Pod: adds the sidecar (sidecar install) for the RSync
the Pod's labels name, and sizes its `reconciler` container from the size recorded on that RSync.

Config Sync's reconciler-manager owns the reconciler Deployment and rejects any container it does not
know in its template, but it does not watch Pods. So the sidecar is added to each Pod as it is created
(a mutating webhook on Pod CREATE), and the Deployment stays exactly as Config Sync wrote it.

Pure: an AdmissionReview in, an AdmissionReview response out. The answer always allows the Pod: when
anything is wrong (a malformed review, a Pod that is not a reconciler, hostile labels) it is allowed
unchanged, with the reason for the caller's log and metric. The webhook never stops Config Sync.

The sidecar comes from a template (`manifests/sidecar/base/sidecar-template.yaml`): one container and the
volumes only it uses. The RSync's kind, name and namespace are set as literal environment variables from
the Pod's `configsync.gke.io/sync-*` labels, validated here; names are never parsed. On GKE Autopilot
without bursting, which forces every container's limits to its requests, the sidecar gets the template's
`autopilotResources` as both (the container's own would be cut to its requests there: a CPU limit of 5m,
under which the service's imports alone take some 3 minutes).

Sizing at admission, as VPA's admission-controller does: a reconciler Pod being created (a rollout of
Config Sync's, a node drained, an eviction) gets the size the service last applied in place to its
RSync's reconciler (`objcount.dev/applied-resources` through `objcount.dev/target: in-place`), so it
starts at the size of the work it will do, with no resize right after start and no rollout. Only that
target's size is given: `rsync-override` and `deployment` are in the template already, VPA's
admission-controller applies `vpa`, and `recommend` or an RSync that opted out asks for nothing. An
RSync not known yet, an unreadable annotation or a size held for its owner leaves the template's size,
with the reason (`SizeResult`).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, cast, get_args

import orjson
import yaml

from autoscaler.core import quantity
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    HELD_ANNOTATION,
    START_ANNOTATION,
    TARGET_ANNOTATION,
    autoscale_enabled,
    parse_resources_annotation,
)
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import resources_json
from autoscaler.core.sizing import PLATFORMS
from inventory.core.ids import (
    RECONCILER_CONTAINER,
    ROOT_SIDECAR_ACCOUNT,
    ROOT_SYNC_NAMESPACE,
    SYNC_KIND_LABEL,
    SYNC_NAME_LABEL,
    SYNC_NAMESPACE_LABEL,
    RSyncKey,
    sidecar_account,
)
from inventory.core.objects import annotations_of, block_of

JSON = dict[str, Any]
Result = Literal[
    "injected",
    "already_injected",
    "sidecar_off",
    "not_a_reconciler",
    "invalid_labels",
    "malformed_review",
    "not_a_pod",
]
RESULTS: tuple[Result, ...] = get_args(Result)
SizeResult = Literal[
    "sized",
    "not_in_place",
    "opted_out",
    "held_by_owner",
    "size_unknown",
    "size_unreadable",
    "rsync_unknown",
    "no_reconciler_container",
]
SIZE_RESULTS: tuple[SizeResult, ...] = get_args(SizeResult)
SIZED_TARGET = "in-place"  # the one target whose size only admission gives a new Pod
PLATFORM_ENV = "OBJCOUNT_PLATFORM"
RSYNC_ENV = ("OBJCOUNT_RSYNC_KIND", "OBJCOUNT_RSYNC_NAME", "OBJCOUNT_RSYNC_NAMESPACE")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class SidecarTemplate:
    container: JSON
    volumes: tuple[JSON, ...]
    # Requests and limits alike where the platform forces them equal (None: the container's own).
    autopilot_resources: JSON | None = None

    @classmethod
    def parse(cls, text: str) -> SidecarTemplate:
        """`container:` (one container, named) and `volumes:` (those only the sidecar mounts)."""
        try:
            document = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise TemplateError(f"the sidecar template is not YAML: {error}") from error
        if not isinstance(document, dict) or not isinstance(document.get("container"), dict):
            raise TemplateError("the sidecar template needs a `container:` mapping")
        container, volumes = document["container"], document.get("volumes") or []
        if not isinstance(container.get("name"), str) or not container["name"]:
            raise TemplateError("the sidecar template's container needs a name")
        if not isinstance(volumes, list) or not all(isinstance(v, dict) and v.get("name") for v in volumes):
            raise TemplateError("the sidecar template's `volumes:` must be a list of named volumes")
        env = container.get("env") or []
        if any(e.get("name") in RSYNC_ENV for e in env):
            raise TemplateError(
                f"the webhook sets {', '.join(RSYNC_ENV)} itself; remove them from the template"
            )
        if {"name": "OBJCOUNT_TARGET", "value": "deployment"} in env:
            # Every sidecar would refuse its target (the reconciler-manager owns the Deployments it would
            # write) and size nothing: refused here, where it is one error, not one per reconciler Pod.
            raise TemplateError(
                "a sidecar in Config Sync's reconciler Pods cannot use the deployment target (the "
                "reconciler-manager owns those Deployments): use rsync-override or in-place"
            )
        return cls(container, tuple(volumes), _autopilot_resources(document.get("autopilotResources")))

    @property
    def name(self) -> str:
        return str(self.container["name"])

    def container_for(self, platform: str | None) -> JSON:
        """The container as the platform keeps it: on Autopilot without bursting, with its
        `autopilot_resources` as requests and limits (else Autopilot would cut the limits to the requests)."""
        rules = PLATFORMS.get(platform or "")
        if rules is None or not rules.limits_equal_requests or self.autopilot_resources is None:
            return self.container
        both = dict(self.autopilot_resources)
        return {**self.container, "resources": {"requests": both, "limits": dict(both)}}


def _autopilot_resources(value: object) -> JSON | None:
    """`autopilotResources:` of the template: `cpu` and `memory`, both quantities, both required."""
    if value is None:
        return None
    if not isinstance(value, dict) or set(value) != {"cpu", "memory"}:
        raise TemplateError(
            "the sidecar template's `autopilotResources:` needs `cpu` and `memory`, nothing else"
        )
    for name, given in value.items():
        try:
            if quantity.parse(given) <= 0:
                raise quantity.QuantityError(f"{given!r} is not above zero")
        except quantity.QuantityError as error:
            raise TemplateError(f"the sidecar template's `autopilotResources.{name}`: {error}") from error
    return {name: str(given) for name, given in value.items()}


@dataclass(frozen=True)
class Decision:
    response: JSON  # the AdmissionReview to send back
    result: Result
    detail: str = ""
    # Sizing (None: not asked, or not a reconciler Pod): what was done to the reconciler's resources.
    sized: SizeResult | None = None
    size_detail: str = ""


def admission_size(rsync: Mapping[str, object] | None) -> Resources | tuple[SizeResult, str]:
    """The size a new reconciler Pod of this RSync starts at, or why it keeps the template's (None: the
    RSync is not known here yet)."""
    if rsync is None:
        return "rsync_unknown", "the RSync is not in the webhook's cache (new, or the cache not synced)"
    annotations = annotations_of(rsync)
    # What a whole sync needs (the applied size may be the steady state's, less); an RSync an older
    # version of ours sized has only the applied size.
    text = annotations.get(START_ANNOTATION) or annotations.get(APPLIED_ANNOTATION)
    resources = parse_resources_annotation(text)
    reasons: tuple[tuple[bool, SizeResult, str], ...] = (
        (not autoscale_enabled(rsync), "opted_out", "objcount.dev/autoscale is false"),
        (bool(annotations.get(HELD_ANNOTATION)), "held_by_owner", _shown(annotations.get(HELD_ANNOTATION))),
        (
            annotations.get(TARGET_ANNOTATION) != SIZED_TARGET,
            "not_in_place",
            f"target {_shown(annotations.get(TARGET_ANNOTATION))}",
        ),
        (not text, "size_unknown", "no objcount.dev/applied-resources yet"),
        (resources is None, "size_unreadable", f"objcount.dev/applied-resources {_shown(text)}"),
    )
    reason = next(((result, detail) for unsized, result, detail in reasons if unsized), None)
    return reason or cast(Resources, resources)


def size_patch(pod: Mapping[str, object], resources: Resources) -> list[JSON] | str:
    """JSON Patch setting the reconciler container's CPU and memory (its other resources, such as
    ephemeral storage, kept), or why there is none to set (no such container)."""
    containers = _list(block_of(pod, "spec").get("containers"))
    names = [c.get("name") if isinstance(c, dict) else None for c in containers]
    index = names.index(RECONCILER_CONTAINER) if RECONCILER_CONTAINER in names else None
    if index is None:
        return f"no {RECONCILER_CONTAINER!r} container"
    current = block_of(cast(Mapping[str, object], containers[index]), "resources")
    sized = resources_json(resources)
    value: JSON = {name: part for name, part in current.items() if name not in ("requests", "limits")}
    for part in ("requests", "limits"):
        kept = {k: v for k, v in block_of(current, part).items() if k not in ("cpu", "memory")}
        merged = {**kept, **sized.get(part, {})}
        if merged:
            value[part] = merged
    return [{"op": "add", "path": f"/spec/containers/{index}/resources", "value": value}]


def rsync_of(labels: object, namespace: object) -> RSyncKey | str:
    """The RSync a reconciler Pod serves, from its labels; or why the labels do not name one."""
    if not isinstance(labels, dict) or SYNC_KIND_LABEL not in labels:
        return "no configsync.gke.io/sync-kind label"
    kind, name, sync_ns = (labels.get(k) for k in (SYNC_KIND_LABEL, SYNC_NAME_LABEL, SYNC_NAMESPACE_LABEL))
    problems = {
        f"sync-kind {_shown(kind)} is neither RootSync nor RepoSync": kind not in ("RootSync", "RepoSync"),
        f"sync-name {_shown(name)} is not a valid name": not _matches(_DNS_SUBDOMAIN, name),
        f"sync-namespace {_shown(sync_ns)} is not a valid namespace": not _matches(_DNS_LABEL, sync_ns),
        f"a RootSync lives in {ROOT_SYNC_NAMESPACE}, not {_shown(sync_ns)}": (
            kind == "RootSync" and sync_ns != ROOT_SYNC_NAMESPACE
        ),
        f"reconciler Pods run in {ROOT_SYNC_NAMESPACE}, not {_shown(namespace)}": (
            namespace != ROOT_SYNC_NAMESPACE
        ),
    }
    problem = next((why for why, wrong in problems.items() if wrong), None)
    return problem or RSyncKey(kind, str(sync_ns), str(name))  # type: ignore[arg-type]


def _matches(pattern: re.Pattern[str], value: object) -> bool:
    return isinstance(value, str) and pattern.match(value) is not None


def _shown(value: object) -> str:
    """A label value for a log line: quoted and cut short (labels are attacker-controlled text)."""
    return repr(str(value)[:64])


def sidecar_patch(
    pod: Mapping[str, object], template: SidecarTemplate, key: RSyncKey, platform: str | None = None
) -> list[JSON]:
    """JSON Patch adding the sidecar container (with its RSync, and the `platform` the webhook detected
    unless the template sets one; with the resources that platform keeps) and its volumes to the Pod."""
    env = [e for e in template.container.get("env") or [] if e.get("name") not in RSYNC_ENV]
    env += [
        {"name": n, "value": v} for n, v in zip(RSYNC_ENV, (key.kind, key.name, key.namespace), strict=True)
    ]
    told = next((e.get("value") for e in env if e.get("name") == PLATFORM_ENV), None)
    if platform and told is None:
        env.append({"name": PLATFORM_ENV, "value": platform})
    container = template.container_for(told if told is not None else platform)
    patch: list[JSON] = [{"op": "add", "path": "/spec/containers/-", "value": {**container, "env": env}}]
    pod_volumes = block_of(pod, "spec").get("volumes")
    existing = {v.get("name") for v in _list(pod_volumes) if isinstance(v, dict)}
    volumes = [_with_token_of(v, key) for v in template.volumes if v["name"] not in existing]
    if pod_volumes is None:
        patch.append({"op": "add", "path": "/spec/volumes", "value": volumes})
    else:
        patch += [{"op": "add", "path": "/spec/volumes/-", "value": v} for v in volumes]
    return patch


def _with_token_of(volume: JSON, key: RSyncKey) -> JSON:
    """The template's token volume (the RootSync sidecars' account) for the account that serves `key`.
    Optional: a RepoSync not granted yet (no account, no Secret) must not keep its reconciler from
    starting; its sidecar then reports that it has no credentials."""
    secret = volume.get("secret")
    if not isinstance(secret, dict) or secret.get("secretName") != f"{ROOT_SIDECAR_ACCOUNT}-token":
        return volume
    if key.kind == "RootSync":
        return volume
    return {**volume, "secret": {**secret, "secretName": f"{sidecar_account(key)}-token", "optional": True}}


RSyncLookup = Callable[[RSyncKey], Mapping[str, object] | None]


def decide(
    body: bytes,
    template: SidecarTemplate | None,
    rsyncs: RSyncLookup | None = None,
    platform: str | None = None,
) -> Decision:
    """Answer one AdmissionReview (the request body): always allowed; a reconciler Pod gets the sidecar
    (when there is a `template`; told the `platform` where it was detected) and its size (when there are
    `rsyncs` to look its RSync up in)."""
    try:
        review = orjson.loads(body)
    except orjson.JSONDecodeError as error:
        return Decision(_response(None, ""), "malformed_review", f"not JSON: {error}")
    request = block_of(review if isinstance(review, dict) else {}, "request")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        return Decision(_response(None, ""), "malformed_review", "no request.uid")
    version = review.get("apiVersion") if isinstance(review.get("apiVersion"), str) else None
    pod = block_of(request, "object")
    if block_of(request, "kind").get("kind") != "Pod" or not pod:
        return Decision(_response(version, uid), "not_a_pod", str(request.get("kind"))[:100])
    key = rsync_of(block_of(pod, "metadata").get("labels"), request.get("namespace"))
    if isinstance(key, str):
        result: Result = "not_a_reconciler" if key.startswith("no ") else "invalid_labels"
        return Decision(_response(version, uid), result, key)
    result, patch = _sidecar(pod, template, key, platform)
    sized, size_detail, resize = _size(pod, rsyncs, key)
    return Decision(_response(version, uid, patch + resize), result, str(key), sized, size_detail)


def _sidecar(
    pod: Mapping[str, object], template: SidecarTemplate | None, key: RSyncKey, platform: str | None
) -> tuple[Result, list[JSON]]:
    if template is None:
        return "sidecar_off", []
    containers = block_of(pod, "spec").get("containers")
    if any(isinstance(c, dict) and c.get("name") == template.name for c in _list(containers)):
        return "already_injected", []
    return "injected", sidecar_patch(pod, template, key, platform)


def _size(
    pod: Mapping[str, object], rsyncs: RSyncLookup | None, key: RSyncKey
) -> tuple[SizeResult | None, str, list[JSON]]:
    if rsyncs is None:
        return None, "", []
    size = admission_size(rsyncs(key))
    if isinstance(size, tuple):
        return *size, []
    patch = size_patch(pod, size)
    if isinstance(patch, str):
        return "no_reconciler_container", patch, []
    return "sized", str(size), patch


def _list(value: object) -> list[object]:
    return value if isinstance(value, list) else []


def _response(review_version: str | None, uid: str, patch: list[JSON] | None = None) -> JSON:
    response: JSON = {"uid": uid, "allowed": True}
    if patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = _base64(orjson.dumps(patch))
    return {
        "apiVersion": review_version or "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }


def _base64(data: bytes) -> str:
    return base64.b64encode(data).decode()
