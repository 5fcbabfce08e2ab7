"""The webhook's answer to a Pod admission: the sidecar for the RSync the labels name, or the Pod as it
is; always allowed."""

from __future__ import annotations

import base64
import re
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.core.injection import SidecarTemplate, TemplateError, decide
from inventory.core.ids import RSyncKey

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


# ----- sizing at admission -------------------------------------------------------------------------------
SIZE = '{"requests": {"cpu": "150m", "memory": "448Mi"}, "limits": {"memory": "672Mi"}}'
KEY_ANNOTATIONS = {"objcount.dev/applied-resources": SIZE, "objcount.dev/target": "in-place"}


def rsync(annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "kind": "RepoSync",
        "metadata": {"name": "repo-sync", "namespace": "team-a", "annotations": annotations},
    }


def sized_pod() -> dict[str, Any]:
    """Config Sync's template: the reconciler with its requests and an ephemeral-storage limit."""
    original = pod()
    original["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "50m", "memory": "200Mi", "ephemeral-storage": "1Gi"},
        "limits": {"ephemeral-storage": "2Gi"},
    }
    return original


def test_a_new_reconciler_pod_starts_at_the_size_applied_in_place_to_its_rsync() -> None:
    looked_up: list[object] = []

    def lookup(key: object) -> dict[str, Any]:
        looked_up.append(key)
        return rsync(KEY_ANNOTATIONS)

    original = sized_pod()
    decision = decide(review(original), TEMPLATE, lookup)
    assert (decision.result, decision.sized) == ("injected", "sized")
    assert looked_up == [RSyncKey("RepoSync", "team-a", "repo-sync")]
    result = patched(original, decision.response)
    # CPU and memory from the annotation; no CPU limit where it sets none; ephemeral storage kept.
    assert result["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "150m", "memory": "448Mi", "ephemeral-storage": "1Gi"},
        "limits": {"memory": "672Mi", "ephemeral-storage": "2Gi"},
    }
    assert result["spec"]["containers"][1] == original["spec"]["containers"][1]  # git-sync untouched
    assert [c["name"] for c in result["spec"]["containers"]][-1] == "objcount-autoscaler"


def test_a_new_reconciler_pod_starts_at_the_size_of_a_whole_sync_where_it_is_published() -> None:
    """In its steady state the reconciler runs less than a whole sync needs (the applied size follows its
    working set); a new Pod syncs its commit from the start: it gets the published start size."""
    start = '{"requests": {"cpu": "240m", "memory": "448Mi"}, "limits": {"memory": "672Mi"}}'
    steady = '{"requests": {"cpu": "240m", "memory": "224Mi"}, "limits": {"memory": "352Mi"}}'
    annotations = {**KEY_ANNOTATIONS, "objcount.dev/applied-resources": steady}
    original = sized_pod()
    decision = decide(review(original), None, lambda key: rsync(annotations | {START: start}))
    resources = patched(original, decision.response)["spec"]["containers"][0]["resources"]
    assert (resources["requests"]["memory"], resources["limits"]["memory"]) == ("448Mi", "672Mi")
    decision = decide(review(original), None, lambda key: rsync(annotations))  # an older version's RSync
    assert patched(original, decision.response)["spec"]["containers"][0]["resources"]["requests"][
        "memory"
    ] == ("224Mi")


START = "objcount.dev/start-resources"


def test_the_cluster_install_webhook_only_sizes() -> None:
    original = sized_pod()
    decision = decide(review(original), None, lambda key: rsync(KEY_ANNOTATIONS))
    assert (decision.result, decision.sized) == ("sidecar_off", "sized")
    result = patched(original, decision.response)
    assert [c["name"] for c in result["spec"]["containers"]] == ["reconciler", "git-sync"]
    assert result["spec"]["containers"][0]["resources"]["requests"]["memory"] == "448Mi"


def test_a_reconciler_without_resources_gets_them() -> None:
    original = pod()
    result = patched(original, decide(review(original), None, lambda key: rsync(KEY_ANNOTATIONS)).response)
    assert result["spec"]["containers"][0]["resources"] == {
        "requests": {"cpu": "150m", "memory": "448Mi"},
        "limits": {"memory": "672Mi"},
    }


@pytest.mark.parametrize(
    ("annotations", "result"),
    [
        ({**KEY_ANNOTATIONS, "objcount.dev/target": "rsync-override"}, "not_in_place"),
        ({**KEY_ANNOTATIONS, "objcount.dev/target": "vpa"}, "not_in_place"),
        ({"objcount.dev/applied-resources": SIZE}, "not_in_place"),
        ({**KEY_ANNOTATIONS, "objcount.dev/autoscale": "false"}, "opted_out"),
        ({**KEY_ANNOTATIONS, "objcount.dev/held-by-owner": "declared in git"}, "held_by_owner"),
        ({"objcount.dev/target": "in-place"}, "size_unknown"),
        (
            {**KEY_ANNOTATIONS, "objcount.dev/applied-resources": '{"requests": {"memory": "lots"}}'},
            "size_unreadable",
        ),
        ({**KEY_ANNOTATIONS, "objcount.dev/applied-resources": "[1, 2"}, "size_unreadable"),
    ],
)
def test_any_doubt_about_the_size_leaves_the_template_size(annotations: dict[str, str], result: str) -> None:
    original = sized_pod()
    decision = decide(review(original), None, lambda key: rsync(annotations))
    assert decision.sized == result
    assert decision.response["response"] == {"uid": "u-1", "allowed": True}


