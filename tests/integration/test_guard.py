"""What our identities can change, proven by the real kube-apiserver: the shipped RBAC and the shipped
admission policy (manifests/rbac/guard.yaml), with the tokens of our own ServiceAccounts
(config-management-system/objcount-autoscaler for cluster mode, objcount-sidecar for the sidecars), on
the default Config Sync release's CRDs (the bare API server; Config Sync itself runs under the guard in
every test on the real node, where the stack installs it).

Each refused write names what refused it: RBAC ("cannot ...") or the policy (its name and message)."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import yaml

from autoscaler.core.grants import reposync_grant
from autoscaler.core.resources import Resources
from autoscaler.kube import platform
from autoscaler.kube.targets import DeploymentTarget
from controlplane import LocalControlPlane
from controlplane.autoscaler_install import (
    CLUSTER_MANIFESTS,
    GUARD_MANIFEST,
    SIDECAR_MANIFESTS,
    kustomization_objects,
)
from controlplane.configsync_build import TESTED, build_configsync
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.resources import create_or_replace
from controlplane.rsyncs import reposync, rootsync
from controlplane.seed import ensure_namespace, manifests_in, reconciler_deployment
from inventory.core.ids import RSyncKey, reconciler_name, sidecar_account
from inventory.kube import kubeapi
from tests.helpers import wait_for

JSON = dict[str, Any]
POLICY = "objcount-guard-"  # each policy's name: objcount-guard-<resource>
POLICIES = [
    "objcount-guard-rootsyncs",
    "objcount-guard-reposyncs",
    "objcount-guard-deployments",
    "objcount-guard-pods",
]
IDENTITIES = ("objcount-autoscaler", "objcount-sidecar")  # the ones that write
WEBHOOK = "objcount-webhook"  # reads RSyncs only


@pytest.fixture(scope="module")
def shipped(control_plane: LocalControlPlane, admin_api: kubeapi.KubeClient) -> dict[str, kubeapi.KubeClient]:
    """The guard, and our ServiceAccounts with exactly the shipped roles and bindings (both installs,
    less the Deployment and the webhook, which these tests do not need), each as a client with its own
    token. On the bare API server: the guard matches only these accounts, which no other test uses."""
    clients = shipped_accounts(control_plane, admin_api)
    # A policy is enforced once the API server has loaded it: until then a refused write passes.
    wait_for(lambda: _guarded(admin_api, clients["objcount-autoscaler"]), what="the guard enforced")
    return clients


def shipped_accounts(
    control_plane: LocalControlPlane, admin_api: kubeapi.KubeClient, *more: JSON
) -> dict[str, kubeapi.KubeClient]:
    """Our accounts with the shipped roles and bindings of both installs (less the Deployments and the
    webhook configuration), the guard, and `more` objects; a client of each with its own token."""
    ensure_namespace(admin_api, NAMESPACE)
    running = ("Deployment", "MutatingWebhookConfiguration")
    objects = [
        *(o for o in kustomization_objects(CLUSTER_MANIFESTS) if o["kind"] not in running),
        *manifests_in(SIDECAR_MANIFESTS / "base" / "accounts.yaml"),
        *manifests_in(SIDECAR_MANIFESTS / "base" / "rbac-bindings.yaml"),
        *more,
    ]
    for item in objects:
        create_or_replace(admin_api, item)
    return {account: client_of(control_plane, account) for account in (*IDENTITIES, WEBHOOK)}


def _guarded(admin: kubeapi.KubeClient, client: kubeapi.KubeClient) -> bool:
    """Whether each of the four policies refuses a write of ours yet (a label on an RSync or a
    Deployment, a resize of a Pod that is not a reconciler)."""
    probe = f"probe-{uuid.uuid4().hex[:6]}"
    ensure_namespace(admin, PROBE_NAMESPACE)
    label = {"metadata": {"labels": {"probe": "x"}}}
    manager = {"app": "reconciler-manager"}
    probes: list[tuple[kubeapi.Resource, str, JSON, JSON, str | None]] = [
        (kubeapi.ROOTSYNC, NAMESPACE, rootsync(probe), label, None),
        (kubeapi.REPOSYNC, PROBE_NAMESPACE, reposync(PROBE_NAMESPACE, probe), label, None),
        (
            kubeapi.DEPLOYMENT,
            NAMESPACE,
            _named(reconciler_deployment(RSyncKey("RootSync", NAMESPACE, probe), NAMESPACE), probe),
            label,
            None,
        ),
        (
            kubeapi.POD,
            NAMESPACE,
            _pod_body(probe, manager, ["manager"]),
            _resize(_pod_body(probe, manager, ["manager"]), "manager", "1Gi"),
            "resize",
        ),
    ]
    try:
        for resource, namespace, body, write, subresource in probes:
            admin.create(resource, namespace, body)
            try:
                client.patch(
                    resource,
                    namespace,
                    probe,
                    write,
                    subresource=subresource,
                    patch_type="strategic" if subresource else "merge",
                )
            except kubeapi.ApiError as error:
                if POLICY not in str(error):
                    return False
            else:
                return False
        return True
    finally:
        for resource, namespace, _, _, _ in probes:
            with contextlib.suppress(kubeapi.NotFound):
                admin.delete(resource, namespace, probe)


def _named(body: JSON, name: str) -> JSON:
    body["metadata"]["name"] = name
    return body


PROBE_NAMESPACE = "guard-probes"


WRITERS = ["cluster on a RootSync", "RootSync sidecar", "cluster on a RepoSync", "RepoSync sidecar"]


@pytest.fixture(params=WRITERS)
def writer(
    request: pytest.FixtureRequest,
    control_plane: LocalControlPlane,
    admin_api: kubeapi.KubeClient,
    shipped: dict[str, kubeapi.KubeClient],
) -> Iterator[tuple[kubeapi.KubeClient, RSyncKey]]:
    """An RSync as a user declares it, with a git-sync override entry of the user's, and a client of ours
    that may write it: the cluster Deployment's account on a RootSync or a RepoSync, the RootSync
    sidecars' account on a RootSync, a RepoSync's own sidecar account (granted as the README says) on
    that RepoSync. PLAYED BY US: no Config Sync runs on this API server; what it would do with the
    writes is not the question here."""
    suffix = uuid.uuid4().hex[:8]
    if "RootSync" in request.param:
        key = RSyncKey("RootSync", NAMESPACE, f"guard-{suffix}")
        body = rootsync(key.name)
    else:
        key = RSyncKey("RepoSync", f"team-{suffix}", "repo-sync")
        ensure_namespace(admin_api, key.namespace)
        body = reposync(key.namespace, key.name)
    body["spec"]["override"] = {"resources": [{"containerName": "git-sync", "memoryLimit": "64Mi"}]}
    admin_api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, body)
    if request.param == "RepoSync sidecar":
        for item in reposync_grant(key.namespace, key.name):
            create_or_replace(admin_api, item)
        client = client_of(control_plane, sidecar_account(key))
    else:
        client = shipped["objcount-sidecar" if request.param == "RootSync sidecar" else "objcount-autoscaler"]
    yield client, key
    with contextlib.suppress(kubeapi.NotFound):
        admin_api.delete(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)


def client_of(control_plane: LocalControlPlane, account: str) -> kubeapi.KubeClient:
    token = control_plane.issue_service_account_token(NAMESPACE, account)
    return kubeapi.KubeClient.connect(str(control_plane.kubeconfig_for_token(token, account)))


@pytest.fixture
def rsync(admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient]) -> Iterator[RSyncKey]:
    """A RootSync as a user declares it (for the writes RBAC refuses before the policy sees them)."""
    key = RSyncKey("RootSync", NAMESPACE, f"guard-{uuid.uuid4().hex[:8]}")
    admin_api.create(kubeapi.ROOTSYNC, key.namespace, rootsync(key.name))
    yield key
    with contextlib.suppress(kubeapi.NotFound):
        admin_api.delete(kubeapi.ROOTSYNC, key.namespace, key.name)


def pod(admin_api: kubeapi.KubeClient, labels: dict[str, str], containers: list[str]) -> JSON:
    """A Pod object (PLAYED BY US: nothing runs it on this API server; a resize is an API write all the
    same), each container with 100Mi."""
    return admin_api.create(
        kubeapi.POD, NAMESPACE, _pod_body(f"pod-{uuid.uuid4().hex[:8]}", labels, containers)
    )


def _pod_body(name: str, labels: dict[str, str], containers: list[str]) -> JSON:
    resources = {"requests": {"memory": "100Mi"}, "limits": {"memory": "100Mi"}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": n, "image": n, "resources": resources} for n in containers]},
    }


RECONCILER_LABELS = {"app": "reconciler", "configsync.gke.io/deployment-name": "root-reconciler-guard"}


def refused_by_policy(write: Any, message: str) -> None:
    with pytest.raises(kubeapi.ApiError) as refused:
        write()
    text = str(refused.value)
    assert POLICY in text, text
    assert message in text, text


def refused_by_rbac(write: Any, verb: str) -> None:
    with pytest.raises(kubeapi.Forbidden) as refused:
        write()
    text = str(refused.value)
    assert f"cannot {verb}" in text, text
    assert POLICY not in text, text


def patch_rsync(client: kubeapi.KubeClient, key: RSyncKey, patch: JSON) -> Any:
    return lambda: client.patch(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, patch)


# ----- allowed ---------------------------------------------------------------------------------------
def test_our_identities_write_the_reconciler_entry_and_our_annotations(
    writer: tuple[kubeapi.KubeClient, RSyncKey],
) -> None:
    client, key = writer
    theirs = {"containerName": "git-sync", "memoryLimit": "64Mi"}
    ours = {"containerName": "reconciler", "memoryRequest": "256Mi", "memoryLimit": "256Mi"}
    patch = {
        "metadata": {"annotations": {"objcount.dev/recommended-resources": "256Mi"}},
        "spec": {"override": {"resources": [theirs, ours]}},
    }
    body = client.patch(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, patch)
    assert body["spec"]["override"]["resources"] == [theirs, ours]
    assert body["metadata"]["annotations"]["objcount.dev/recommended-resources"] == "256Mi"


@pytest.mark.parametrize("identity", IDENTITIES)
def test_our_identities_resize_the_reconciler_container_of_a_reconciler_pod(
    admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient], identity: str
) -> None:
    reconciler_pod = pod(admin_api, RECONCILER_LABELS, ["reconciler", "git-sync"])
    body = resizing(shipped[identity], reconciler_pod, "reconciler", "300Mi")()
    reconciler = next(c for c in body["spec"]["containers"] if c["name"] == "reconciler")
    assert reconciler["resources"]["limits"]["memory"] == "300Mi"


def resizing(client: kubeapi.KubeClient, pod: JSON, container: str, memory: str) -> Callable[[], JSON]:
    """A `pods/resize` of one container of `pod` to `memory` (request and limit), by `client`."""
    return lambda: client.patch(
        kubeapi.POD,
        NAMESPACE,
        pod["metadata"]["name"],
        _resize(pod, container, memory),
        subresource="resize",
        patch_type="strategic",
    )


def _resize(pod: JSON, container: str, memory: str) -> JSON:
    current = next(c for c in pod["spec"]["containers"] if c["name"] == container)
    resources = {
        "requests": {**(current.get("resources") or {}).get("requests", {}), "memory": memory},
        "limits": {**(current.get("resources") or {}).get("limits", {}), "memory": memory},
    }
    return {"spec": {"containers": [{"name": container, "resources": resources}]}}


# ----- refused by the policy -------------------------------------------------------------------------
def test_changing_spec_git_repo_is_refused(writer: tuple[kubeapi.KubeClient, RSyncKey]) -> None:
    patch = {"spec": {"git": {"repo": "https://attacker.example/repo"}}}
    refused_by_policy(patch_rsync(*writer, patch), "may not change an RSync's source")


def test_changing_spec_source_type_is_refused(writer: tuple[kubeapi.KubeClient, RSyncKey]) -> None:
    refused_by_policy(
        patch_rsync(*writer, {"spec": {"sourceType": "helm"}}), "may not change an RSync's source"
    )


def test_turning_monitoring_off_is_refused(writer: tuple[kubeapi.KubeClient, RSyncKey]) -> None:
    # Config Sync v1.25's field: false takes the otel-agent, and the RSync's metrics, away.
    patch = {"spec": {"monitoring": {"enabled": False}}}
    refused_by_policy(patch_rsync(*writer, patch), "may not change an RSync's spec.monitoring")


# RepoSyncs have no roleRefs (the API server drops the field): RootSyncs only.
@pytest.mark.parametrize("writer", [w for w in WRITERS if "RootSync" in w], indirect=True)
def test_changing_spec_override_role_refs_is_refused(writer: tuple[kubeapi.KubeClient, RSyncKey]) -> None:
    patch = {"spec": {"override": {"roleRefs": [{"kind": "ClusterRole", "name": "cluster-admin"}]}}}
    refused_by_policy(patch_rsync(*writer, patch), "only spec.override.resources")


def test_changing_another_containers_override_entry_is_refused(
    writer: tuple[kubeapi.KubeClient, RSyncKey],
) -> None:
    patch = {"spec": {"override": {"resources": [{"containerName": "git-sync", "memoryLimit": "1Gi"}]}}}
    refused_by_policy(patch_rsync(*writer, patch), "only the reconciler entry")


def test_changing_a_label_or_an_annotation_not_ours_is_refused(
    writer: tuple[kubeapi.KubeClient, RSyncKey],
) -> None:
    for metadata in (
        {"labels": {"team": "attacker"}},
        {"annotations": {"configsync.gke.io/deletion-propagation-policy": "Foreground"}},
    ):
        refused_by_policy(patch_rsync(*writer, {"metadata": metadata}), "only objcount.dev/* annotations")


def test_changing_another_managers_applied_fields_is_refused(
    admin_api: kubeapi.KubeClient, writer: tuple[kubeapi.KubeClient, RSyncKey]
) -> None:
    """An applier's next server-side apply deletes the fields it owns but no longer declares: handing it
    `spec.override.roleRefs` (which a user set by hand) would make it delete them."""
    client, key = writer
    resource = kubeapi.RSYNC_RESOURCES[key.kind]
    declared = {"apiVersion": "configsync.gke.io/v1beta1", "kind": key.kind, "metadata": {"name": key.name}}
    declared["spec"] = {"git": admin_api.get(resource, key.namespace, key.name)["spec"]["git"]}  # as it is
    admin_api.patch(
        resource, key.namespace, key.name, declared, patch_type="apply", field_manager="gitops", force=True
    )
    managed = admin_api.get(resource, key.namespace, key.name)["metadata"]["managedFields"]
    applier = next(m for m in managed if m["manager"] == "gitops" and m["operation"] == "Apply")
    applier["fieldsV1"]["f:spec"]["f:override"] = {"f:roleRefs": {}}
    refused_by_policy(
        patch_rsync(client, key, {"metadata": {"managedFields": managed}}), "not others' applied fields"
    )


def test_resizing_a_pod_that_is_not_a_reconciler_is_refused(
    admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient]
) -> None:
    manager = pod(admin_api, {"app": "reconciler-manager"}, ["reconciler-manager"])
    write = resizing(shipped["objcount-autoscaler"], manager, "reconciler-manager", "1Gi")
    refused_by_policy(write, "only the reconciler container of a Config Sync reconciler Pod")


def test_resizing_another_container_of_a_reconciler_pod_is_refused(
    admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient]
) -> None:
    reconciler_pod = pod(admin_api, RECONCILER_LABELS, ["reconciler", "git-sync"])
    write = resizing(shipped["objcount-sidecar"], reconciler_pod, "git-sync", "1Gi")
    refused_by_policy(write, "only the reconciler container of a Config Sync reconciler Pod")


# ----- Deployments (the `deployment` target) -------------------------------------------------------------
@pytest.fixture
def deployment(admin_api: kubeapi.KubeClient, shipped: object) -> Iterator[RSyncKey]:
    """A reconciler Deployment nobody else manages (what the `deployment` target is for), created by
    the admin; PLAYED BY US: no controller runs it on this API server."""
    key = RSyncKey("RootSync", NAMESPACE, f"guard-{uuid.uuid4().hex[:8]}")
    admin_api.create(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_deployment(key, NAMESPACE))
    yield key
    admin_api.delete(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))


@pytest.mark.parametrize("identity", IDENTITIES)
def test_our_identities_apply_the_reconciler_resources_to_a_deployment(
    shipped: dict[str, kubeapi.KubeClient], deployment: RSyncKey, identity: str
) -> None:
    size = Resources(300, 300, 300, 300)
    assert (
        DeploymentTarget(shipped[identity], namespace=NAMESPACE).apply(deployment, size, None).resources
        == size
    )


@pytest.mark.parametrize(
    ("what", "change"),
    [
        (
            "the reconciler's image",
            {"containers": [{"name": "reconciler", "image": "attacker.example/image"}]},
        ),
        ("the reconciler's command", {"containers": [{"name": "reconciler", "command": ["/bin/sh"]}]}),
        (
            "another container's resources",
            {"containers": [{"name": "git-sync", "resources": {"limits": {"memory": "1Gi"}}}]},
        ),
        ("a new container", {"containers": [{"name": "miner", "image": "attacker.example/miner"}]}),
        ("the ServiceAccount", {"serviceAccountName": "default"}),
        ("the volumes", {"volumes": [{"name": "host", "hostPath": {"path": "/"}}]}),
    ],
)
def test_changing_anything_else_in_a_deployment_is_refused(
    shipped: dict[str, kubeapi.KubeClient], deployment: RSyncKey, what: str, change: JSON
) -> None:
    patch = {"spec": {"template": {"spec": change}}}
    write = lambda: shipped["objcount-autoscaler"].patch(  # noqa: E731
        kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(deployment), patch, patch_type="strategic"
    )
    refused_by_policy(write, "only the reconciler container's resources in a Deployment")


def test_the_guard_names_every_field_of_a_deployment_the_api_server_serves(
    admin_api: kubeapi.KubeClient,
) -> None:
    """A Deployment, PodSpec or Container field the policy does not compare would be writable by our
    identities (read from the API server's own OpenAPI schema)."""
    text = policy_text("objcount-guard-deployments")
    schemas = admin_api.request_json("GET", "/openapi/v3/apis/apps/v1")["components"]["schemas"]

    def fields(name: str) -> list[str]:
        return sorted(schemas[f"io.k8s.api.{name}"]["properties"])

    for field in fields("apps.v1.DeploymentSpec"):
        if field != "template":
            assert f"object.spec.?{field} == oldObject.spec.?{field}" in text, field
    for field in fields("core.v1.PodSpec"):
        if field not in ("containers", "overhead"):  # overhead: see guard.yaml
            compared = f"object.spec.template.spec.?{field} == oldObject.spec.template.spec.?{field}"
            # A field newer than the floor release is read untyped (its schema there lacks it).
            untyped = f"dyn(object.spec.template.spec).?{field} == dyn(oldObject.spec.template.spec).?{field}"
            assert compared in text or untyped in text, field
    for field in fields("core.v1.Container"):
        if field not in ("resources", "name"):
            assert f"o.?{field} == c.?{field}" in text, field


# ----- a RepoSync's sidecar: its own RepoSync only ------------------------------------------------------
@pytest.fixture
def tenants(
    control_plane: LocalControlPlane, admin_api: kubeapi.KubeClient, shipped: object
) -> Iterator[JSON]:
    """Two tenants' RepoSyncs, the first granted as the README says (`objcount grant-reposync`), and a
    client with the token of its sidecar's account."""
    namespaces = [f"team-{uuid.uuid4().hex[:6]}" for _ in range(2)]
    keys = [RSyncKey("RepoSync", n, "repo-sync") for n in namespaces]
    for key in keys:
        ensure_namespace(admin_api, key.namespace)
        admin_api.create(kubeapi.REPOSYNC, key.namespace, reposync(key.namespace, key.name))
    for item in reposync_grant(keys[0].namespace, keys[0].name):
        create_or_replace(admin_api, item)
    yield {"own": keys[0], "other": keys[1], "client": client_of(control_plane, sidecar_account(keys[0]))}
    for key in keys:
        admin_api.delete(kubeapi.NAMESPACE, None, key.namespace)


def test_a_reposync_sidecar_writes_its_own_reposync_and_watches_it_by_name(tenants: JSON) -> None:
    own: RSyncKey = tenants["own"]
    client: kubeapi.KubeClient = tenants["client"]
    entry = {"containerName": "reconciler", "memoryRequest": "256Mi", "memoryLimit": "256Mi"}
    body = client.patch(
        kubeapi.REPOSYNC, own.namespace, own.name, {"spec": {"override": {"resources": [entry]}}}
    )
    assert body["spec"]["override"]["resources"] == [entry]
    listed = client.list_page(kubeapi.REPOSYNC, own.namespace, field_selector=f"metadata.name={own.name}")
    assert [i["metadata"]["name"] for i in orjson.loads(listed)["items"]] == [own.name]
    client.list_page(kubeapi.RESOURCEGROUP, own.namespace, field_selector=f"metadata.name={own.name}")
    # Without the name, a list is a read of every RepoSync of the namespace: refused.
    refused_by_rbac(lambda: client.list_page(kubeapi.REPOSYNC, own.namespace), "list")


def test_writing_another_namespaces_reposync_from_a_reposync_sidecar_is_refused(tenants: JSON) -> None:
    other: RSyncKey = tenants["other"]
    entry = {"containerName": "reconciler", "memoryRequest": "8Mi", "memoryLimit": "8Mi"}
    write = lambda: tenants["client"].patch(  # noqa: E731
        kubeapi.REPOSYNC, other.namespace, other.name, {"spec": {"override": {"resources": [entry]}}}
    )
    refused_by_rbac(write, "patch")
    refused_by_rbac(lambda: tenants["client"].get(kubeapi.REPOSYNC, other.namespace, other.name), "get")


def test_writing_a_rootsync_from_a_reposync_sidecar_is_refused(tenants: JSON, rsync: RSyncKey) -> None:
    patch = {"metadata": {"annotations": {"objcount.dev/recommended-resources": "x"}}}
    refused_by_rbac(patch_rsync(tenants["client"], rsync, patch), "patch")


def test_a_reposync_sidecar_resizes_only_its_own_reconciler(
    admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient], tenants: JSON
) -> None:
    client: kubeapi.KubeClient = tenants["client"]

    def resize(deployment_name: str) -> Any:
        target = pod(
            admin_api,
            {"app": "reconciler", "configsync.gke.io/deployment-name": deployment_name},
            ["reconciler"],
        )
        return resizing(client, target, "reconciler", "300Mi")

    own = resize(reconciler_name(tenants["own"]))()
    assert own["spec"]["containers"][0]["resources"]["limits"]["memory"] == "300Mi"
    for others in (RECONCILER_LABELS["configsync.gke.io/deployment-name"], reconciler_name(tenants["other"])):
        refused_by_policy(resize(others), "may write only its own reconcilers")


