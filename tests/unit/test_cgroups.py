"""Which kubelet configuration and which cgroup files the stack uses on each layout (controlplane.cgroups),
against a fake `/sys/fs/cgroup` of each kind: these machines mount cgroup v1 (hybrid), so v2 runs only
here, never on a real node."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.cgroups import CgroupError, Cgroups, Layout, host_note, kubelet_settings, layout_of
from controlplane.kubelet import kubelet_config

MiB = 1 << 20
CONTAINER = "kubepods/burstable/pod1234/abcdef"


def fake_v1(root: Path) -> Path:
    """A hybrid host as these machines are: each v1 controller its own hierarchy, v2 at `unified`."""
    for controller in ("memory", "cpu", "cpuacct", "cpuset", "pids", "unified"):
        (root / controller).mkdir(parents=True)
    (root / "unified" / "cgroup.controllers").write_text("")  # v2 mounted below the root only
    (root / "cpuset" / "cpuset.cpus").write_text("0-1\n")
    (root / "cpuset" / "cpuset.mems").write_text("0\n")
    memory = root / "memory" / "node" / CONTAINER
    memory.mkdir(parents=True)
    (memory / "memory.limit_in_bytes").write_text(f"{256 * MiB}\n")
    (memory / "memory.usage_in_bytes").write_text(f"{100 * MiB}\n")
    (memory / "memory.max_usage_in_bytes").write_text(f"{180 * MiB}\n")
    (memory / "memory.stat").write_text(f"cache 0\ninactive_file 7\ntotal_inactive_file {20 * MiB}\n")
    cpu = root / "cpuacct" / "node" / CONTAINER
    cpu.mkdir(parents=True)
    (cpu / "cpuacct.usage").write_text("2500000000\n")
    return root


def fake_v2(root: Path) -> Path:
    """A unified host (GKE's nodes, current distributions): one hierarchy, its controllers at the root."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpuset cpu io memory hugetlb pids rdma misc\n")
    (root / "cgroup.subtree_control").write_text("")
    group = root / "node" / CONTAINER
    group.mkdir(parents=True)
    (group / "memory.max").write_text(f"{256 * MiB}\n")
    (group / "memory.current").write_text(f"{100 * MiB}\n")
    (group / "memory.peak").write_text(f"{180 * MiB}\n")
    (group / "memory.stat").write_text(f"anon 1\nfile 2\ninactive_file {20 * MiB}\nactive_file 3\n")
    (group / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n")
    return root


def test_the_layout_is_v2_only_where_the_root_is_the_unified_hierarchy(tmp_path: Path) -> None:
    assert layout_of(fake_v1(tmp_path / "v1")) is Layout.V1
    assert layout_of(fake_v2(tmp_path / "v2")) is Layout.V2
    with pytest.raises(CgroupError, match="no cgroup file system"):
        layout_of(tmp_path / "absent")


def test_on_v1_the_kubelet_is_told_to_run_anyway_and_the_log_says_why() -> None:
    assert kubelet_settings(Layout.V1) == {"failCgroupV1": False}
    assert "failCgroupV1: false" in host_note(Layout.V1)
    assert kubelet_settings(Layout.V2) == {"failCgroupV1": True}
    assert "untested" in host_note(Layout.V2)


@pytest.mark.parametrize("layout", [Layout.V1, Layout.V2])
def test_the_kubelets_configuration_carries_the_hosts_settings(layout: Layout, tmp_path: Path) -> None:
    config = kubelet_config(
        tmp_path, "objcount-kubelet-1", tmp_path / "resolv.conf", tmp_path / "ca.crt", layout
    )
    assert config["failCgroupV1"] is (layout is Layout.V2)
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/objcount-kubelet-1"


def test_v1_reads_the_v1_files(tmp_path: Path) -> None:
    cgroups = Cgroups.of_host(fake_v1(tmp_path))
    memory = cgroups.memory(cgroups.hierarchy("memory") / "node" / CONTAINER)
    assert (memory.limit, memory.working_set, memory.peak) == (256 * MiB, 80 * MiB, 180 * MiB)
    assert cgroups.cpu_controller == "cpuacct"
    assert cgroups.cpu_seconds(cgroups.hierarchy("cpuacct") / "node" / CONTAINER) == 2.5


def test_v2_reads_the_v2_files(tmp_path: Path) -> None:
    cgroups = Cgroups.of_host(fake_v2(tmp_path))
    assert cgroups.hierarchy("memory") == cgroups.hierarchy("cpu") == tmp_path
    memory = cgroups.memory(tmp_path / "node" / CONTAINER)
    assert (memory.limit, memory.working_set, memory.peak) == (256 * MiB, 80 * MiB, 180 * MiB)
    assert cgroups.cpu_controller == "cpu"
    assert cgroups.cpu_seconds(tmp_path / "node" / CONTAINER) == 2.5


def test_no_limit_reads_as_none_on_both(tmp_path: Path) -> None:
    v1, v2 = Cgroups.of_host(fake_v1(tmp_path / "a")), Cgroups.of_host(fake_v2(tmp_path / "b"))
    v1_group = v1.hierarchy("memory") / "node" / CONTAINER
    (v1_group / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    (tmp_path / "b" / "node" / CONTAINER / "memory.max").write_text("max\n")
    assert v1.memory(v1_group).limit is None
    assert v2.memory(tmp_path / "b" / "node" / CONTAINER).limit is None


def test_v1_makes_the_node_cgroup_in_every_hierarchy_with_the_parents_cpuset(tmp_path: Path) -> None:
    cgroups = Cgroups.of_host(fake_v1(tmp_path))
    cgroups.create("objcount-kubelet-1")
    assert sorted(p.parent.name for p in cgroups.dirs("objcount-kubelet-1")) == sorted(
        ["memory", "cpu", "cpuacct", "cpuset", "pids", "unified"]
    )
    assert (tmp_path / "cpuset" / "objcount-kubelet-1" / "cpuset.cpus").read_text() == "0-1\n"


def test_v2_makes_one_cgroup_with_the_roots_controllers_enabled_below(tmp_path: Path) -> None:
    cgroups = Cgroups.of_host(fake_v2(tmp_path))
    cgroups.create("objcount-kubelet-1")
    assert cgroups.dirs("objcount-kubelet-1") == [tmp_path / "objcount-kubelet-1"]
    enabled = (tmp_path / "cgroup.subtree_control").read_text().split()
    assert {"+memory", "+cpu", "+pids"} <= set(enabled)
