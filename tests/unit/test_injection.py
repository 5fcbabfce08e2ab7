"""The webhook's answer to a Pod admission: the sidecar for the RSync the labels name, or the Pod as it
is; always allowed."""

from __future__ import annotations

import base64
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.injection import SidecarTemplate, TemplateError, decide

TEMPLATE = SidecarTemplate.parse(
    """
container:
  name: objcount-autoscaler
  image: example/objcount:1
  env:
  - {name: OBJCOUNT_MODE, value: sidecar}
  volumeMounts:
  - {name: repo, mountPath: /repo, readOnly: true}
  - {name: objcount-sidecar-token, mountPath: /var/run/secrets/kubernetes.io/serviceaccount, readOnly: true}
volumes:
- name: objcount-sidecar-token
  secret: {secretName: objcount-sidecar-token}
"""
)
LABELS = {
    "app": "reconciler",
    "configsync.gke.io/sync-kind": "RepoSync",
    "configsync.gke.io/sync-name": "repo-sync",
    "configsync.gke.io/sync-namespace": "team-a",
}


def pod(labels: dict[str, Any] | None = None, *, containers: list[str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "ns-reconciler-team-a-", "labels": LABELS if labels is None else labels},
        "spec": {
            "containers": [{"name": n} for n in containers or ["reconciler", "git-sync"]],
            "volumes": [{"name": "repo", "emptyDir": {}}],
        },
    }


def review(obj: dict[str, Any], namespace: str = "config-management-system") -> bytes:
    request = {"uid": "u-1", "kind": {"group": "", "version": "v1", "kind": "Pod"}, "namespace": namespace}
    return orjson.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {**request, "object": obj},
        }
    )


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """The Pod the API server would store: the response's JSON Patch applied by a library of its own."""
    patch = orjson.loads(base64.b64decode(response["response"]["patch"]))
    result: dict[str, Any] = jsonpatch.apply_patch(obj, patch)
    return result


def test_a_reconciler_pod_gets_the_sidecar_with_its_rsync_from_the_labels() -> None:
    original = pod()
    decision = decide(review(original), TEMPLATE)
    assert decision.result == "injected"
    assert decision.response["response"]["uid"] == "u-1"
    assert decision.response["response"]["allowed"] is True
    result = patched(original, decision.response)
    assert [c["name"] for c in result["spec"]["containers"]] == [
        "reconciler",
        "git-sync",
        "objcount-autoscaler",
    ]
    assert result["spec"]["containers"][-1]["env"] == [
        {"name": "OBJCOUNT_MODE", "value": "sidecar"},
        {"name": "OBJCOUNT_RSYNC_KIND", "value": "RepoSync"},
        {"name": "OBJCOUNT_RSYNC_NAME", "value": "repo-sync"},
        {"name": "OBJCOUNT_RSYNC_NAMESPACE", "value": "team-a"},
    ]
    assert [v["name"] for v in result["spec"]["volumes"]] == ["repo", "objcount-sidecar-token"]
    # Nothing of the Pod's own containers changes.
    assert result["spec"]["containers"][:2] == original["spec"]["containers"]


def test_each_sidecar_gets_the_token_of_its_own_account() -> None:
    # A RepoSync's sidecar: its own account's token, optional (an ungranted RepoSync still starts).
    repo = patched(pod(), decide(review(pod()), TEMPLATE).response)
    assert repo["spec"]["volumes"][-1] == {
        "name": "objcount-sidecar-token",
        "secret": {"secretName": "objcount-ns-reconciler-team-a-token", "optional": True},
    }
    # Every RootSync's sidecar: the one account the shipped manifests create.
    root_labels = {
        "app": "reconciler",
        "configsync.gke.io/sync-kind": "RootSync",
        "configsync.gke.io/sync-name": "root-sync",
        "configsync.gke.io/sync-namespace": "config-management-system",
    }
    root = patched(pod(root_labels), decide(review(pod(root_labels)), TEMPLATE).response)
    assert root["spec"]["volumes"][-1] == {
        "name": "objcount-sidecar-token",
        "secret": {"secretName": "objcount-sidecar-token"},
    }


