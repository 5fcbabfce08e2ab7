"""The local control plane is a real API server, and it never leaks processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from controlplane import ControlPlaneError, LocalControlPlane
from controlplane.seed import resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import alive, wait_for


def test_status_merge_patch_touches_only_object_count(
    api: kubeapi.KubeClient, namespace: str, status_count_crds: None
) -> None:
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key))
    other_writer = {
        "status": {"sync": {"commit": "abc123"}, "conditions": [{"type": "Syncing", "status": "False"}]}
    }
    api.patch(kubeapi.ROOTSYNC, namespace, key.name, other_writer, subresource="status")

    ours = {"status": {"sync": {"objectCount": 42}}}
    api.patch(kubeapi.ROOTSYNC, namespace, key.name, ours, subresource="status")

    status = api.get(kubeapi.ROOTSYNC, namespace, key.name)["status"]
    assert status["sync"] == {"commit": "abc123", "objectCount": 42}
    assert status["conditions"] == [{"type": "Syncing", "status": "False"}]


def test_label_selector_watch_sees_only_labelled_resourcegroups(
    api: kubeapi.KubeClient, namespace: str
) -> None:
    mine = RSyncKey("RootSync", namespace, "mine")
    other = RSyncKey("RootSync", namespace, "other")
    selector = f"cli-utils.sigs.k8s.io/inventory-id={namespace}_mine"
    listed = orjson.loads(api.list_page(kubeapi.RESOURCEGROUP, namespace, label_selector=selector))
    events = api.watch(
        kubeapi.RESOURCEGROUP,
        namespace,
        resource_version=listed["metadata"]["resourceVersion"],
        label_selector=selector,
        server_timeout=30,
    )
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(other, 3))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(mine, 2))
    api.patch(kubeapi.RESOURCEGROUP, namespace, other.name, {"spec": {"resources": []}})
    api.patch(kubeapi.RESOURCEGROUP, namespace, mine.name, {"spec": {"resources": []}})

    seen = []
    for line in events:
        event = orjson.loads(line)
        if event["type"] == "BOOKMARK":
            continue
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 2:
            break
    events.close()
    assert seen == [("ADDED", "mine"), ("MODIFIED", "mine")]


def test_the_released_rsync_crd_drops_object_count(api: kubeapi.KubeClient, namespace: str) -> None:
    # Why the counts live in annotations: Config Sync v1.22.0's CRD has no such field.
    key = RSyncKey("RepoSync", namespace, "repo-sync")
    api.create(kubeapi.REPOSYNC, namespace, rsync(key))
    patch = {"status": {"sync": {"commit": "abc", "objectCount": 7}}}
    written = api.patch(kubeapi.REPOSYNC, namespace, key.name, patch, subresource="status")
    assert written["status"]["sync"] == {"commit": "abc"}
    assert api.get(kubeapi.REPOSYNC, namespace, key.name)["status"]["sync"] == {"commit": "abc"}


def test_failed_start_leaves_no_process(control_plane_bin_dir: Path) -> None:
    plane = LocalControlPlane(control_plane_bin_dir, extra_apiserver_args=["--no-such-flag=1"])
    with pytest.raises(ControlPlaneError, match="kube-apiserver exited"):
        plane.start()
    pids = plane.pids()
    plane.cleanup()
    assert len(pids) == 2, "both etcd and kube-apiserver were started before the failure"
    assert not [pid for pid in pids if alive(pid)]


def test_killed_parent_takes_its_control_plane_down(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import json, signal, sys
        from pathlib import Path
        from controlplane import LocalControlPlane
        plane = LocalControlPlane(Path({str(control_plane_bin_dir)!r}), work_dir=Path({str(tmp_path)!r}))
        plane.start()
        print(json.dumps(plane.pids()), flush=True)
        signal.pause()  # until the test kills this process
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": "."},
    )
    assert parent.stdout is not None
    pids = json.loads(parent.stdout.readline())
    assert all(alive(pid) for pid in pids)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=30, what="children to exit")
