"""The real-reconciler benchmark on another cluster: its commits go to the repository the cluster's
Config Sync reads (real git, pushed to a bare repository on disk here), and its RootSyncs sync that
repository at the point's directory. The metrics API sampling needs a cluster that serves one: not here
(the local stack has none), so it is not tested."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from inventory.core.ids import RSyncKey
from profiles.reconciler_memory import Cluster, manifests
from tests.fake_api import FakeApi

KEY = RSyncKey("RootSync", "config-management-system", "mem-configmaps-3-0")
URL = "https://git.example.invalid/platform/config.git"


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for variable, value in {
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.invalid",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.invalid",
    }.items():
        monkeypatch.setenv(variable, value)
    git("init", "--quiet", "--bare", "--initial-branch=main", "remote.git", cwd=tmp_path)
    git("clone", "--quiet", "remote.git", "clone", cwd=tmp_path)
    return tmp_path / "clone"


def cluster(clone: Path, secret: str | None = None) -> Cluster:
    return Cluster(FakeApi(), clone, URL, "main", secret)


def test_each_commit_is_pushed_to_the_point_s_directory(clone: Path) -> None:
    bench = cluster(clone)
    remote = clone.parent / "remote.git"
    for count in (3, 1):  # the point's commit, then the one that prunes the rest
        text = manifests("configmaps", count, KEY.name)
        commit = bench.commit(KEY, {"objects.yaml": text})
        assert git("rev-parse", "main", cwd=remote).strip() == commit
        assert git("show", f"main:{KEY.name}/objects.yaml", cwd=remote) == text
    assert git("rev-list", "--count", "main", cwd=remote).strip() == "2"


def test_the_rootsync_syncs_that_directory(clone: Path) -> None:
    git_spec: dict[str, Any] = cluster(clone).rootsync(KEY)["spec"]["git"]
    assert git_spec == {"repo": URL, "branch": "main", "dir": KEY.name, "auth": "none"}
    with_token: dict[str, Any] = cluster(clone, "git-creds").rootsync(KEY)["spec"]["git"]
    assert with_token["auth"] == "token"
    assert with_token["secretRef"] == {"name": "git-creds"}


def test_a_push_git_refuses_is_a_clear_error(clone: Path) -> None:
    git("remote", "set-url", "origin", str(clone.parent / "no-such-remote.git"), cwd=clone)
    with pytest.raises(RuntimeError, match="git push"):
        cluster(clone).commit(KEY, {"objects.yaml": manifests("configmaps", 1, KEY.name)})
