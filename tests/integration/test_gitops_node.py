"""Our installs the way Config Sync users install add-ons: the release file committed into the root
repository a RootSync syncs (docs/install.md, "From your own repository"), on the real node, real Config
Sync (the default release), our image as `make release` names it (by the digest of the archive it wrote).

No registry is reachable here: the release's OCI archive is imported into the node's containerd and
given the names a pull by digest leaves there (`REPOSITORY:VERSION` and `REPOSITORY@sha256:...`), so the
kubelet finds the image the release file names. The RootSync is made by hand (as Config Sync's own
install makes `root-sync`); everything of ours comes from git, applied and pruned by its reconciler."""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
import yaml

from autoscaler.core.annotations import SOURCE_ANNOTATION
from controlplane.autoscaler_install import (
    WEBHOOK_CONFIGURATION,
    WEBHOOK_NAME,
    WEBHOOK_TLS_SECRET,
    install_guard,
)
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.release import CERTIFICATE_SCRIPT_FILE, Release
from controlplane.resources import RESOURCES, create_or_replace
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import RELEASE_REPOSITORY, Sampler, wait_for
from tests.integration.on_node import (
    JSON,
    applied,
    configmaps,
    container_status,
    finished,
    main_pid,
    numbers,
    objects_in,
    override,
    override_of,
    reconciler_memory_limit,
    reconciler_resources,
    rsync_of,
    running_size,
)

ROOT = RSyncKey("RootSync", NAMESPACE, "root-sync")
APPS = "platform-apps"
SYNC_TIMEOUT = 300.0
APPLIED = "objcount.dev/applied-resources"
TARGET = "objcount.dev/target"
HELD = "objcount.dev/held-by-owner"
SIDECAR = "objcount-autoscaler"  # the sidecar container's name (the shipped template)
CONTROLLER = "app.kubernetes.io/name=objcount-autoscaler"


def release_objects(release: Release, name: str) -> list[JSON]:
    return [o for o in yaml.safe_load_all(release.files[name].read_text()) if o]


def manifest_digest(archive: Path) -> str:
    """The digest of the manifest in an OCI archive, read here from its index and blob."""
    with tarfile.open(archive) as tar:
        index = json.load(cast("tarfile.ExFileObject", tar.extractfile("index.json")))
        (entry,) = index["manifests"]
        blob = cast("tarfile.ExFileObject", tar.extractfile(f"blobs/sha256/{entry['digest'].split(':')[1]}"))
        digest = "sha256:" + hashlib.sha256(blob.read()).hexdigest()
    assert digest == entry["digest"]
    return digest


@pytest.fixture(scope="module")
def root_repo(config_sync_on_node: NodeConfigSync) -> Iterator[dict[str, str]]:
    """The platform's root repository (20 ConfigMaps in their namespace), synced by the RootSync
    `root-sync`; the files a test commits go on top of these. Teardown: the RootSync deleted, and the
    admission guard, which the uninstall tests prune with our release, put back for the session's other
    tests."""
    cs = config_sync_on_node
    api = cs.api
    files = {"namespace.yaml": json.dumps(_namespace(APPS)), **configmaps(20, namespace=APPS)}
    start_root_sync(cs, cs.commit(ROOT, files))
    yield files
    delete_root_sync(cs)
    install_guard(api)


def start_root_sync(cs: NodeConfigSync, commit: str) -> None:
    """root-sync created by hand (as Config Sync's own install makes it), synced to `commit`."""
    api = cs.api
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    wait_for(lambda: finished(rsync_of(api, ROOT), commit), timeout=SYNC_TIMEOUT, what="root-sync to sync")


def delete_root_sync(cs: NodeConfigSync) -> None:
    """root-sync deleted (what it applied stays: Config Sync orphans it by default) and its reconciler
    gone."""
    api = cs.api
    with contextlib.suppress(kubeapi.NotFound):
        api.delete(kubeapi.ROOTSYNC, NAMESPACE, ROOT.name)
    wait_for(lambda: _gone(api, kubeapi.ROOTSYNC, ROOT.name), timeout=120, what="root-sync deleted")
    wait_for(lambda: cs.reconciler_pod(ROOT) is None, timeout=120, what="root-sync's reconciler gone")