def test_an_rsync_not_in_the_cache_leaves_the_template_size_and_the_sidecar_still_comes() -> None:
    original = sized_pod()
    decision = decide(review(original), TEMPLATE, lambda key: None)
    assert (decision.result, decision.sized) == ("injected", "rsync_unknown")
    result = patched(original, decision.response)
    assert result["spec"]["containers"][0] == original["spec"]["containers"][0]


def test_a_pod_without_a_reconciler_container_is_not_sized() -> None:
    original = pod(containers=["git-sync"])
    decision = decide(review(original), None, lambda key: rsync(KEY_ANNOTATIONS))
    assert decision.sized == "no_reconciler_container"
    assert decision.response["response"] == {"uid": "u-1", "allowed": True}


def test_without_a_lookup_nothing_is_sized() -> None:
    decision = decide(review(sized_pod()), TEMPLATE)
    assert decision.sized is None


@given(annotations=st.dictionaries(st.sampled_from(sorted(KEY_ANNOTATIONS)), st.text()), spec=JSON_VALUES)
def test_any_rsync_and_pod_are_answered_allowed_without_an_exception(
    annotations: dict[str, str], spec: object
) -> None:
    obj = {"metadata": {"labels": LABELS}, "spec": spec}
    decision = decide(review(obj), TEMPLATE, lambda key: rsync(annotations))  # type: ignore[arg-type]
    assert decision.response["response"]["allowed"] is True


def test_a_sidecar_is_told_the_platform_the_webhook_detected_unless_its_template_sets_one() -> None:
    told = patched(pod(), decide(review(pod()), TEMPLATE, None, "autopilot").response)
    assert {"name": "OBJCOUNT_PLATFORM", "value": "autopilot"} in told["spec"]["containers"][-1]["env"]
    set_here = SidecarTemplate.parse(
        "container: {name: objcount-autoscaler, env: [{name: OBJCOUNT_PLATFORM, value: standard}]}"
    )
    kept = patched(pod(), decide(review(pod()), set_here, None, "autopilot").response)
    platform = [e for e in kept["spec"]["containers"][-1]["env"] if e["name"] == "OBJCOUNT_PLATFORM"]
    assert platform == [{"name": "OBJCOUNT_PLATFORM", "value": "standard"}]


AUTOPILOT_TEMPLATE = """
container:
  name: objcount-autoscaler
  resources:
    requests: {cpu: 5m, memory: 64Mi}
    limits: {memory: 128Mi}
autopilotResources: {cpu: 50m, memory: 128Mi}
"""


def sidecar_resources(template: SidecarTemplate, platform: str | None) -> object:
    told = patched(pod(), decide(review(pod()), template, None, platform).response)
    return told["spec"]["containers"][-1]["resources"]


def test_on_autopilot_without_bursting_the_sidecar_asks_its_autopilot_resources_as_requests_and_limits() -> (
    None
):
    template = SidecarTemplate.parse(AUTOPILOT_TEMPLATE)
    both = {"cpu": "50m", "memory": "128Mi"}
    assert sidecar_resources(template, "autopilot") == {"requests": both, "limits": both}
    # Where limits may differ from requests, or nothing was detected: the container's own.
    own = {"requests": {"cpu": "5m", "memory": "64Mi"}, "limits": {"memory": "128Mi"}}
    for platform in ("standard", "autopilot-bursting", None):
        assert sidecar_resources(template, platform) == own
    # The platform the template sets wins over the detected one, as for OBJCOUNT_PLATFORM itself.
    pinned = AUTOPILOT_TEMPLATE.replace(
        "  name: objcount-autoscaler\n",
        "  name: objcount-autoscaler\n  env: [{name: OBJCOUNT_PLATFORM, value: autopilot}]\n",
    )
    assert sidecar_resources(SidecarTemplate.parse(pinned), "standard") == {"requests": both, "limits": both}


def test_a_template_without_autopilot_resources_keeps_its_container_everywhere() -> None:
    assert (
        "resources"
        not in patched(pod(), decide(review(pod()), TEMPLATE, None, "autopilot").response)["spec"][
            "containers"
        ][-1]
    )


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("{cpu: 50m}", "needs `cpu` and `memory`"),
        ("{cpu: 50m, memory: 128Mi, gpu: 1}", "needs `cpu` and `memory`"),
        ("{cpu: fifty, memory: 128Mi}", "autopilotResources.cpu"),
        ("{cpu: 50m, memory: 0}", "autopilotResources.memory"),
        ("[50m, 128Mi]", "needs `cpu` and `memory`"),
    ],
)
def test_a_template_with_unusable_autopilot_resources_is_refused_with_what_is_wrong(
    value: str, said: str
) -> None:
    with pytest.raises(TemplateError, match=re.escape(said)):
        SidecarTemplate.parse(f"container: {{name: objcount-autoscaler}}\nautopilotResources: {value}\n")
