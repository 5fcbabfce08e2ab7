"""Faults on the real control plane: the service killed in the middle of a prune (the prototype's OOM-loop
scenario) restores its counts and does not lower the reconciler's limit."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from autoscaler.core.size_fields import resources_of
from autoscaler.service.controller import Controller, Scope
from controlplane import LocalControlPlane, running_control_plane
from controlplane.configsync_build import ConfigSyncBuild
from controlplane.configsync_install import install_rsync_crds
from controlplane.seed import (
    configmaps_yaml,
    reconciler_deployment,
    resourcegroup,
    rsync,
    write_commit,
)
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from inventory.kube.watch import WatchSettings
from inventory.source.source_watch import SourceLayout
from tests.helpers import FreezableProxy, Sampler, Service, wait_for
from tests.integration.test_inventory import (
    _metric,
    _never_lower,
    _record_counts,
    _recorded_counts,
    _start,
    sidecar,
)

__all__ = ["sidecar"]  # the fixture, shared with the inventory tests


def test_sigkill_in_the_middle_of_a_prune_never_lowers_the_counts_or_the_limit(
    api: kubeapi.KubeClient, namespace: str, control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    key = RSyncKey("RootSync", namespace, "root-sync")
    repo = tmp_path / "repo"
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key, sync_dir="config"))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 5000))
    api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace))
    write_commit(repo, "big", {"all.yaml": configmaps_yaml(5000)})
    env = {
        "OBJCOUNT_KUBECONFIG": str(control_plane.kubeconfig),
        "OBJCOUNT_RSYNC_NAME": key.name,
        "OBJCOUNT_RSYNC_NAMESPACE": namespace,
        "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
        "OBJCOUNT_TARGET": "deployment",
        "OBJCOUNT_SOURCE_ROOT": str(repo),
        "OBJCOUNT_PRESET": "fitted",  # count-only: the size worked out by hand from the count
    }
    big_mib = 1088  # fitted preset, 5,000 objects: 198 + 0.174 x 5000 = 1068 -> 1088 MiB

    def reconciler_memory() -> int | None:
        containers = api.get(kubeapi.DEPLOYMENT, namespace, reconciler_name(key))["spec"]["template"]["spec"][
            "containers"
        ]
        resources = resources_of(next(c for c in containers if c["name"] == "reconciler")["resources"])
        return None if resources is None else resources.memory_request_mib

    first = Service(env, tmp_path / "first.log")
    try:
        wait_for(lambda: reconciler_memory() == big_mib, timeout=60, what="sized for 5,000")
        # The new commit has 500 objects; the inventory still lists 5,000 until the prune is done.
        write_commit(repo, "small", {"all.yaml": configmaps_yaml(500)})
        wait_for(
            lambda: _recorded_counts(api, key) == ObjectCounts(500, 5000), what="counts during the prune"
        )
    finally:
        first.stop(signal.SIGKILL)

    sampler = Sampler(lambda: (_recorded_counts(api, key), reconciler_memory()), interval=0.05)
    second = Service(env, tmp_path / "second.log")
    try:
        wait_for(
            lambda: second.get("/readyz")[0] == 200,
            timeout=60,
            what="recovery: service SIGKILLed mid-prune ready again",
        )
        # max(source, sync) is still 5,000: the restored counts keep the size.
        wait_for(
            lambda: second.metric('objcount_decisions_total{outcome="unchanged"}') > 0, what="a decision"
        )
        seen = sampler.stop()
        # The prune completes: the lower size waits for the scale-down delay (10 minutes by default).
        api.patch(kubeapi.RESOURCEGROUP, namespace, key.name, resourcegroup(key, 500))
        wait_for(
            lambda: second.metric('objcount_decisions_total{outcome="postponed"}') > 0,
            what="a held scale-down",
        )
        assert reconciler_memory() == big_mib
        assert second.metric('objcount_decisions_total{outcome="scaled_down"}') == 0
    finally:
        assert second.stop(signal.SIGTERM) == 0
    for counts, memory in seen:
        assert counts == ObjectCounts(500, 5000), "a restart must not lower (or zero) a stored count"
        assert memory == big_mib, "a restart in the middle of a prune must not lower the limit"


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_a_control_plane_restart_loses_no_count_and_the_watch_catches_up(
    api: kubeapi.KubeClient,
    sidecar: tuple[RSyncKey, Path, list[Controller]],
    control_plane: LocalControlPlane,
    component: str,
) -> None:
    key, repo, controllers = sidecar
    _start(api, key, repo, controllers)
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 100), what="initial counts")
    sampler = _record_counts(api, key)
    (control_plane.restart_apiserver if component == "kube-apiserver" else control_plane.restart_etcd)()
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 260))
    wait_for(
        lambda: _recorded_counts(api, key) == ObjectCounts(42, 260),
        timeout=90,
        what=f"recovery: inventory change seen after a {component} restart",
    )
    _never_lower(sampler.stop(), ObjectCounts(42, 100))


def test_a_silent_watch_stream_is_reconnected(
    api: kubeapi.KubeClient,
    sidecar: tuple[RSyncKey, Path, list[Controller]],
    control_plane: LocalControlPlane,
    tmp_path: Path,
) -> None:
    key, repo, controllers = sidecar
    proxy = FreezableProxy(int(control_plane.server.rsplit(":", 1)[1]))
    proxied = kubeapi.KubeClient.connect(
        str(proxy.kubeconfig(control_plane.kubeconfig, tmp_path / "proxied"))
    )
    timeouts = _metric("objcount_watch_restarts_total", resource="resourcegroups", reason="timeout")
    silent = WatchSettings(server_timeout=300, inactivity_timeout=2, backoff_initial=0.05, backoff_max=0.5)
    controller = Controller(
        proxied, Scope.sidecar(key), source_layout=SourceLayout(repo, "config"), watch_settings=silent
    ).start()
    controllers.append(controller)
    try:
        wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 100), what="initial counts")
        proxy.flowing.clear()  # the connection stays open, but nothing arrives any more
        api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 333))
        wait_for(
            lambda: (
                _metric("objcount_watch_restarts_total", resource="resourcegroups", reason="timeout")
                > timeouts
            ),
            what="the silent stream to be noticed",
        )
        proxy.flowing.set()
        wait_for(
            lambda: _recorded_counts(api, key) == ObjectCounts(42, 333),
            timeout=60,
            what="recovery: inventory change seen after a silent stream",
        )
    finally:
        proxy.close()


def test_missing_crds_are_reported_and_the_service_recovers_once_installed(
    control_plane_bin_dir: Path, configsync_build: ConfigSyncBuild, tmp_path: Path
) -> None:
    with running_control_plane(control_plane_bin_dir, controller_manager=False) as bare:  # no CRDs
        env = {
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_KUBECONFIG": str(bare.kubeconfig),
            "OBJCOUNT_LEADER_ELECTION": "false",
        }
        service = Service(env, tmp_path / "service.log")
        try:
            wait_for(
                lambda: "install Config Sync (its CRDs" in service.log.read_text(),
                timeout=60,
                what="a clear error",
            )
            assert service.get("/readyz")[0] == 503
            install_rsync_crds(kubeapi.KubeClient.connect(str(bare.kubeconfig)), configsync_build)
            wait_for(
                lambda: service.get("/readyz")[0] == 200,
                timeout=90,
                what="recovery: ready once the CRDs exist",
            )
        finally:
            assert service.stop(signal.SIGTERM) == 0


def test_a_missing_permission_is_reported_not_silently_ignored(
    api: kubeapi.KubeClient, namespace: str, control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    # Everything the service needs except reading inventories.
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "partial"},
        "rules": [
            {
                "apiGroups": ["configsync.gke.io"],
                "resources": ["rootsyncs", "reposyncs"],
                "verbs": ["get", "list", "watch"],
            }
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "partial"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "partial"},
        "subjects": [{"kind": "ServiceAccount", "name": "partial", "namespace": namespace}],
    }
    api.create(kubeapi.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"), namespace, role)
    api.create(
        kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"), namespace, binding
    )
    token = control_plane.issue_service_account_token(namespace, "partial")
    env = {
        "OBJCOUNT_MODE": "cluster",
        "OBJCOUNT_WATCH_NAMESPACE": namespace,
        "OBJCOUNT_LEADER_ELECTION": "false",
        "OBJCOUNT_KUBECONFIG": str(control_plane.kubeconfig_for_token(token, f"partial-{namespace}")),
    }
    service = Service(env, tmp_path / "service.log")
    try:
        wait_for(
            lambda: "grant the rules in manifests/rbac" in service.log.read_text(),
            timeout=60,
            what="a clear error",
        )
        assert "resourcegroups" in service.log.read_text()
        assert service.get("/readyz")[0] == 503
        assert service.metric('objcount_watch_restarts_total{reason="error",resource="resourcegroups"}') > 0
    finally:
        assert service.stop(signal.SIGTERM) == 0


def _compacted(api: kubeapi.KubeClient, resource_version: str) -> bool:
    """Whether etcd has compacted `resource_version` away (an exact list at it is then 410 Gone)."""
    query = {"resourceVersion": resource_version, "resourceVersionMatch": "Exact", "limit": 1}
    try:
        api.request("GET", kubeapi.RESOURCEGROUP.path("default"), query=query)
    except kubeapi.Gone:
        return True
    return False


def test_expired_watches_410_are_relisted_and_lose_nothing(
    control_plane_bin_dir: Path, configsync_build: ConfigSyncBuild, tmp_path: Path
) -> None:
    # Without the watch cache, watches are served by etcd, whose history is compacted every few seconds:
    # resuming an interrupted watch then gets 410 Gone, as after a long disconnection in production.
    extra = ["--watch-cache=false", "--etcd-compaction-interval=2s"]
    with running_control_plane(
        control_plane_bin_dir, extra_apiserver_args=extra, controller_manager=False
    ) as plane:
        admin = kubeapi.KubeClient.connect(str(plane.kubeconfig))
        install_rsync_crds(admin, configsync_build)
        key = RSyncKey("RootSync", "default", "root-sync")
        admin.create(kubeapi.ROOTSYNC, "default", rsync(key))
        admin.create(kubeapi.RESOURCEGROUP, "default", resourcegroup(key, 10))
        proxy = FreezableProxy(int(plane.server.rsplit(":", 1)[1]))
        proxied = proxy.kubeconfig(plane.kubeconfig, tmp_path / "proxied")
        gone = _metric("objcount_watch_restarts_total", resource="resourcegroups", reason="gone")
        silent = WatchSettings(
            server_timeout=300, inactivity_timeout=2, backoff_initial=0.05, backoff_max=0.5
        )
        controller = Controller(
            kubeapi.KubeClient.connect(str(proxied)),
            Scope.cluster(namespace="default"),
            watch_settings=silent,
        ).start()
        try:
            for round_, count in enumerate((20, 30, 40), start=1):
                wait_for(lambda: controller.observed(key).sync is not None, what="synced")
                proxy.flowing.clear()
                written = admin.patch(kubeapi.RESOURCEGROUP, "default", key.name, resourcegroup(key, count))
                for i in range(20):  # history to compact
                    admin.patch(
                        kubeapi.ROOTSYNC,
                        "default",
                        key.name,
                        {"metadata": {"labels": {"r": f"{round_}-{i}"}}},
                    )
                # The server compacts every 2 s: wait until the update's revision is compacted away.
                wait_for(
                    lambda rv=written["metadata"]["resourceVersion"]: _compacted(admin, rv),
                    timeout=60,
                    what="etcd to compact the history",
                )
                proxy.flowing.set()
                wait_for(
                    lambda count=count: controller.observed(key).sync == count,
                    timeout=60,
                    what=f"recovery: relisted after 410 Gone, round {round_}",
                )
            assert (
                _metric("objcount_watch_restarts_total", resource="resourcegroups", reason="gone") >= gone + 3
            )
            wait_for(lambda: _recorded_counts(admin, key).sync == 40, what="the last count in the status")
        finally:
            controller.stop()
            proxy.close()
