"""The README's installs and uninstalls, run verbatim with the real kubectl (built from the pinned
module) on the local real node, Config Sync v1.25.0 running there (and v1.24.3: both_versions): the
commands are read from the
README's own text, each block pinned here, so this fails if the README's commands change without this
test following. The only change is the one a user makes: a RepoSync's namespace in `objcount
grant-reposync NAMESPACE [NAME]`. The release files are those `make release` wrote (the `release`
fixture, in `dist/` as the README has them), naming by digest the image built from this checkout's
Dockerfile, which the suite loads into the node as a pull by digest would.

Every container of Config Sync's Pods is the real component (see controlplane.images)."""

from __future__ import annotations

import json
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest

from controlplane.autoscaler_install import SIDECAR_CONTAINER, install_guard
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.release import Release
from controlplane.seed import REPO_ROOT, configmaps_yaml
from controlplane.status_checks import pod_ready
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, Shell, legacy_count, size_aware_by_hand, wait_for
from tests.integration.on_node import (
    JSON,
    Size,
    applied,
    assert_sidecar_has_only_its_own_token,
    container_status,
    counts,
    finished,
    main_pid,
    metric,
    numbers,
    override,
    reconciler_resources,
    root_and_repo,
    root_and_repo_by_hand,
    rsync_of,
    runs_at,
    suffix,
)

README = REPO_ROOT / "README.md"
SYNC_TIMEOUT = 240.0

CERTIFICATE = """\
bash dist/objcount-certificate.sh ./objcount-certs               # a CA and the webhook's certificate
kubectl -n config-management-system create secret tls objcount-webhook-tls \\
  --cert ./objcount-certs/tls.crt --key ./objcount-certs/tls.key
"""
CLUSTER_INSTALL = """\
kubectl apply -f dist/objcount-cluster.yaml        # RBAC, the guard, the controller, the webhook
"""
SIDECAR_INSTALL = """\
kubectl apply -f dist/objcount-sidecar.yaml        # RBAC, the guard, accounts, the webhook, template
"""
TRUST = """\
kubectl patch mutatingwebhookconfiguration objcount-webhook --type=json -p \\
  "[{\\"op\\":\\"add\\",\\"path\\":\\"/webhooks/0/clientConfig/caBundle\\",\\"value\\":\\"$(base64 -w0 ./objcount-certs/ca.crt)\\"}]"
kubectl -n config-management-system rollout status deployment/objcount-webhook
"""
RESTART_RECONCILERS = "kubectl -n config-management-system delete pods -l app=reconciler"
GRANT_REPOSYNC = "objcount grant-reposync NAMESPACE [NAME] | kubectl apply -f -"
CLEAN = "objcount clean -A [--dry-run]"
CLUSTER_UNINSTALL = """\
kubectl delete -f dist/objcount-cluster.yaml --ignore-not-found
kubectl -n config-management-system delete lease objcount-autoscaler --ignore-not-found
kubectl -n config-management-system delete secret objcount-webhook-tls --ignore-not-found
"""
SIDECAR_UNINSTALL = """\
kubectl delete mutatingwebhookconfiguration objcount-webhook --ignore-not-found
kubectl -n config-management-system delete pods -l app=reconciler
objcount grant-reposync NAMESPACE [NAME] | kubectl delete --ignore-not-found -f -   # each granted
kubectl delete -f dist/objcount-sidecar.yaml --ignore-not-found
kubectl -n config-management-system delete secret objcount-webhook-tls --ignore-not-found
"""
CONTROLLER = "app.kubernetes.io/name=objcount-autoscaler"
WEBHOOK = "app.kubernetes.io/name=objcount-webhook"


def readme_block(pinned: str) -> str:
    """The README's fenced `sh` block that is exactly `pinned`."""
    assert f"```sh\n{pinned}```" in README.read_text(), (
        "the README's commands changed: update this test with them\n" + pinned
    )
    return pinned


def readme_inline(pinned: str) -> str:
    """A command the README's text gives inline (`...`), exactly `pinned`."""
    assert f"`{pinned}`" in README.read_text(), "the README's command changed: update this test\n" + pinned
    return pinned