def pruned_without_waiting_for_the_sync(
    cs: NodeConfigSync, files: dict[str, str | None], objects: list[JSON]
) -> None:
    """Commit the removal and wait until Config Sync has pruned `objects`. Not until root-sync reports
    the commit synced: its reconciler then stops its watch of each kind no longer declared, each at that
    watch's next bookmark, one after the other (seen here: about a minute per kind), and
    reports Syncing meanwhile (Config Sync's behaviour, with or without us; docs/install.md)."""
    api = cs.api
    commit = cs.commit(ROOT, files)
    wait_for(
        lambda: (rsync_of(api, ROOT).get("status") or {}).get("sync", {}).get("commit") == commit,
        timeout=SYNC_TIMEOUT,
        what=f"root-sync applying {commit[:12]}",
    )
    assert wait_for(lambda: not still_there(api, objects), timeout=120, what="our objects pruned")


def _namespace(name: str) -> JSON:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _gone(
    api: kubeapi.KubeClient, resource: kubeapi.Resource, name: str, namespace: str | None = NAMESPACE
) -> bool:
    try:
        api.get(resource, namespace, name)
    except kubeapi.NotFound:
        return True
    return False


def commit_and_sync(cs: NodeConfigSync, files: dict[str, str | None]) -> str:
    """Commit to the root repository and wait until root-sync has synced it; the commit."""
    api = cs.api
    commit = cs.commit(ROOT, files)
    wait_for(
        lambda: finished(rsync_of(api, ROOT), commit),
        timeout=SYNC_TIMEOUT,
        what=f"root-sync to sync {commit[:12]}",
    )
    return commit


def resource_of(item: JSON) -> kubeapi.Resource:
    return RESOURCES[item["kind"]]


def namespace_of(item: JSON) -> str | None:
    return cast("str | None", item["metadata"].get("namespace"))


def still_there(api: kubeapi.KubeClient, objects: list[JSON]) -> list[str]:
    """Those of `objects` the API server still has (none once Config Sync has pruned them)."""
    return [
        f"{o['kind']}/{o['metadata']['name']}"
        for o in objects
        if not _gone(api, resource_of(o), o["metadata"]["name"], namespace_of(o))
    ]


def all_present(api: kubeapi.KubeClient, objects: list[JSON]) -> bool:
    return len(still_there(api, objects)) == len(objects)


def sized_by_us(cs: NodeConfigSync, key: RSyncKey) -> JSON | None:
    """The size we recorded as applied in place on the RSync, once its reconciler runs at it (as the
    kubelet reports it, and in a memory cgroup of its limit, read from the cgroup the kubelet made) with
    nothing written into the RSync's override; None before."""
    api = cs.api
    rsync = rsync_of(api, key)
    annotations = rsync["metadata"].get("annotations") or {}
    text = annotations.get(APPLIED)
    if text is None or annotations.get(TARGET) != "in-place" or override_of(rsync):
        return None
    size = cast(JSON, json.loads(text))
    if running_size(cs, key) != numbers(size):
        return None
    if reconciler_memory_limit(cs, key) is not None or "limits" in size:  # the preset sets none
        return None
    return size


def webhook_certificate_by_hand(cs: NodeConfigSync, release: Release, certs: Path) -> tuple[JSON, str]:
    """What docs/install.md keeps out of git: the webhook's certificate made by the release's script,
    its TLS Secret created by hand; the Secret, and the CA to put into the webhook configuration."""
    api = cs.api
    subprocess.run(
        ["bash", str(release.files[CERTIFICATE_SCRIPT_FILE]), str(certs)], check=True, capture_output=True
    )
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": WEBHOOK_TLS_SECRET, "namespace": NAMESPACE},
        "data": {n: base64.b64encode((certs / n).read_bytes()).decode() for n in ("tls.crt", "tls.key")},
    }
    create_or_replace(api, secret)
    return secret, base64.b64encode((certs / "ca.crt").read_bytes()).decode()


