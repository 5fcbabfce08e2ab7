"""The real control plane, started once per test run, and a fresh namespace for every test."""

from __future__ import annotations

import contextlib
import copy
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import LocalControlPlane, build_binaries
from controlplane.autoscaler_install import uninstall_webhook
from controlplane.configsync_build import ConfigSyncBuild, build_configsync, build_reflectors
from controlplane.configsync_install import RSYNC_CRD_FILES, install_rsync_crds
from controlplane.configsync_node import NodeConfigSync
from controlplane.seed import JSON, ensure_namespace, install_crds, manifests_in, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import FIGURES, Service, alive, wait_for

CONTROL_PLANE_STARTUP = "local control plane: start to ready"


@pytest.fixture(scope="session")
def control_plane_bin_dir() -> Path:
    return build_binaries()


@pytest.fixture(scope="session")
def configsync_build() -> ConfigSyncBuild:
    return build_configsync()


@pytest.fixture(scope="session")
def control_plane(control_plane_bin_dir: Path) -> Iterator[LocalControlPlane]:
    # Config Sync's CRDs and our objects on a bare API server (no controller-manager); Config Sync itself
    # runs on the real node (the `config_sync_on_node` fixture).
    plane = LocalControlPlane(control_plane_bin_dir, controller_manager=False)
    plane.start()
    assert plane.startup_seconds is not None
    FIGURES.append((CONTROL_PLANE_STARTUP, plane.startup_seconds))
    try:
        yield plane
    finally:
        pids = plane.pids()
        plane.cleanup()
        still_running = [pid for pid in pids if alive(pid)]
        assert not still_running, f"control plane processes left running: {still_running}"


@pytest.fixture(scope="session")
def admin_api(
    control_plane: LocalControlPlane, configsync_build: ConfigSyncBuild
) -> Iterator[kubeapi.KubeClient]:
    api = kubeapi.KubeClient.connect(str(control_plane.kubeconfig))
    install_rsync_crds(api, configsync_build)
    yield api
    api.close()


@pytest.fixture
def api(admin_api: kubeapi.KubeClient) -> kubeapi.KubeClient:
    return admin_api


@pytest.fixture
def namespace(admin_api: kubeapi.KubeClient) -> str:
    """A fresh namespace per test: nothing garbage-collects on a bare API server."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    ensure_namespace(admin_api, name)
    return name


@pytest.fixture
def status_count_crds(admin_api: kubeapi.KubeClient, configsync_build: ConfigSyncBuild) -> Iterator[None]:
    """For one test, Config Sync's RSync CRDs with `status.source/sync.objectCount` added: what a future
    Config Sync defining them would serve (the `counts_in_status` setting). Then the released ones again.

    A CRD update reaches the API server's handlers asynchronously, so each swap is confirmed by probing
    that an objectCount write is (or is no longer) pruned.
    """
    released = [
        crd for name in RSYNC_CRD_FILES[:2] for crd in manifests_in(configsync_build.manifests / name)
    ]
    _swap_crds(admin_api, [with_object_count(crd) for crd in released], expect_pruned=False)
    try:
        yield
    finally:
        _swap_crds(admin_api, released, expect_pruned=True)


def with_object_count(crd: JSON) -> JSON:
    """The RSync CRD with an integer `objectCount` in `status.source` and `status.sync` of each version."""
    crd = copy.deepcopy(crd)
    for version in crd["spec"]["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
        for block in ("source", "sync"):
            status[block]["properties"]["objectCount"] = {"type": "integer", "minimum": 0}
    return crd


def _swap_crds(api: kubeapi.KubeClient, crds: list[JSON], *, expect_pruned: bool) -> None:
    install_crds(api, crds)
    probe_ns = "crd-probe"
    ensure_namespace(api, probe_ns)
    for resource, kind in ((kubeapi.ROOTSYNC, "RootSync"), (kubeapi.REPOSYNC, "RepoSync")):
        key = RSyncKey(kind, probe_ns, "probe")  # type: ignore[arg-type]
        with contextlib.suppress(kubeapi.Conflict):
            api.create(resource, probe_ns, rsync(key))

        def pruned_as_expected(resource: kubeapi.Resource = resource) -> bool:
            patch = {"status": {"sync": {"objectCount": 1}}}
            written = api.patch(resource, probe_ns, "probe", patch, subresource="status")
            return ("objectCount" not in written.get("status", {}).get("sync", {})) == expect_pruned

        wait_for(pruned_as_expected, timeout=60, what=f"{kind} CRD schema to take effect")


@pytest.fixture
def services() -> Iterator[list[Service]]:
    started: list[Service] = []
    yield started
    for service in started:
        service.stop(signal.SIGKILL)


@pytest.fixture
def node_sidecar(config_sync_on_node: NodeConfigSync, tmp_path: Path) -> Iterator[None]:
    """Our sidecar installed as the README says on the real node, its scale-down delay 10 s."""
    config_sync_on_node.install_sidecar(tmp_path / "certs", {"OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "10"})
    yield
    assert config_sync_on_node.api is not None
    uninstall_webhook(config_sync_on_node.api)


@pytest.fixture(scope="session")
def reflectors() -> Path:
    """client-go's informers with their defaults (controlplane/reflectors): the API-fault tests' yardstick."""
    return build_reflectors()