@pytest.fixture
def guard_kept(config_sync_on_node: NodeConfigSync, shell: Shell) -> Iterator[None]:
    """After the test, both installs removed (again: a test that failed half way must not leave our
    controller or webhook to the next tests), and our admission policies back, which the uninstalls
    remove and under which the stack's other tests run Config Sync."""
    yield
    for block in (CLUSTER_UNINSTALL, SIDECAR_UNINSTALL):
        shell("\n".join(line for line in block.splitlines() if "NAMESPACE" not in line), check=False)
    assert config_sync_on_node.api is not None
    install_guard(config_sync_on_node.api)


def left_of(shell: Shell, release_file: str, *extra: str) -> str:
    """What of an install's objects (`kubectl get -f`) and of `extra` is still on the API server."""
    listed = shell(f"kubectl get -f {release_file} --ignore-not-found -o name")
    others = (
        shell(f"kubectl -n {NAMESPACE} get {' '.join(extra)} --ignore-not-found -o name") if extra else ""
    )
    return listed + others


def default_sizes(api: kubeapi.KubeClient, entries: dict[RSyncKey, tuple[int, int]]) -> dict[RSyncKey, Size]:
    """The shipped default (size-aware) in cluster mode, by hand: no source, each inventory entry priced by
    the kind it names (`entries`: ConfigMaps, Namespaces), 2 KiB assumed per entry."""
    surface = legacy_count(api)
    return {
        key: size_aware_by_hand(
            configmaps=n, others=0, named=namespaces, kib=2 * (n + namespaces), api_resources=surface
        )
        for key, (n, namespaces) in entries.items()
    }


def webhook_sized(cs: NodeConfigSync, api: kubeapi.KubeClient, key: RSyncKey) -> None:
    """Admission sizing: the RSync's reconciler Pod deleted, the next one is created at the size recorded
    on the RSync (its spec as admitted; the size did not change since), counted by our webhook."""
    recorded = applied(api, key)
    old = cast(JSON, cs.reconciler_pod(key))
    api.delete(kubeapi.POD, NAMESPACE, old["metadata"]["name"])
    new = wait_for(
        lambda: (p := cs.reconciler_pod(key)) and p["metadata"]["uid"] != old["metadata"]["uid"] and p,
        timeout=120,
        what=f"{key}'s next reconciler Pod",
    )
    assert numbers(reconciler_resources(new["spec"])) == numbers(recorded), "not sized at admission"
    webhooks = [p["metadata"]["name"] for p in cs.pods(WEBHOOK)]
    assert metric(api, webhooks, 'objcount_webhook_sizes_total{result="sized"}') >= 1


