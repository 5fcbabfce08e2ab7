"""kind-based end-to-end tests: opt-in, and skipped with the reason when Docker or kind is missing."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest


def _e2e_unavailable() -> str | None:
    if os.environ.get("OBJCOUNT_E2E") != "1":
        return "kind e2e tests are opt-in: run `make e2e` (sets OBJCOUNT_E2E=1)"
    for tool in ("docker", "kind"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        return "no Docker engine is running (`docker info` failed)"
    return None


pytestmark = pytest.mark.skipif(_e2e_unavailable() is not None, reason=_e2e_unavailable() or "")


def test_kind_cluster_serves_the_crds(tmp_path: object) -> None:
    name = "objcount-e2e"
    subprocess.run(["kind", "create", "cluster", "--name", name, "--wait", "120s"], check=True)
    try:
        result = subprocess.run(
            ["kubectl", "--context", f"kind-{name}", "apply", "-f", "manifests/crds/"],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stderr
        assert "rootsyncs.configsync.gke.io" in result.stdout
    finally:
        subprocess.run(["kind", "delete", "cluster", "--name", name], check=False)