def trust_webhook_by_hand(cs: NodeConfigSync, ca_bundle: str) -> None:
    """The CA into the webhook configuration Config Sync applied from git (a field git does not declare,
    so Config Sync leaves it), and the webhook's rollout waited for."""
    cs.stack.kubectl(
        "patch",
        "mutatingwebhookconfiguration",
        WEBHOOK_CONFIGURATION,
        "--type=json",
        "-p",
        json.dumps([{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": ca_bundle}]),
    )
    cs.stack.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{WEBHOOK_NAME}", "--timeout=100s")


def delete_pods(cs: NodeConfigSync, selector: str) -> set[str]:
    """Delete the Pods of `selector`; the names deleted."""
    names = {p["metadata"]["name"] for p in cs.pods(selector)}
    cs.stack.kubectl("delete", "pods", "-n", NAMESPACE, "-l", selector, "--wait=false")
    return names


def reconciler_pod_is_new(cs: NodeConfigSync, key: RSyncKey, old: set[str]) -> JSON | None:
    pod = cs.reconciler_pod(key)
    if pod is None or pod["metadata"]["name"] in old:
        return None
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return cast(JSON, pod) if statuses and all(s.get("ready") for s in statuses) else None


def test_the_release_files_name_our_image_by_the_digest_of_its_archive(release: Release) -> None:
    """Every container of ours in every release file, the sidecar's inside its template too, runs the
    archive's image by the digest of its manifest (read here from the archive)."""
    assert release.image == f"{RELEASE_REPOSITORY}@{manifest_digest(release.archive)}"
    for name in (
        "objcount-cluster.yaml",
        "objcount-cluster-cert-manager.yaml",
        "objcount-sidecar.yaml",
        "objcount-sidecar-cert-manager.yaml",
    ):
        objects = release_objects(release, name)
        containers = [
            c
            for o in objects
            if o["kind"] == "Deployment"
            for c in o["spec"]["template"]["spec"]["containers"]
        ]
        templates = [
            yaml.safe_load(o["data"]["sidecar.yaml"])["container"]
            for o in objects
            if o["kind"] == "ConfigMap" and "sidecar.yaml" in o.get("data", {})
        ]
        assert containers, name
        assert [c["image"] for c in containers + templates] == [release.image] * len(containers + templates)
        assert name.startswith("objcount-cluster") == (not templates), name
    assert release.files[CERTIFICATE_SCRIPT_FILE].read_text().startswith("#!/usr/bin/env bash")


DECLARED_HELD = RSyncKey("RootSync", NAMESPACE, "declared-held")
DECLARED_FREE = RSyncKey("RootSync", NAMESPACE, "declared-free")
GIT_OVERRIDE = {
    "containerName": "reconciler",
    "cpuRequest": "100m",
    "memoryRequest": "300Mi",
    "memoryLimit": "300Mi",
}


def declared_rootsyncs(cs: NodeConfigSync) -> str:
    """Two RootSyncs declared in the root repository (each of its own repository of 3 ConfigMaps): one
    declares the reconciler's resources in spec.override (Config Sync owns them: we must only
    recommend), the other does not (we size it, and Config Sync must not put anything back)."""
    documents = []
    for key in (DECLARED_HELD, DECLARED_FREE):
        namespace = f"{key.name}-apps"
        cs.commit(
            key, {"namespace.yaml": json.dumps(_namespace(namespace)), **configmaps(3, namespace=namespace)}
        )
        body = cs.rsync(key)
        if key == DECLARED_HELD:
            body["spec"]["override"] = {"resources": [GIT_OVERRIDE]}
        documents.append(body)
    return yaml.safe_dump_all(documents, sort_keys=False)


def test_gitops_install_of_the_cluster_release_sizes_the_reconciler_that_applies_it(
    config_sync_on_node: NodeConfigSync, release: Release, root_repo: dict[str, str], tmp_path: Path
) -> None:
    """objcount-cluster.yaml committed into the root repository, its webhook's certificate kept out of
    git: Config Sync applies it, our controller (the release's image, by digest) sizes root-sync's
    reconciler in place, the one that applied it, and the RootSyncs declared beside it by the owner
    rules; through a restart of that reconciler (its next Pod sized at admission by our webhook) and of
    our Pods, and a later commit Config Sync applies, nothing we recorded is put back or changed."""
    cs = config_sync_on_node
    api = cs.api
    objects = release_objects(release, "objcount-cluster.yaml")
    _, ca_bundle = webhook_certificate_by_hand(cs, release, tmp_path / "certs")
    commit_and_sync(
        cs,
        {
            "objcount-cluster.yaml": release.files["objcount-cluster.yaml"].read_text(),
            "declared.yaml": declared_rootsyncs(cs),
        },
    )
    assert all_present(api, objects)
    ours = wait_for(
        lambda: [
            p
            for p in cs.pods(CONTROLLER)
            if all(s.get("ready") for s in p["status"].get("containerStatuses") or [{}])
        ],
        timeout=180,
        what="our controller's Pods ready",
    )
    assert {c["image"] for p in ours for c in p["spec"]["containers"]} == {release.image}
    trust_webhook_by_hand(cs, ca_bundle)
    root_size = wait_for(
        lambda: sized_by_us(cs, ROOT), timeout=240, what="root-sync's reconciler sized by us"
    )
    free_size = wait_for(
        lambda: sized_by_us(cs, DECLARED_FREE), timeout=240, what="declared-free sized by us"
    )
    held = wait_for(
        lambda: (rsync_of(api, DECLARED_HELD)["metadata"].get("annotations") or {}).get(HELD),
        timeout=240,
        what="declared-held held by its owner",
    )
    # Said in full with what the API server holds of its writers (pytest shortens an assertion's message).
    # Three times (bc82ae5's and b10aa7b's cold runs, 2026-12-04's second) our controller called this
    # override someone else's: Config Sync's own update of the new RSync (adding its finalizers) had taken
    # the atomic override list from its apply's managed fields, which owners.py now reads as git's.
    expected = "spec.override is applied from git by Config Sync (its managed fields): change it there"
    if held != expected:
        managed = json.dumps(rsync_of(api, DECLARED_HELD)["metadata"].get("managedFields"), indent=1)
        log = cs.stack.kubectl("logs", "-n", NAMESPACE, "-l", CONTROLLER, "--tail=200", check=False).stdout
        pytest.fail(f"held: {held}\nexpected: {expected}\nmanagedFields now: {managed}\nour log:\n{log}")
    # That update writes the entry back with its unset CPU limit as "0"; the next apply puts git's back.
    wait_for(lambda: override(api, DECLARED_HELD) == GIT_OVERRIDE, timeout=120, what="git's override applied")

    # A restart of the reconciler that applied us, then of our Pods, then a commit Config Sync applies,
    # every size and override sampled throughout: never put back, never changed.
    sampler = Sampler(
        lambda: [applied(api, ROOT), applied(api, DECLARED_FREE), override(api, DECLARED_HELD)],
        interval=0.5,
        tolerate=(kubeapi.ApiError,),
    )
    old = delete_pods(cs, f"configsync.gke.io/deployment-name={reconciler_name(ROOT)}")
    new = wait_for(
        lambda: reconciler_pod_is_new(cs, ROOT, old), timeout=240, what="root-sync's new reconciler Pod"
    )
    assert numbers(reconciler_resources(new["spec"])) == numbers(root_size), "sized at admission"
    old_ours = delete_pods(cs, CONTROLLER)
    wait_for(
        lambda: len([p for p in cs.pods(CONTROLLER) if p["metadata"]["name"] not in old_ours]) == 2,
        timeout=180,
        what="our controller's new Pods",
    )
    lease = wait_for(
        lambda: (
            (api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"].get("holderIdentity") or "")
            not in old_ours
            and api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")
        ),
        timeout=180,
        what="a new Pod of ours leading",
    )
    assert lease
    commit_and_sync(cs, {"more.yaml": json.dumps(_configmap("one-more", APPS))})
    for key, size in ((ROOT, root_size), (DECLARED_FREE, free_size)):
        assert wait_for(lambda k=key: sized_by_us(cs, k), timeout=240, what=f"{key} still sized") == size
    seen = sampler.stop()
    assert seen
    assert all(sample == [root_size, free_size, GIT_OVERRIDE] for sample in seen), "a size changed"
    # The reconciler whose size git declares runs at that size: not resized in place either.
    assert running_size(cs, DECLARED_HELD) == numbers(
        {"requests": {"cpu": "100m", "memory": "300Mi"}, "limits": {"memory": "300Mi"}}
    )
    assert (rsync_of(api, DECLARED_HELD)["metadata"].get("annotations") or {}).get(HELD) == held
    assert all_present(api, objects)


def _configmap(name: str, namespace: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"a": "b"},
    }


def test_removing_the_cluster_release_from_the_repository_uninstalls_it(
    config_sync_on_node: NodeConfigSync, release: Release, root_repo: dict[str, str]
) -> None:
    """The file removed from git: Config Sync prunes every object of ours; what stays on purpose (docs):
    the Lease, the TLS Secret made by hand, and our annotations on the RSyncs we sized; nothing in their
    overrides (in place)."""
    cs = config_sync_on_node
    api = cs.api
    objects = release_objects(release, "objcount-cluster.yaml")
    sized = applied(api, ROOT)
    assert sized
    pruned_without_waiting_for_the_sync(cs, {"objcount-cluster.yaml": None, "declared.yaml": None}, objects)
    wait_for(lambda: not cs.pods(CONTROLLER), timeout=120, what="our Pods gone")
    assert api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")
    assert applied(api, ROOT) == sized
    assert override(api, ROOT) == {}
    api.delete(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")  # the README's uninstall, by hand
    api.delete(RESOURCES["Secret"], NAMESPACE, WEBHOOK_TLS_SECRET)
    # A new root-sync for the next tests, rather than waiting out the watch stops above.
    delete_root_sync(cs)
    start_root_sync(cs, cs.commit(ROOT, {}))


def test_gitops_install_of_the_sidecar_release_sizes_the_reconciler_that_applies_it(
    config_sync_on_node: NodeConfigSync, release: Release, root_repo: dict[str, str], tmp_path: Path
) -> None:
    """objcount-sidecar.yaml committed into the root repository, its certificate made by the release's
    script and kept out of git (the TLS Secret and the caBundle, by hand, as docs/install.md says):
    Config Sync applies it, root-sync's next reconciler Pod gets our sidecar (the release's image), which
    counts the source and sizes that reconciler; through a restart of it and of our sidecar and webhook,
    and a later commit Config Sync applies, the Secret and the caBundle stay and the size holds."""
    cs = config_sync_on_node
    api = cs.api
    secret, ca_bundle = webhook_certificate_by_hand(cs, release, tmp_path / "certs")
    objects = release_objects(release, "objcount-sidecar.yaml")
    files = {"objcount-sidecar.yaml": release.files["objcount-sidecar.yaml"].read_text()}
    commit_and_sync(cs, files)
    trust_webhook_by_hand(cs, ca_bundle)
    old = delete_pods(cs, "app=reconciler")
    pod = wait_for(
        lambda: reconciler_pod_is_new(cs, ROOT, old), timeout=240, what="root-sync's Pod with the sidecar"
    )
    sidecar = next((c for c in pod["spec"]["containers"] if c["name"] == SIDECAR), None)
    assert sidecar is not None
    assert sidecar["image"] == release.image
    # What the root repository holds now, counted here: its own files, more.yaml (committed by the
    # cluster test) and our release file.
    source = sum(objects_in(text) for text in root_repo.values()) + 1 + len(objects)
    wait_for(
        lambda: (
            (rsync_of(api, ROOT)["metadata"].get("annotations") or {}).get(SOURCE_ANNOTATION) == str(source)
        ),
        timeout=240,
        what=f"the sidecar's source count, {source}",
    )
    size = wait_for(lambda: sized_by_us(cs, ROOT), timeout=240, what="root-sync sized by the sidecar")

    # A restart of the reconciler that applied us, then of our sidecar (killed) and our webhook, then a
    # commit Config Sync applies, the size sampled throughout: never changed.
    sampler = Sampler(lambda: applied(api, ROOT), interval=0.5, tolerate=(kubeapi.ApiError,))
    old = delete_pods(cs, f"configsync.gke.io/deployment-name={reconciler_name(ROOT)}")
    pod = wait_for(lambda: reconciler_pod_is_new(cs, ROOT, old), timeout=240, what="root-sync's next Pod")
    status = next(s for s in pod["status"]["containerStatuses"] if s["name"] == SIDECAR)
    subprocess.run(["kill", "-KILL", str(main_pid(cs.stack, status["containerID"]))], check=True)
    wait_for(
        lambda: (
            (now := container_status(cast(JSON, cs.reconciler_pod(ROOT) or {}), SIDECAR)).get(
                "restartCount", 0
            )
            > status.get("restartCount", 0)
            and "running" in now.get("state", {})
        ),
        timeout=120,
        what="our sidecar restarted by the kubelet",
    )
    delete_pods(cs, f"app.kubernetes.io/name={WEBHOOK_NAME}")
    cs.stack.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{WEBHOOK_NAME}", "--timeout=100s")
    commit_and_sync(cs, {"later.yaml": json.dumps(_configmap("later", APPS))})
    assert wait_for(lambda: sized_by_us(cs, ROOT), timeout=240, what="root-sync still sized") == size
    seen = sampler.stop()
    assert seen
    assert all(sample == size for sample in seen), "the size changed"
    webhook = api.get(RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION)
    assert webhook["webhooks"][0]["clientConfig"].get("caBundle") == ca_bundle
    assert api.get(RESOURCES["Secret"], NAMESPACE, WEBHOOK_TLS_SECRET)["data"] == secret["data"]
    assert all_present(api, objects)


def test_removing_the_sidecar_release_from_the_repository_uninstalls_it(
    config_sync_on_node: NodeConfigSync, release: Release, root_repo: dict[str, str]
) -> None:
    """The file removed from git: Config Sync prunes every object of ours; the reconcilers restarted
    (docs) run without the sidecar. What stays on purpose: the TLS Secret made by hand (deleted by hand),
    our override and annotations."""
    cs = config_sync_on_node
    api = cs.api
    objects = release_objects(release, "objcount-sidecar.yaml")
    sized = applied(api, ROOT)
    pruned_without_waiting_for_the_sync(cs, {"objcount-sidecar.yaml": None}, objects)
    old = delete_pods(cs, "app=reconciler")
    pod = wait_for(
        lambda: reconciler_pod_is_new(cs, ROOT, old), timeout=240, what="root-sync's Pod without us, Ready"
    )
    assert SIDECAR not in [c["name"] for c in pod["spec"]["containers"]]
    assert applied(api, ROOT) == sized
    assert override(api, ROOT) == {}
    assert api.get(RESOURCES["Secret"], NAMESPACE, WEBHOOK_TLS_SECRET)
    api.delete(RESOURCES["Secret"], NAMESPACE, WEBHOOK_TLS_SECRET)  # the README's uninstall, by hand