def test_a_reposync_sidecar_writes_only_its_own_reconciler_deployment(
    admin_api: kubeapi.KubeClient, tenants: JSON, deployment: RSyncKey
) -> None:
    own: RSyncKey = tenants["own"]
    admin_api.create(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_deployment(own, NAMESPACE))
    target = DeploymentTarget(tenants["client"], namespace=NAMESPACE)
    size = Resources(300, 300, 300, 300)
    assert target.apply(own, size, None).resources == size
    patch = {"metadata": {"annotations": {"objcount.dev/applied-resources": "x"}}}
    root = lambda: tenants["client"].patch(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(deployment), patch)  # noqa: E731
    refused_by_policy(root, "may write only its own reconcilers")


def test_the_rootsync_sidecars_identity_resizes_no_reposync_reconciler(
    admin_api: kubeapi.KubeClient, shipped: dict[str, kubeapi.KubeClient], tenants: JSON
) -> None:
    labels = {"app": "reconciler", "configsync.gke.io/deployment-name": reconciler_name(tenants["own"])}
    target = pod(admin_api, labels, ["reconciler"])
    refused_by_policy(
        resizing(shipped["objcount-sidecar"], target, "reconciler", "300Mi"),
        "may write only its own reconcilers",
    )


def test_no_sidecar_reads_or_takes_a_lease(shipped: dict[str, kubeapi.KubeClient], tenants: JSON) -> None:
    """Leader election is cluster mode's (its own Lease): a sidecar that could update the cluster
    Deployment's Lease could stall it."""
    for client in (shipped["objcount-sidecar"], tenants["client"]):
        refused_by_rbac(lambda c=client: c.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler"), "get")
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "x"},
            "spec": {},
        }
        refused_by_rbac(lambda c=client, b=lease: c.create(kubeapi.LEASE, NAMESPACE, b), "create")


