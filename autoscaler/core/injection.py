"""What the admission webhook adds to a reconciler Pod: the sidecar, for the RSync the Pod's labels name.

Config Sync's reconciler-manager owns the reconciler Deployment and rejects any container it does not
know in its template, but it does not watch Pods. So the sidecar is added to each Pod as it is created
(a mutating webhook on Pod CREATE), and the Deployment stays exactly as Config Sync wrote it.

Pure: an AdmissionReview in, an AdmissionReview response out. The answer always allows the Pod: when
anything is wrong (a malformed review, a Pod that is not a reconciler, hostile labels) it is allowed
unchanged, with the reason for the caller's log and metric. The webhook never stops Config Sync.

The sidecar comes from a template (`manifests/sidecar/base/sidecar-template.yaml`): one container and the
volumes only it uses. The RSync's kind, name and namespace are set as literal environment variables from
the Pod's `configsync.gke.io/sync-*` labels, validated here; names are never parsed.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson
import yaml

from inventory.core.ids import (
    ROOT_SIDECAR_ACCOUNT,
    ROOT_SYNC_NAMESPACE,
    SYNC_KIND_LABEL,
    SYNC_NAME_LABEL,
    SYNC_NAMESPACE_LABEL,
    RSyncKey,
    sidecar_account,
)
from inventory.core.objects import block_of

JSON = dict[str, Any]
Result = Literal[
    "injected", "already_injected", "not_a_reconciler", "invalid_labels", "malformed_review", "not_a_pod"
]
RESULTS: tuple[Result, ...] = (
    "injected",
    "already_injected",
    "not_a_reconciler",
    "invalid_labels",
    "malformed_review",
    "not_a_pod",
)
RSYNC_ENV = ("OBJCOUNT_RSYNC_KIND", "OBJCOUNT_RSYNC_NAME", "OBJCOUNT_RSYNC_NAMESPACE")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class TemplateError(ValueError):
    pass


@dataclass(frozen=True)
class SidecarTemplate:
    container: JSON
    volumes: tuple[JSON, ...]

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
        return cls(container, tuple(volumes))

    @property
    def name(self) -> str:
        return str(self.container["name"])


@dataclass(frozen=True)
class Decision:
    response: JSON  # the AdmissionReview to send back
    result: Result
    detail: str = ""


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


def sidecar_patch(pod: Mapping[str, object], template: SidecarTemplate, key: RSyncKey) -> list[JSON]:
    """JSON Patch adding the sidecar container (with its RSync) and its volumes to the Pod."""
    env = [e for e in template.container.get("env") or [] if e.get("name") not in RSYNC_ENV]
    env += [
        {"name": n, "value": v} for n, v in zip(RSYNC_ENV, (key.kind, key.name, key.namespace), strict=True)
    ]
    patch: list[JSON] = [
        {"op": "add", "path": "/spec/containers/-", "value": {**template.container, "env": env}}
    ]
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


def decide(body: bytes, template: SidecarTemplate) -> Decision:
    """Answer one AdmissionReview (the request body): always allowed, patched when it is a reconciler."""
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
    containers = block_of(pod, "spec").get("containers")
    if any(isinstance(c, dict) and c.get("name") == template.name for c in _list(containers)):
        return Decision(_response(version, uid), "already_injected", str(key))
    patch = sidecar_patch(pod, template, key)
    return Decision(_response(version, uid, patch), "injected", str(key))


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
