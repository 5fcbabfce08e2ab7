"""Which node cgroups a starting stack may remove as stale: only those whose owner (the PID in the name)
has ended. A cold CI run lost 43 tests when one worker removed another's cgroup made a moment before the
kubelet put a task in it (the kubelet then refused to start: "cgroup ... has some missing paths"). And how
a cgroup that refuses rmdir just after its tasks exited is tried again (a cold CI run, b10aa7b, saw a stack's
cgroups left 30 s after its killed parent's processes had all exited)."""

from __future__ import annotations

import errno
import os
import subprocess
import time
from pathlib import Path

import pytest

from controlplane.kubelet import CGROUP_PREFIX, cgroup_root_name
from controlplane.sandbox import owner_alive, remove_cgroup_tree


def test_a_cgroup_made_by_a_live_process_is_its_own() -> None:
    name = cgroup_root_name()
    assert name.startswith(f"{CGROUP_PREFIX}{os.getpid()}-")
    assert owner_alive(name, CGROUP_PREFIX)


def test_a_cgroup_whose_owner_ended_has_none() -> None:
    child = subprocess.Popen(["true"])
    child.wait()
    assert not owner_alive(f"{CGROUP_PREFIX}{child.pid}-0a1b2c3d", CGROUP_PREFIX)


def test_a_name_without_an_owner_has_none() -> None:
    assert not owner_alive(f"{CGROUP_PREFIX}9bfd65aa", CGROUP_PREFIX)
    assert not owner_alive(f"{CGROUP_PREFIX}-12", CGROUP_PREFIX)


def test_a_cgroup_that_refuses_rmdir_for_a_moment_is_removed_on_a_later_try(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cgroup whose last task has just exited refuses rmdir with EBUSY for a while (played here by a
    directory whose rmdir fails three times): the tree is removed deepest first once it lets go."""
    tree = tmp_path / "objcount-node-1"
    (tree / "kubepods" / "burstable").mkdir(parents=True)
    refusals = {"burstable": 3}
    real_rmdir = Path.rmdir

    def rmdir(self: Path) -> None:
        if refusals.get(self.name, 0) > 0:
            refusals[self.name] -= 1
            raise OSError(errno.EBUSY, "Device or resource busy", str(self))
        real_rmdir(self)

    monkeypatch.setattr(Path, "rmdir", rmdir)
    assert remove_cgroup_tree(tree, until=time.monotonic() + 30)
    assert not tree.exists()
    assert refusals == {"burstable": 0}


def test_a_cgroup_that_refuses_is_tried_once_without_a_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tree = tmp_path / "objcount-node-2"
    (tree / "kubepods").mkdir(parents=True)
    tries: list[Path] = []

    def rmdir(self: Path) -> None:
        tries.append(self)
        raise OSError(errno.EBUSY, "Device or resource busy", str(self))

    monkeypatch.setattr(Path, "rmdir", rmdir)
    assert not remove_cgroup_tree(tree)  # no deadline: one try of each
    assert tries == [tree / "kubepods", tree]
    assert (tree / "kubepods").is_dir()
