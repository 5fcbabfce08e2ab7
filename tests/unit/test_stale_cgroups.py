"""Which node cgroups a starting stack may remove as stale: only those whose owner (the PID in the name)
has ended. A cold CI run lost 43 tests when one worker removed another's cgroup made a moment before the
kubelet put a task in it (the kubelet then refused to start: "cgroup ... has some missing paths")."""

from __future__ import annotations

import os
import subprocess

from controlplane.kubelet import CGROUP_PREFIX, cgroup_root_name
from controlplane.sandbox import owner_alive


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