@pytest.mark.both_versions
@pytest.mark.kubernetes_floor
def test_the_readmes_cluster_install_sizes_in_place_hands_over_and_uninstalls(
    config_sync_on_node: NodeConfigSync,
    rsyncs: list[RSyncKey],
    shell: Shell,
    guard_kept: None,
    release: Release,
) -> None:
    cs = config_sync_on_node
    api = cs.api
    for block in (CERTIFICATE, CLUSTER_INSTALL, TRUST):
        shell(readme_block(block))
    ours = wait_for(
        lambda: ready if len(ready := [p for p in cs.pods(CONTROLLER) if pod_ready(p)]) == 2 else None,
        timeout=180,
        what="both controller Pods Ready (one the leader, the other a ready standby)",
    )
    assert {c["image"] for p in ours for c in p["spec"]["containers"]} == {release.image}
    assert {c["image"] for p in cs.pods(WEBHOOK) for c in p["spec"]["containers"]} == {release.image}
    root, repo, synced = root_and_repo(cs, rsyncs, "readme-cluster", grant_sidecar=False)
    sizes = default_sizes(api, {root: (40, 1), repo: (25, 0)})
    for key in (root, repo):
        wait_for(
            lambda k=key: finished(rsync_of(api, k), synced[k][0]), timeout=SYNC_TIMEOUT, what=f"{key} synced"
        )
        wait_for(
            lambda k=key: runs_at(cs, k, sizes[k]),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s reconciler resized in place to {sizes[key]}",
        )
        assert override(api, key) == {}, "nothing written into the RSync"
    webhook_sized(cs, api, root)
    # The CLI as a user installs it, the release's wheel in a clean virtualenv (README, "Install"): its
    # version is the project's, and `objcount status` shows each RSync at the size its reconciler runs at,
    # applied in place.
    cli = Path(shell("command -v objcount").strip()).parent
    imported = shell(f"{cli}/python -c 'import autoscaler; print(autoscaler.__file__)'").strip()
    assert Path(imported).is_relative_to(cli.parent), f"objcount runs {imported}, not the wheel's"
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    assert shell("objcount version").strip() == project["version"]

    def shown() -> dict[RSyncKey, tuple[str | None, str | None]]:
        records = json.loads(shell("objcount status -A -o json"))
        return {RSyncKey(r["kind"], r["namespace"], r["name"]): (r["applied"], r["target"]) for r in records}

    wanted = {key: ("/".join(sizes[key]), "in-place") for key in (root, repo)}
    wait_for(lambda: wanted.items() <= shown().items(), timeout=60, what="objcount status showing both sizes")

    # The leader's Pod deleted: it releases the Lease as it stops, and another replica takes it (the
    # standby, or the leader's replacement Pod if it asks first: CI saw both), decides the same sizes
    # (nothing lost) and does not apply them again (the same reconciler Pods, the same recorded sizes).
    leader = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"]["holderIdentity"]
    duration = float(api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"]["leaseDurationSeconds"])
    wait_for(lambda: runs_at(cs, root, sizes[root]), timeout=SYNC_TIMEOUT, what="root's next Pod at its size")
    before = {key: (applied(api, key), reconciler_uid(cs, key)) for key in (root, repo)}
    deleted = time.monotonic()
    api.delete(kubeapi.POD, NAMESPACE, leader)

    def new_leader() -> str | None:
        holder = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"].get("holderIdentity")
        running = {p["metadata"]["name"] for p in cs.pods(CONTROLLER) if pod_ready(p)}
        return holder if holder != leader and holder in running else None

    successor = wait_for(new_leader, timeout=3 * duration + 60, interval=0.2, what="another replica leading")
    FIGURES.append(
        (
            "cluster mode: the leader's Pod deleted to another replica holding the Lease",
            time.monotonic() - deleted,
        )
    )
    OBSERVED.append(
        "cluster mode handover: the Lease went to "
        + (
            "the standby"
            if successor in {p["metadata"]["name"] for p in ours}
            else "the leader's replacement Pod"
        )
    )
    unchanged = 'objcount_decisions_total{outcome="unchanged"}'
    wait_for(lambda: metric(api, [successor], unchanged) >= 2, timeout=120, what="the new leader's decisions")
    after = {key: (applied(api, key), reconciler_uid(cs, key)) for key in (root, repo)}
    assert after == before, "a size lost or applied twice at the handover"

    shell(readme_block(CLUSTER_UNINSTALL))
    wait_for(
        lambda: not cs.pods(CONTROLLER) and not cs.pods(WEBHOOK), timeout=120, what="no Pod of ours left"
    )
    assert not left_of(
        shell, "dist/objcount-cluster.yaml", "lease/objcount-autoscaler", "secret/objcount-webhook-tls"
    )
    # Config Sync goes on syncing, the reconciler at the size it runs; what stays on the RSync is our
    # annotations, which `objcount clean` removes (nothing was written into the override).
    commit = cs.commit(root, {"configmaps.yaml": configmaps_yaml(45, namespace=f"apps-{suffix()}")})
    wait_for(
        lambda: finished(rsync_of(api, root), commit),
        timeout=SYNC_TIMEOUT,
        what="a commit synced after the uninstall",
    )
    assert runs_at(cs, root, sizes[root])
    assert any(a.startswith("objcount.dev/") for a in rsync_of(api, root)["metadata"]["annotations"])
    shell(readme_inline(CLEAN).replace(" [--dry-run]", ""))
    for key in (root, repo):
        annotations = rsync_of(api, key)["metadata"].get("annotations") or {}
        assert not [a for a in annotations if a.startswith("objcount.dev/")], annotations
        assert override(api, key) == {}


def reconciler_uid(cs: NodeConfigSync, key: RSyncKey) -> str:
    return cast(str, cast(JSON, cs.reconciler_pod(key))["metadata"]["uid"])


@pytest.mark.both_versions
@pytest.mark.kubernetes_floor
def test_the_readmes_sidecar_install_injects_through_the_service_and_uninstalls(
    config_sync_on_node: NodeConfigSync,
    rsyncs: list[RSyncKey],
    shell: Shell,
    guard_kept: None,
    release: Release,
) -> None:
    cs = config_sync_on_node
    api = cs.api
    # Config Sync runs first: the install's last step restarts the reconcilers it finds.
    root, repo, synced = root_and_repo(cs, rsyncs, "readme-sidecar", grant_sidecar=False)
    for key in (root, repo):
        wait_for(
            lambda k=key: finished(rsync_of(api, k), synced[k][0]), timeout=SYNC_TIMEOUT, what=f"{key} synced"
        )
    started = time.monotonic()
    for block in (CERTIFICATE, SIDECAR_INSTALL, TRUST):
        shell(readme_block(block))
    shell(readme_inline(RESTART_RECONCILERS))
    shell(readme_inline(GRANT_REPOSYNC).replace("NAMESPACE [NAME]", repo.namespace))
    expected_counts, sizes = root_and_repo_by_hand(api, root, repo, synced)
    for key in (root, repo):
        wait_for(
            lambda k=key: counts(api, k) == expected_counts[k],
            timeout=300,
            what=f"{key} counted by its sidecar",
        )
        pod = wait_for(
            lambda k=key: ready_with_sidecar(cs, k, sizes[k]),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s reconciler Pod Ready with the sidecar, resized in place to {sizes[key]}",
        )
        status = container_status(pod, SIDECAR_CONTAINER)
        assert [c["image"] for c in pod["spec"]["containers"] if c["name"] == SIDECAR_CONTAINER] == [
            release.image
        ]
        account = "objcount-sidecar" if key.kind == "RootSync" else f"objcount-{reconciler_name(key)}"
        assert_sidecar_has_only_its_own_token(cs, pod, main_pid(cs.stack, status["containerID"]), account)
        assert override(api, key) == {}, "nothing written into the RSync"
    FIGURES.append(
        ("sidecar install (README) to both RSyncs sized by their sidecars", time.monotonic() - started)
    )
    webhooks = [p["metadata"]["name"] for p in cs.pods(WEBHOOK)]
    assert metric(api, webhooks, 'objcount_webhook_admissions_total{result="injected"}') >= 2
    webhook_sized(cs, api, repo)

    shell(readme_block(SIDECAR_UNINSTALL).replace("NAMESPACE [NAME]", repo.namespace))
    for key in (root, repo):
        wait_for(
            lambda k=key: (
                (pod := cs.reconciler_pod(k)) and SIDECAR_CONTAINER not in names(pod) and pod_ready(pod)
            ),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s reconciler Pod without the sidecar",
        )
    wait_for(lambda: not cs.pods(WEBHOOK), timeout=120, what="no webhook Pod left")
    assert not left_of(shell, "dist/objcount-sidecar.yaml", "secret/objcount-webhook-tls")
    assert not shell(
        f"objcount grant-reposync {repo.namespace} | kubectl get -f - --ignore-not-found -o name"
    )
    commit = cs.commit(repo, {"configmaps.yaml": configmaps_yaml(20, namespace=repo.namespace)})
    wait_for(
        lambda: finished(rsync_of(api, repo), commit),
        timeout=SYNC_TIMEOUT,
        what="a commit synced after the uninstall",
    )


def names(pod: JSON) -> list[str]:
    return [c["name"] for c in pod["spec"]["containers"]]


def ready_with_sidecar(cs: NodeConfigSync, key: RSyncKey, size: Size) -> JSON | None:
    """The RSync's reconciler Pod once it runs our sidecar, is Ready and its reconciler runs at `size`."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    if not pod or SIDECAR_CONTAINER not in names(pod) or not pod_ready(pod):
        return None
    return pod if runs_at(cs, key, size) else None