def test_the_webhook_reads_rsyncs_and_nothing_else(
    shipped: dict[str, kubeapi.KubeClient], rsync: RSyncKey
) -> None:
    """It sizes new reconciler Pods from a watch of RootSyncs and RepoSyncs (every namespace): it may list,
    watch and get them, and write nothing, not even them; no Pods, no Deployments, no Lease."""
    webhook = shipped[WEBHOOK]
    for resource in (kubeapi.ROOTSYNC, kubeapi.REPOSYNC):
        assert "items" in orjson.loads(webhook.list_page(resource, None))
    assert webhook.get(kubeapi.ROOTSYNC, rsync.namespace, rsync.name)["metadata"]["name"] == rsync.name
    annotate = {"metadata": {"annotations": {"objcount.dev/target": "in-place"}}}
    refused_by_rbac(lambda: webhook.patch(kubeapi.ROOTSYNC, rsync.namespace, rsync.name, annotate), "patch")
    for resource in (kubeapi.POD, kubeapi.DEPLOYMENT, kubeapi.LEASE):
        refused_by_rbac(lambda r=resource: webhook.list_page(r, NAMESPACE), "list")


# ----- refused by RBAC -------------------------------------------------------------------------------
def test_deleting_an_rsync_is_refused(writer: tuple[kubeapi.KubeClient, RSyncKey]) -> None:
    client, key = writer
    refused_by_rbac(
        lambda: client.delete(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name), "delete"
    )