def test_a_pod_without_volumes_gets_the_volume_list() -> None:
    original = pod()
    del original["spec"]["volumes"]
    result = patched(original, decide(review(original), TEMPLATE).response)
    assert [v["name"] for v in result["spec"]["volumes"]] == ["objcount-sidecar-token"]


def test_a_pod_that_already_has_the_sidecar_is_left_alone() -> None:
    decision = decide(review(pod(containers=["reconciler", "objcount-autoscaler"])), TEMPLATE)
    assert decision.result == "already_injected"
    assert decision.response["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    ("labels", "namespace", "result"),
    [
        ({"app": "reconciler"}, "config-management-system", "not_a_reconciler"),
        (
            {**LABELS, "configsync.gke.io/sync-kind": "Deployment"},
            "config-management-system",
            "invalid_labels",
        ),
        (
            {**LABELS, "configsync.gke.io/sync-name": "../../etc"},
            "config-management-system",
            "invalid_labels",
        ),
        ({**LABELS, "configsync.gke.io/sync-name": ["list"]}, "config-management-system", "invalid_labels"),
        (
            {**LABELS, "configsync.gke.io/sync-namespace": "Team_A"},
            "config-management-system",
            "invalid_labels",
        ),
        (
            {
                **LABELS,
                "configsync.gke.io/sync-kind": "RootSync",
                "configsync.gke.io/sync-namespace": "team-a",
            },
            "config-management-system",
            "invalid_labels",
        ),
        (LABELS, "team-a", "invalid_labels"),
    ],
)
def test_pods_whose_labels_do_not_name_an_rsync_are_allowed_unchanged(
    labels: dict[str, Any], namespace: str, result: str
) -> None:
    decision = decide(review(pod(labels), namespace), TEMPLATE)
    assert decision.result == result
    assert decision.response["response"] == {"uid": "u-1", "allowed": True}


@pytest.mark.parametrize(
    "body",
    [b"", b"not json", b"[]", b'{"request": []}', b'{"request": {"uid": 7}}', b'{"request": {"uid": ""}}'],
)
def test_a_malformed_review_is_answered_allowed(body: bytes) -> None:
    decision = decide(body, TEMPLATE)
    assert decision.result == "malformed_review"
    assert decision.response["response"]["allowed"] is True
    assert "patch" not in decision.response["response"]


def test_an_object_that_is_not_a_pod_is_allowed_unchanged() -> None:
    body = orjson.loads(review(pod()))
    body["request"]["kind"]["kind"] = "Secret"
    decision = decide(orjson.dumps(body), TEMPLATE)
    assert decision.result == "not_a_pod"
    assert decision.response["response"] == {"uid": "u-1", "allowed": True}


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(),
    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
    max_leaves=20,
)


@given(labels=JSON_VALUES | st.dictionaries(st.sampled_from(sorted(LABELS)), JSON_VALUES), spec=JSON_VALUES)
def test_any_pod_is_answered_allowed_without_an_exception(labels: object, spec: object) -> None:
    obj = {"metadata": {"labels": labels}, "spec": spec}
    decision = decide(review(obj), TEMPLATE)  # type: ignore[arg-type]
    assert decision.response["response"]["allowed"] is True
    assert decision.response["response"]["uid"] == "u-1"


@pytest.mark.parametrize(
    "text",
    [
        "container: [a]",
        "volumes: []",
        "container: {image: x}",
        "container: {name: s}\nvolumes: [{secret: {}}]",
        "container: {name: s, env: [{name: OBJCOUNT_RSYNC_NAME, value: x}]}",
        "container: {name: [unclosed",
        "container: {name: s, env: [{name: OBJCOUNT_TARGET, value: deployment}]}",
    ],
)
def test_a_bad_sidecar_template_is_refused(text: str) -> None:
    with pytest.raises(TemplateError):
        SidecarTemplate.parse(text)
