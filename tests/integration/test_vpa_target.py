"""The `vpa` target against the real kube-apiserver with VPA v1.8.1's own CRDs (from its release's
`deploy/`), through our ServiceAccounts' tokens with exactly the shipped RBAC (manifests/cluster,
manifests/sidecar's accounts, manifests/vpa/create) and the shipped guard (manifests/vpa/base/guard.yaml):
which VerticalPodAutoscaler we write, what we write into its status, what the API server stores, and
what our identities are refused. PLAYED BY US: no VPA and no Config Sync run on this bare API server
(the reconciler Deployment is the object the reconciler-manager writes; tests/integration/test_vpa_node.py
runs the real VPA and the real Config Sync on the real node)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from typing import Any, cast

import pytest

from autoscaler.core.annotations import APPLIED_ANNOTATION, resources_annotation
from autoscaler.core.observation import RSyncView
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.kube.targets import VpaTarget
from controlplane import LocalControlPlane, vpa
from controlplane.autoscaler_install import kustomization_objects
from controlplane.configsync_install import NAMESPACE
from controlplane.seed import REPO_ROOT, ensure_namespace, install_crds, reconciler_deployment
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import wait_for
from tests.integration.test_guard import IDENTITIES, shipped_accounts

JSON = dict[str, Any]
VPA_MANIFESTS = REPO_ROOT / "manifests" / "vpa"
POLICY = "objcount-guard-vpas"


@pytest.fixture(scope="module")
def clients(control_plane: LocalControlPlane, admin_api: kubeapi.KubeClient) -> dict[str, kubeapi.KubeClient]:
    """VPA's CRDs as released, and our accounts with the shipped roles and bindings and the VPA guard,
    each as a client with its own token."""
    ensure_namespace(admin_api, NAMESPACE)  # before the CRDs: the probe VPA lives there
    crds = [o for o in vpa.release_objects(vpa.deploy_dir(), {}) if o["kind"] == "CustomResourceDefinition"]
    install_crds(admin_api, crds)
    wait_for(lambda: _served(admin_api), what="the VerticalPodAutoscaler CRD served")
    made = shipped_accounts(control_plane, admin_api, *kustomization_objects(VPA_MANIFESTS / "create"))
    wait_for(lambda: _guarded(admin_api, made["objcount-autoscaler"]), what="the VPA guard enforced")
    return made


def _served(admin: kubeapi.KubeClient) -> bool:
    try:
        admin.list_page(kubeapi.VPA, NAMESPACE)
    except kubeapi.ApiError:
        return False
    return True


def _guarded(admin: kubeapi.KubeClient, client: kubeapi.KubeClient) -> bool:
    """Whether the guard refuses a status write of ours to a VPA of the default recommender yet."""
    probe = a_vpa(f"root-reconciler-probe-{uuid.uuid4().hex[:6]}", recommender=None)
    admin.create(kubeapi.VPA, NAMESPACE, probe)
    try:
        client.patch(kubeapi.VPA, NAMESPACE, probe["metadata"]["name"], {"status": {}}, subresource="status")
    except kubeapi.ApiError as error:
        return POLICY in str(error)
    finally:
        admin.delete(kubeapi.VPA, NAMESPACE, probe["metadata"]["name"])
    return False


def a_vpa(deployment: str, recommender: str | None = "objcount", policy: JSON | None = None) -> JSON:
    """A VPA as a user writes one for a reconciler (its Deployment's name)."""
    spec: JSON = {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
        "updatePolicy": {"updateMode": "InPlaceOrRecreate", "minReplicas": 1},
    }
    if recommender is not None:
        spec["recommenders"] = [{"name": recommender}]
    if policy is not None:
        spec["resourcePolicy"] = {"containerPolicies": [{"containerName": "reconciler", **policy}]}
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": deployment, "namespace": NAMESPACE},
        "spec": spec,
    }


@pytest.fixture
def key(admin_api: kubeapi.KubeClient, clients: object) -> Iterator[RSyncKey]:
    """A RootSync's key and its reconciler Deployment, as the reconciler-manager writes it (no RootSync
    object is needed: the target writes only the VPA)."""
    key = RSyncKey("RootSync", NAMESPACE, f"vpa-{uuid.uuid4().hex[:8]}")
    admin_api.create(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_deployment(key))
    yield key
    for resource in (kubeapi.VPA, kubeapi.DEPLOYMENT):
        with contextlib.suppress(kubeapi.NotFound):
            admin_api.delete(resource, NAMESPACE, reconciler_name(key))


def entry_of(admin: kubeapi.KubeClient, key: RSyncKey) -> JSON:
    status = admin.get(kubeapi.VPA, NAMESPACE, reconciler_name(key)).get("status") or {}
    (entry,) = status["recommendation"]["containerRecommendations"]
    return cast(JSON, entry)


SIZE = Resources(300, 512, None, 640)


