"""The git side of `profiles.stress --git-clone`: each step a commit in a working copy, pushed where it
has an upstream, the stress file removed at the end (a real git, temporary repositories)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from profiles.stress import STRESS_FILE, Clone

IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@example.invalid")


def git(path: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(path), *args], capture_output=True, text=True, check=True).stdout


def test_each_step_is_a_commit_pushed_to_the_clones_upstream_and_the_file_goes_at_the_end(
    tmp_path: Path,
) -> None:
    upstream, clone_dir = tmp_path / "upstream.git", tmp_path / "clone"
    git(tmp_path, "init", "--quiet", "--bare", "--initial-branch=main", str(upstream))
    git(tmp_path, "clone", "--quiet", str(upstream), str(clone_dir))
    git(clone_dir, "config", "user.name", "t")
    git(clone_dir, "config", "user.email", "t@example.invalid")
    git(clone_dir, *IDENTITY, "commit", "--quiet", "--allow-empty", "-m", "first")
    git(clone_dir, "push", "--quiet", "-u", "origin", "main")
    clone = Clone(clone_dir, "config")
    first = clone.commit("kind: ConfigMap\n", "step 1")
    assert (clone_dir / "config" / STRESS_FILE).read_text() == "kind: ConfigMap\n"
    assert git(upstream, "rev-parse", "main").strip() == first, "pushed"
    assert git(upstream, "show", f"main:config/{STRESS_FILE}") == "kind: ConfigMap\n"
    removed = clone.commit(None, "removed")
    assert removed != first
    assert not (clone_dir / "config" / STRESS_FILE).exists()
    assert git(upstream, "ls-tree", "-r", "--name-only", "main") == ""


def test_a_clone_without_an_upstream_keeps_its_commits_where_it_is(tmp_path: Path) -> None:
    """The local node's git server serves the working repository itself: nothing to push."""
    git(tmp_path, "init", "--quiet", "--initial-branch=main", ".")
    git(tmp_path, "config", "user.name", "t")
    git(tmp_path, "config", "user.email", "t@example.invalid")
    head = Clone(tmp_path).commit("a: 1\n", "step")
    assert git(tmp_path, "rev-parse", "HEAD").strip() == head
    assert git(tmp_path, "show", f"HEAD:{STRESS_FILE}") == "a: 1\n"
