"""The status reader lists what was recorded, from the status or the annotation fallback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    SOURCE_ANNOTATION,
    SYNC_ANNOTATION,
    WAITING_ANNOTATION,
)
from autoscaler.kube.report import RSyncRecord, read_status, render
from controlplane import LocalControlPlane
from controlplane.seed import rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi


def test_reader_reports_counts_and_where_they_are_stored(
    api: kubeapi.KubeClient, namespace: str, status_count_crds: None
) -> None:
    root = RSyncKey("RootSync", namespace, "root-sync")
    repo = RSyncKey("RepoSync", namespace, "repo-sync")
    fresh = RSyncKey("RepoSync", namespace, "fresh")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(root))
    api.patch(
        kubeapi.ROOTSYNC,
        namespace,
        root.name,
        {"status": {"source": {"objectCount": 5}, "sync": {"objectCount": 4}}},
        subresource="status",
    )
    api.create(kubeapi.REPOSYNC, namespace, rsync(repo))
    api.patch(
        kubeapi.REPOSYNC,
        namespace,
        repo.name,
        {"metadata": {"annotations": {SOURCE_ANNOTATION: "9", SYNC_ANNOTATION: "8"}}},
    )
    api.create(kubeapi.REPOSYNC, namespace, rsync(fresh))
    published = {
        "metadata": {
            "annotations": {
                RECOMMENDED_ANNOTATION: '{"requests":{"cpu":"344m","memory":"352Mi"}}',
                APPLIED_ANNOTATION: '{"requests":{"cpu":"157m","memory":"200Mi"}}',
                # In place, the kubelet defers the recommended size: the running Pod keeps the applied.
                WAITING_ANNOTATION: '{"requests":{"cpu":"344m","memory":"352Mi"}}',
            }
        }
    }
    api.patch(kubeapi.ROOTSYNC, namespace, root.name, published)

    records = read_status(api, namespace)
    assert records == [
        RSyncRecord("RepoSync", namespace, "fresh", None, None, "none"),
        RSyncRecord("RepoSync", namespace, "repo-sync", 9, 8, "annotations"),
        RSyncRecord(
            "RootSync",
            namespace,
            "root-sync",
            5,
            4,
            "status",
            "344m/352Mi",
            "157m/200Mi",
            waiting_for_room="344m/352Mi",
        ),
    ]
    table = render(records)
    assert table.splitlines()[0].split() == [
        "KIND",
        "NAMESPACE",
        "NAME",
        "SOURCE",
        "OBJECTS",
        "SYNCED",
        "OBJECTS",
        "STORED",
        "IN",
        "RECOMMENDED",
        "APPLIED",
        "WAITING",
        "FOR",
        "ROOM",
        "CALIBRATED",
        "TARGET",
        "VPA",
        "APPLIED",
        "HELD",
        "BY",
        "OWNER",
    ]
    assert "<unknown>" in table.splitlines()[1]


def test_cli_status_json_all_namespaces(
    api: kubeapi.KubeClient, namespace: str, control_plane: LocalControlPlane
) -> None:
    key = RSyncKey("RootSync", namespace, "cli")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key))
    api.patch(kubeapi.ROOTSYNC, namespace, key.name, {"metadata": {"annotations": {SYNC_ANNOTATION: "3"}}})
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "status",
            "--kubeconfig",
            str(control_plane.kubeconfig),
            "-A",
            "-o",
            "json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    records = [r for r in json.loads(result.stdout) if r["namespace"] == namespace]
    assert records == [
        {
            "kind": "RootSync",
            "namespace": namespace,
            "name": "cli",
            "source_count": None,
            "sync_count": 3,
            "counts_stored_in": "annotations",
            "recommended": None,
            "applied": None,
            "held_by_owner": None,
            "calibrated": None,
            "target": None,
            "vpa_applied": None,
            "waiting_for_room": None,
        }
    ]


def test_cli_status_reports_unreachable_cluster(tmp_path: object) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "status", "--kubeconfig", "/nonexistent/kubeconfig"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 1
    assert "cannot load cluster credentials" in result.stderr


def test_cli_status_yaml_in_a_context_and_namespace_with_hostile_annotations(
    api: kubeapi.KubeClient,
    namespace: str,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    hostile = RSyncKey("RootSync", namespace, "hostile")
    body = rsync(hostile)
    body["metadata"]["annotations"] = {
        SOURCE_ANNOTATION: "²",  # passes str.isdigit(), int() refuses it
        SYNC_ANNOTATION: "9" * 400,
        RECOMMENDED_ANNOTATION: "[1, 2]",
        APPLIED_ANNOTATION: '{"requests": {"cpu": "1.2.3", "memory": []}}',
        WAITING_ANNOTATION: "{not json",
    }
    api.create(kubeapi.ROOTSYNC, namespace, body)
    # A second context whose namespace is the test's: `--context` picks it, `-n` overrides it.
    config = yaml.safe_load(control_plane.kubeconfig.read_text())
    config["contexts"].append(
        {"name": "team", "context": {"cluster": "local", "user": "user", "namespace": namespace}}
    )
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))

    assert main(["status", "--kubeconfig", str(kubeconfig), "--context", "team", "-o", "yaml"]) == 0
    records = yaml.safe_load(capsys.readouterr().out)
    assert records == [
        {
            "kind": "RootSync",
            "namespace": namespace,
            "name": "hostile",
            "source_count": None,
            "sync_count": None,
            "counts_stored_in": "none",
            "recommended": None,
            "applied": None,
            "held_by_owner": None,
            "calibrated": None,
            "target": None,
            "vpa_applied": None,
            "waiting_for_room": None,
        }
    ]
    assert (
        main(["status", "--kubeconfig", str(kubeconfig), "--context", "team", "-n", "default", "-o", "yaml"])
        == 0
    )
    assert all(r["namespace"] == "default" for r in yaml.safe_load(capsys.readouterr().out) or [])
