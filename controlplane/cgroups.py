"""The host's cgroups as the local stack makes and reads them, on either layout.

- **cgroup v1** (these machines: a hybrid hierarchy, each v1 controller mounted at `/sys/fs/cgroup/<name>`,
  cgroup v2 at `/sys/fs/cgroup/unified` holding no controller we use). A cgroup is a directory in each
  hierarchy; memory reads `memory.limit_in_bytes`, `memory.usage_in_bytes`, `memory.max_usage_in_bytes`
  and `memory.stat`'s `total_inactive_file`; CPU time `cpuacct.usage` (nanoseconds). From Kubernetes 1.35
  the kubelet refuses such a host unless its configuration sets `failCgroupV1: false` (KEP-5573).
- **cgroup v2** (GKE's nodes and every current distribution's default): one unified hierarchy at
  `/sys/fs/cgroup`, `cgroup.controllers` at its root. A cgroup is one directory, its controllers enabled
  in its parent's `cgroup.subtree_control`; memory reads `memory.max` ("max": no limit),
  `memory.current`, `memory.peak` and `memory.stat`'s `inactive_file`; CPU time `cpu.stat`'s `usage_usec`.

Everything takes the root it reads (a fake tree in the unit tests): **v2 is never run on these machines**
(they mount v1), so its paths are tested against a fake `/sys/fs/cgroup` only (docs/setup.md says so).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
# What a v1 memory limit reads when none is set (PAGE_COUNTER_MAX pages): anything this large is "none".
_V1_UNLIMITED = 1 << 62


class Layout(enum.Enum):
    V1 = "v1"
    V2 = "v2"


class CgroupError(RuntimeError):
    """The host has no cgroup file system the stack can use."""


def layout_of(root: Path = CGROUP_ROOT) -> Layout:
    """v2 where `root` is the unified hierarchy itself (its `cgroup.controllers` is there, as the kubelet
    decides through libcontainer's IsCgroup2UnifiedMode), else v1 (legacy or hybrid)."""
    if not root.is_dir():
        raise CgroupError(f"no cgroup file system at {root}")
    return Layout.V2 if (root / "cgroup.controllers").is_file() else Layout.V1


def kubelet_settings(layout: Layout) -> dict[str, object]:
    """The kubelet configuration's fields that depend on the host's cgroups. On v1 the kubelet of 1.35 and
    later starts only when told to (`failCgroupV1: false`); v1.34's accepts the field too. On v2 the
    defaults hold (the cgroupfs driver, as on v1: no systemd here)."""
    return {"failCgroupV1": False} if layout is Layout.V1 else {"failCgroupV1": True}


def host_note(layout: Layout) -> str:
    """The one log line that says which configuration the kubelet runs with, and why."""
    if layout is Layout.V1:
        return (
            "cgroup v1 host: the kubelet runs with failCgroupV1: false (Kubernetes 1.35+ refuses v1 without"
            " it; the nodes users run are cgroup v2)"
        )
    return "cgroup v2 host: the kubelet runs with its v2 defaults (untested on this project's machines)"


@dataclass(frozen=True)
class ContainerMemory:
    """Bytes. `working_set` is what the kubelet reports (usage less inactive file pages, as cAdvisor
    computes it); `peak` the cgroup's largest usage since it was made; `limit` None: unlimited."""

    limit: int | None
    working_set: int
    peak: int


@dataclass(frozen=True)
class Cgroups:
    """The cgroup file system at `root`, of `layout`."""

    root: Path
    layout: Layout

    @classmethod
    def of_host(cls, root: Path = CGROUP_ROOT) -> Cgroups:
        return cls(root, layout_of(root))

    # ----- where ------------------------------------------------------------------------------------------
    def hierarchies(self) -> list[Path]:
        """Every hierarchy a cgroup is made in: each mounted v1 controller (and v2's `unified`, harmless),
        or v2's one root."""
        if self.layout is Layout.V2:
            return [self.root]
        return sorted(p for p in self.root.iterdir() if p.is_dir())

    def dirs(self, name: str) -> list[Path]:
        """The cgroup `name` (relative to a hierarchy's root) in every hierarchy that has it."""
        return [h / name.strip("/") for h in self.hierarchies() if (h / name.strip("/")).is_dir()]

    def hierarchy(self, controller: str) -> Path:
        """Where `controller`'s files are: v1's hierarchy of that name, v2's root."""
        return self.root if self.layout is Layout.V2 else self.root / controller

    def create(self, name: str) -> None:
        """Make `name` at the root of every hierarchy (the kubelet requires its cgroupRoot in each). On v1 a
        new cpuset has no CPUs or memory nodes until given its parent's; on v2 the root's controllers are
        enabled for its children, so the kubelet can use them below `name`."""
        if self.layout is Layout.V2:
            controllers = (self.root / "cgroup.controllers").read_text().split()
            subtree = self.root / "cgroup.subtree_control"
            subtree.write_text(" ".join(f"+{c}" for c in controllers))
            (self.root / name.strip("/")).mkdir(exist_ok=True)
            return
        for hierarchy in self.hierarchies():
            path = hierarchy / name.strip("/")
            path.mkdir(exist_ok=True)
            for knob in ("cpuset.cpus", "cpuset.mems"):
                if (hierarchy / knob).exists():
                    (path / knob).write_text((hierarchy / knob).read_text())

    # ----- what -------------------------------------------------------------------------------------------
    def memory(self, cgroup: Path) -> ContainerMemory:
        """A cgroup's memory (its directory in the memory hierarchy); OSError once it is gone."""
        stat = keyed_integers(cgroup / "memory.stat")
        if self.layout is Layout.V2:
            raw_limit = (cgroup / "memory.max").read_text().strip()
            usage = int((cgroup / "memory.current").read_text())
            return ContainerMemory(
                limit=None if raw_limit == "max" else int(raw_limit),
                working_set=max(0, usage - stat.get("inactive_file", 0)),
                peak=int((cgroup / "memory.peak").read_text()),
            )
        limit = int((cgroup / "memory.limit_in_bytes").read_text())
        usage = int((cgroup / "memory.usage_in_bytes").read_text())
        return ContainerMemory(
            limit=None if limit >= _V1_UNLIMITED else limit,
            working_set=max(0, usage - stat.get("total_inactive_file", 0)),
            peak=int((cgroup / "memory.max_usage_in_bytes").read_text()),
        )

    def cpu_seconds(self, cgroup: Path) -> float:
        """The CPU time a cgroup's processes have used since it was made (its directory in the CPU
        accounting hierarchy: v1's `cpuacct`); OSError once it is gone."""
        if self.layout is Layout.V2:
            return keyed_integers(cgroup / "cpu.stat")["usage_usec"] / 1e6
        return int((cgroup / "cpuacct.usage").read_text()) / 1e9

    @property
    def cpu_controller(self) -> str:
        """The hierarchy CPU time is read in (`cpu_seconds`)."""
        return "cpuacct" if self.layout is Layout.V1 else "cpu"


def keyed_integers(file: Path) -> dict[str, int]:
    """A cgroup's flat keyed file (`memory.stat`, `cpu.stat`): each line a name and an integer."""
    pairs = (line.split() for line in file.read_text().splitlines())
    return {p[0]: int(p[1]) for p in pairs if len(p) == 2}
