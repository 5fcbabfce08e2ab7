"""Config Sync v1.22.0 on the real node: its reconciler-manager and reconcilers are Pods the kubelet runs
from images built here; a commit travels the real path (git daemon on the node's network, git-sync in the
reconciler Pod, the reconciler applies it). git-sync and the otel collector are stand-ins (see
controlplane.images); everything else is Config Sync's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.configsync import (
    NAMESPACE,
    NodeConfigSync,
    build_configsync,
    configsync_node_images,
    synced,
)
from controlplane.stack import NodeStack, running_node_stack
from inventory import kubeapi
from inventory.ids import RSyncKey
from tests.helpers import wait_for

JSON = dict[str, Any]
ROOT = RSyncKey("RootSync", NAMESPACE, "root-sync")


@pytest.fixture(scope="module")
def config_sync_on_node() -> Iterator[NodeConfigSync]:
    build = build_configsync()
    with running_node_stack(configsync_node_images(build)) as stack:
        config_sync = NodeConfigSync(stack, build).start()
        try:
            wait_for(
                config_sync.reconciler_manager_running, timeout=120, what="the reconciler-manager Pod to run"
            )
            yield config_sync
        finally:
            config_sync.stop()


def configmaps(count: int, namespace: str = "apps") -> dict[str, str]:
    return {
        f"cm-{i}.yaml": json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": namespace},
                "data": {"i": str(i)},
            }
        )
        for i in range(count)
    }


def sandbox_pid(host_pid: int) -> int:
    status = Path(f"/proc/{host_pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[2])


def test_a_commit_travels_through_git_sync_to_the_real_reconciler(
    config_sync_on_node: NodeConfigSync,
) -> None:
    cs = config_sync_on_node
    assert cs.api is not None
    commit = cs.commit(ROOT, configmaps(20))
    cs.api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    rsync = wait_for(
        lambda: synced(r := cs.api.get(kubeapi.ROOTSYNC, NAMESPACE, ROOT.name), commit) and r,  # type: ignore[union-attr]
        timeout=180,
        what="the RootSync to sync the commit",
    )
    assert rsync["status"]["source"]["commit"] == commit
    assert (
        len(
            json.loads(cs.api.list_page(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), "apps"))[
                "items"
            ]
        )
        >= 20
    )


def test_every_container_of_the_reconciler_pod_is_containerds_in_the_kubelets_cgroup(
    config_sync_on_node: NodeConfigSync,
) -> None:
    cs = config_sync_on_node
    stack: NodeStack = cs.stack
    pods = wait_for(lambda: cs.pods("app=reconciler"), timeout=120, what="a reconciler Pod")
    pod = pods[0]
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert set(statuses) == {"reconciler", "git-sync", "otel-agent"}
    assert all(s["containerID"].startswith("containerd://") for s in statuses.values())
    tasks = {
        row.split()[0]: int(row.split()[1]) for row in stack.node.ctr("tasks", "ls").stdout.splitlines()[1:]
    }
    reconciler = statuses["reconciler"]["containerID"].removeprefix("containerd://")
    cgroup = stack.container_cgroup(reconciler)
    assert f"pod{pod['metadata']['uid']}" in str(cgroup)
    inside = [sandbox_pid(int(p)) for p in (cgroup / "cgroup.procs").read_text().split()]
    assert tasks[reconciler] in inside
    # The reconciler's own binary runs there (its command line, read from /proc).
    host_pids = (cgroup / "cgroup.procs").read_text().split()
    assert any(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] == b"/reconciler" for p in host_pids)
