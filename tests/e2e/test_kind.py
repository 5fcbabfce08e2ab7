"""kind end to end: build the image, load it, install the CRDs and the cluster-mode manifests, and watch
the service size a reconciler. Part of `make test` and `make e2e`; skipped, with the reason printed, only
where Docker or kind is missing, as on the development machines and CI (no container engine there)."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.core.annotations import annotation_counts
from controlplane.configsync_build import build_configsync
from controlplane.configsync_install import RSYNC_CRD_FILES
from controlplane.seed import reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from tests.helpers import size_aware_by_hand, wait_for

REPO = Path(__file__).resolve().parents[2]
CLUSTER = "objcount-e2e"
IMAGE = "objcount-autoscaler:0.1.0"


def _unavailable() -> str | None:
    for tool in ("docker", "kind", "kubectl"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no Docker engine is running (`docker info` failed)"
    return None


pytestmark = pytest.mark.skipif(_unavailable() is not None, reason=_unavailable() or "")


def run(*argv: str, stdin: str | None = None) -> str:
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 0, f"{' '.join(argv)}: {result.stderr}"
    return result.stdout


def kubectl(*argv: str, stdin: str | None = None) -> str:
    return run("kubectl", "--context", f"kind-{CLUSTER}", *argv, stdin=stdin)


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    run("docker", "build", "-t", IMAGE, ".")
    run("kind", "create", "cluster", "--name", CLUSTER, "--wait", "180s")
    try:
        run("kind", "load", "docker-image", IMAGE, "--name", CLUSTER)
        yield
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", CLUSTER], check=False)


def test_cluster_mode_sizes_a_reconciler_on_kind(cluster: None) -> None:
    # Config Sync's own CRDs, as released (we ship none).
    for name in RSYNC_CRD_FILES:
        kubectl("apply", "-f", str(build_configsync().manifests / name))
    kubectl(
        "wait", "--for=condition=Established", "crd/rootsyncs.configsync.gke.io", "crd/resourcegroups.kpt.dev"
    )
    kubectl("create", "namespace", "config-management-system")
    kubectl("apply", "-k", "manifests/cluster")
    key = RSyncKey("RootSync", "config-management-system", "root-sync")
    objects = [rsync(key), resourcegroup(key, 3000), reconciler_deployment(key)]
    kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(objects))
    kubectl(
        "-n",
        "config-management-system",
        "rollout",
        "status",
        "deployment/objcount-autoscaler",
        "--timeout=180s",
    )

    def recorded_size() -> tuple[dict[str, Any], dict[str, Any]] | None:
        body = json.loads(
            kubectl("-n", "config-management-system", "get", "rootsync", "root-sync", "-o", "json")
        )
        text = (body["metadata"].get("annotations") or {}).get("objcount.dev/applied-resources")
        return (body, json.loads(text)) if text else None

    body, size = wait_for(recorded_size, timeout=180, interval=2, what="the service to record the size")
    # The default (size-aware) preset with no source: 3,000 ConfigMaps in the inventory, 2 KiB assumed each,
    # on the resource types kind's API server serves (kubectl's listing: preferred versions, no subresources).
    # In place (the default) with no reconciler Pod: the size is recorded for the next Pod's admission,
    # nothing is written into the RSync.
    surface = len(kubectl("api-resources", "-o", "name").split())
    cpu, memory = size_aware_by_hand(configmaps=3000, others=0, kib=6000, api_resources=surface)
    assert size == {"requests": {"cpu": cpu, "memory": memory}}
    assert not (body["spec"].get("override") or {}).get("resources")
    assert annotation_counts(body).sync == 3000