@pytest.mark.parametrize("identity", IDENTITIES)
def test_the_recommendation_of_a_users_vpa_naming_us_is_written_and_read_back(
    admin_api: kubeapi.KubeClient, clients: dict[str, kubeapi.KubeClient], key: RSyncKey, identity: str
) -> None:
    admin_api.create(kubeapi.VPA, NAMESPACE, a_vpa(reconciler_name(key)))
    target = VpaTarget(clients[identity])
    applied = target.apply(key, SIZE, None)
    assert (applied.resources, applied.restarted, applied.capped) == (SIZE, False, None)
    entry = entry_of(admin_api, key)
    assert entry["target"] == entry["lowerBound"] == entry["upperBound"] == {"cpu": "300m", "memory": "512Mi"}
    status = admin_api.get(kubeapi.VPA, NAMESPACE, reconciler_name(key))["status"]
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("RecommendationProvided", "True")]
    # Read back by a restarted service: the requests from the VPA, the limits from our applied annotation.
    view = RSyncView.of({"metadata": {"annotations": {APPLIED_ANNOTATION: resources_annotation(SIZE)}}})
    assert target.current(key, view, None) == SIZE
    assert target.current(key, RSyncView.of({"metadata": {}}), None) == Resources(300, 512)


def test_a_vpa_of_the_default_recommender_is_never_written(
    admin_api: kubeapi.KubeClient, clients: dict[str, kubeapi.KubeClient], key: RSyncKey
) -> None:
    admin_api.create(kubeapi.VPA, NAMESPACE, a_vpa(reconciler_name(key), recommender=None))
    with pytest.raises(WriteError) as refused:
        VpaTarget(clients["objcount-autoscaler"]).apply(key, SIZE, None)
    assert refused.value.reason == Reason.OWNED
    assert "follows recommender 'default'" in str(refused.value)
    assert not admin_api.get(kubeapi.VPA, NAMESPACE, reconciler_name(key)).get("status")
    # And were the service to try, the guard refuses it.
    with pytest.raises(kubeapi.ApiError) as guarded:
        clients["objcount-autoscaler"].patch(
            kubeapi.VPA, NAMESPACE, reconciler_name(key), {"status": {}}, subresource="status"
        )
    assert POLICY in str(guarded.value)
    assert "never the default recommender's" in str(guarded.value)


def test_the_policys_max_allowed_caps_what_is_written_and_says_so(
    admin_api: kubeapi.KubeClient, clients: dict[str, kubeapi.KubeClient], key: RSyncKey
) -> None:
    policy = {"maxAllowed": {"memory": "400Mi"}, "controlledResources": ["memory"]}
    admin_api.create(kubeapi.VPA, NAMESPACE, a_vpa(reconciler_name(key), policy=policy))
    applied = VpaTarget(clients["objcount-autoscaler"]).apply(key, SIZE, None)
    assert applied.resources == Resources(300, 400, None, 640)
    assert (
        applied.capped
        == f"VerticalPodAutoscaler {NAMESPACE}/{reconciler_name(key)}: memory lowered to maxAllowed"
    )
    entry = entry_of(admin_api, key)
    assert entry["target"] == {"memory": "400Mi"}
    assert entry["uncappedTarget"] == {"cpu": "300m", "memory": "512Mi"}


def test_without_a_vpa_one_is_made_only_when_asked_and_belongs_to_the_deployment(
    admin_api: kubeapi.KubeClient, clients: dict[str, kubeapi.KubeClient], key: RSyncKey
) -> None:
    client = clients["objcount-sidecar"]
    with pytest.raises(WriteError) as missing:
        VpaTarget(client).apply(key, SIZE, None)
    assert missing.value.reason == Reason.NOT_FOUND
    assert "OBJCOUNT_VPA_CREATE=true" in str(missing.value)
    VpaTarget(client, create=True).apply(key, SIZE, None)
    made = admin_api.get(kubeapi.VPA, NAMESPACE, reconciler_name(key))
    deployment = admin_api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
    assert made["spec"]["recommenders"] == [{"name": "objcount"}]
    assert [o["uid"] for o in made["metadata"]["ownerReferences"]] == [deployment["metadata"]["uid"]]
    assert entry_of(admin_api, key)["target"] == {"cpu": "300m", "memory": "512Mi"}


def test_our_identities_never_change_a_vpas_spec_nor_delete_one_nor_make_one_of_another_kind(
    admin_api: kubeapi.KubeClient, clients: dict[str, kubeapi.KubeClient], key: RSyncKey
) -> None:
    name = reconciler_name(key)
    admin_api.create(kubeapi.VPA, NAMESPACE, a_vpa(name))
    client = clients["objcount-autoscaler"]
    for write, verb in (
        (lambda: client.patch(kubeapi.VPA, NAMESPACE, name, {"spec": {"recommenders": []}}), "patch"),
        (lambda: client.delete(kubeapi.VPA, NAMESPACE, name), "delete"),
    ):
        with pytest.raises(kubeapi.Forbidden) as refused:
            write()
        assert f"cannot {verb}" in str(refused.value)
    for body, message in (
        (a_vpa("root-reconciler-other", recommender=None), "never the default recommender's"),
        (a_vpa("some-app"), "only VerticalPodAutoscalers of Config Sync's reconcilers"),
    ):
        with pytest.raises(kubeapi.ApiError) as guarded:
            client.create(kubeapi.VPA, NAMESPACE, body)
        assert POLICY in str(guarded.value)
        assert message in str(guarded.value)
    # The RootSync sidecars' identity writes no RepoSync reconciler's VPA.
    with pytest.raises(kubeapi.ApiError) as guarded:
        clients["objcount-sidecar"].create(kubeapi.VPA, NAMESPACE, a_vpa("ns-reconciler-team-a"))
    assert "may write only its own reconcilers" in str(guarded.value)
