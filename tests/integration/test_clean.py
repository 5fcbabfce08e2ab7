"""`objcount clean` on the real API server: after an uninstall of an install that wrote the RSync
override, it removes the reconciler entry we wrote and our annotations, and nothing else; `--dry-run`
removes nothing."""

from __future__ import annotations

import pytest

from autoscaler.cli import main
from controlplane import LocalControlPlane
from controlplane.seed import rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi

WRITTEN = '{"requests":{"cpu":"344m","memory":"352Mi"},"limits":{"cpu":"344m","memory":"352Mi"}}'
OURS = {"containerName": "reconciler", "cpuRequest": "344m", "memoryRequest": "352Mi",
        "cpuLimit": "344m", "memoryLimit": "352Mi"}  # fmt: skip
THEIRS = {"containerName": "git-sync", "memoryLimit": "1Gi"}


def test_clean_removes_our_override_entry_and_annotations_and_keeps_the_rest(
    api: kubeapi.KubeClient,
    namespace: str,
    control_plane: LocalControlPlane,
    capsys: pytest.CaptureFixture[str],
) -> None:
    sized, changed = RSyncKey("RepoSync", namespace, "sized"), RSyncKey("RepoSync", namespace, "changed")
    for key, entry in ((sized, OURS), (changed, {**OURS, "memoryLimit": "2Gi"})):
        body = rsync(key)
        body["metadata"]["annotations"] = {
            "objcount.dev/override-written": WRITTEN,
            "objcount.dev/target": "rsync-override",
            "objcount.dev/autoscale": "true",  # a user's: stays
        }
        body["spec"]["override"] = {"resources": [THEIRS, entry]}
        api.create(kubeapi.REPOSYNC, namespace, body)
    kubeconfig = str(control_plane.kubeconfig)

    assert main(["clean", "--kubeconfig", kubeconfig, "-n", namespace, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"RepoSync/{namespace}/sized: would remove the reconciler entry" in said
    assert f"RepoSync/{namespace}/changed: kept the reconciler entry" in said
    assert api.get(kubeapi.REPOSYNC, namespace, "sized")["spec"]["override"]["resources"] == [THEIRS, OURS]

    assert main(["clean", "--kubeconfig", kubeconfig, "-n", namespace]) == 0
    said = capsys.readouterr().out
    assert f"RepoSync/{namespace}/sized: removed the reconciler entry" in said
    after = {key.name: api.get(kubeapi.REPOSYNC, namespace, key.name) for key in (sized, changed)}
    assert after["sized"]["spec"]["override"]["resources"] == [THEIRS]
    assert after["changed"]["spec"]["override"]["resources"] == [THEIRS, {**OURS, "memoryLimit": "2Gi"}]
    for body in after.values():
        assert body["metadata"]["annotations"] == {"objcount.dev/autoscale": "true"}

    assert main(["clean", "--kubeconfig", kubeconfig, "-n", namespace]) == 0
    assert f"RepoSync/{namespace}/changed: kept the reconciler entry" in capsys.readouterr().out