@pytest.mark.parametrize("identity", IDENTITIES)
def test_creating_an_rsync_is_refused(shipped: dict[str, kubeapi.KubeClient], identity: str) -> None:
    body = rootsync(f"attacker-{uuid.uuid4().hex[:6]}")
    refused_by_rbac(lambda: shipped[identity].create(kubeapi.ROOTSYNC, NAMESPACE, body), "create")


@pytest.mark.parametrize(
    "resource",
    [kubeapi.Resource("", "v1", "secrets", "Secret"), kubeapi.Resource("", "v1", "configmaps", "ConfigMap")],
)
def test_reading_secrets_or_configmaps_is_refused(
    shipped: dict[str, kubeapi.KubeClient], tenants: JSON, resource: kubeapi.Resource
) -> None:
    """Every identity of ours, in the reconcilers' namespace, in the RepoSync's, and cluster-wide."""
    own: RSyncKey = tenants["own"]
    for client in (*shipped.values(), tenants["client"]):
        for namespace in (NAMESPACE, own.namespace, None):
            refused_by_rbac(lambda c=client, n=namespace: c.list_page(resource, n), "list")
        refused_by_rbac(lambda c=client: c.get(resource, NAMESPACE, f"{sidecar_account(own)}-token"), "get")


def test_creating_rbac_or_service_accounts_is_refused(
    shipped: dict[str, kubeapi.KubeClient], tenants: JSON
) -> None:
    """The service creates no RBAC and no ServiceAccount; none of our identities could."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "attacker"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "objcount-sidecar", "namespace": NAMESPACE}],
    }
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "attacker"}}
    rolebindings = kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
    accounts = kubeapi.Resource("", "v1", "serviceaccounts", "ServiceAccount")
    for client in (*shipped.values(), tenants["client"]):
        refused_by_rbac(lambda c=client: c.create(rolebindings, NAMESPACE, binding), "create")
        refused_by_rbac(lambda c=client: c.create(accounts, NAMESPACE, account), "create")


@pytest.mark.parametrize("identity", IDENTITIES)
def test_writing_the_status_is_refused(
    shipped: dict[str, kubeapi.KubeClient], rsync: RSyncKey, identity: str
) -> None:
    patch = {"status": {"sync": {"commit": "0" * 40}}}
    write = lambda: shipped[identity].patch(  # noqa: E731
        kubeapi.ROOTSYNC, rsync.namespace, rsync.name, patch, subresource="status"
    )
    refused_by_rbac(write, "patch")


# ----- the policy itself -----------------------------------------------------------------------------
def policy_text(name: str) -> str:
    """The expressions of one of the shipped policies."""
    (policy,) = [
        p
        for p in manifests_in(GUARD_MANIFEST)
        if p["metadata"]["name"] == name and "validations" in p["spec"]
    ]
    return "\n".join(v["expression"] for v in policy["spec"]["validations"])


@pytest.mark.parametrize("release", TESTED)
def test_the_guard_names_every_field_of_the_pinned_rsync_crds(release: str) -> None:
    """A spec or spec.override field the policy does not compare would be writable by our identities: the
    CRDs of every tested Config Sync release (v1.22.0's fields are all in v1.24.3's). A field only newer
    releases have is read through dyn(), so the policy type-checks against the older CRDs too."""
    build = build_configsync(release)
    for name, plural in (("rootsync-crd.yaml", "rootsyncs"), ("reposync-crd.yaml", "reposyncs")):
        text = policy_text(f"objcount-guard-{plural}")
        crd = yaml.safe_load((build.manifests / name).read_text())
        for version in crd["spec"]["versions"]:
            spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
            for field in spec:
                if field != "override":
                    typed = f"object.?spec.?{field} == oldObject.?spec.?{field}"
                    untyped = f"dyn(object).?spec.?{field} == dyn(oldObject).?spec.?{field}"
                    assert typed in text or untyped in text, (name, field)
            for field in spec["override"]["properties"]:
                if field != "resources":
                    compared = f"object.?spec.?override.?{field} == oldObject.?spec.?override.?{field}"
                    assert compared in text, (name, field)


@pytest.mark.both_versions
@pytest.mark.kubernetes_floor
def test_the_policies_match_only_our_identities_and_type_check(config_sync_on_node: NodeConfigSync) -> None:
    """On the Config Sync stack on the real node (installed with it), whose kube-controller-manager
    type-checks each policy against the schemas of the resources it matches (the RSync CRDs as released)."""
    api = config_sync_on_node.api
    assert api is not None
    resource = kubeapi.Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
    )
    for name in POLICIES:
        (condition,) = api.get(resource, None, name)["spec"]["matchConditions"]
        assert condition["expression"].strip() == (
            "request.userInfo.username.startsWith('system:serviceaccount:config-management-system:objcount-')"
        )
        status = wait_for(
            lambda n=name: (
                (s := api.get(resource, None, n).get("status") or {}) and "typeChecking" in s and s
            ),
            timeout=60,
            what=f"{name} type-checked",
        )
        assert not status["typeChecking"].get("expressionWarnings"), (name, status)


@pytest.mark.parametrize("identity", ["objcount-autoscaler", WEBHOOK])
def test_the_platform_is_detected_with_the_shipped_rbac_as_config_sync_tells_autopilot(
    shipped: dict[str, kubeapi.KubeClient], admin_api: kubeapi.KubeClient, identity: str
) -> None:
    """On the bare API server (no GKE build): Standard; once one of Autopilot's own webhook
    configurations exists, Autopilot (its stricter rules: the version does not say bursting). Read with
    the shipped rules: `get` of those two names and nothing else of admission."""
    client = shipped[identity]
    assert platform.detect(client)[0] == "standard"
    name = platform.AUTOPILOT_WEBHOOKS[1]
    admin_api.create(kubeapi.MUTATING_WEBHOOKS, None, {"metadata": {"name": name}, "webhooks": []})
    try:
        detected, why = platform.detect(client)
        assert detected == "autopilot"
        assert name in why
        refused_by_rbac(lambda: client.list_page(kubeapi.MUTATING_WEBHOOKS, None), "list")
    finally:
        admin_api.delete(kubeapi.MUTATING_WEBHOOKS, None, name)
