"""A whole local stack on a real node: the sandbox, the control plane inside it, and the node.

`running_node_stack()` builds what is missing (binaries, images), starts everything inside one sandbox
(`controlplane.sandbox`), and stops and removes it all on exit. The host reaches the API server through
`plane.kubeconfig`; `kubectl()` runs the real kubectl with it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controlplane import images
from controlplane.cgroups import Cgroups, ContainerMemory
from controlplane.kubelet import CGROUP_PREFIX, RealNode, cgroup_root_name
from controlplane.kubernetes_build import VERSION as KUBERNETES_VERSION
from controlplane.kubernetes_build import build_binaries
from controlplane.launcher import LocalControlPlane
from controlplane.sandbox import Sandbox, remove_stale_cgroups, remove_stale_sandboxes
from controlplane.seed import JSON


def node_images() -> list[images.Image]:
    """The images every node has: the Pod sandbox's, and ours from the checkout (with its base)."""
    pause = images.pause_image()
    base = images.base_image()
    return [pause, base, images.objcount_image(base)]


@dataclass
class NodeStack:
    """The control plane and a real node in one sandbox."""

    bin_dir: Path
    images: Sequence[images.Image]
    sandbox: Sandbox = field(init=False)
    plane: LocalControlPlane = field(init=False)
    node: RealNode = field(init=False)
    startup_seconds: float | None = None
    cgroups: Cgroups = field(default_factory=Cgroups.of_host)

    def start(self) -> NodeStack:
        began = time.monotonic()
        remove_stale_cgroups(CGROUP_PREFIX)
        remove_stale_sandboxes()
        cgroup_root = cgroup_root_name()
        self.sandbox = Sandbox(cgroups=[cgroup_root]).start()
        try:
            self.plane = LocalControlPlane(
                self.bin_dir, sandbox=self.sandbox, work_dir=self.sandbox.work_dir / "plane"
            )
            self.plane.work_dir.mkdir()
            self.plane.start()
            self.node = RealNode(self.plane, self.sandbox, self.images, cgroup_root, self.cgroups).start()
        except BaseException:
            self.sandbox.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        with contextlib.suppress(AttributeError):
            self.node.stop()
        with contextlib.suppress(AttributeError):
            self.plane.stop()
        self.sandbox.stop()

    def kubectl(
        self, *args: str, input_text: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.plane.kubeconfig}", *args],
            input=input_text,
            capture_output=True,
            text=True,
            check=check,
            timeout=120,
        )

    def live_pods(self, namespace: str, selector: str) -> list[JSON]:
        """The Pods of `selector` in `namespace` not being deleted ([] when they cannot be listed)."""
        result = self.kubectl("get", "pods", "-n", namespace, "-l", selector, "-o", "json", check=False)
        if result.returncode != 0:
            return []
        pods: list[JSON] = json.loads(result.stdout).get("items") or []
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def container_cgroup(self, container_id: str, controller: str = "memory") -> Path:
        """The cgroup the kubelet made for a container (cgroupfs driver: under its cgroupRoot's kubepods),
        in `controller`'s hierarchy (cgroup v2: the one hierarchy)."""
        bare = container_id.removeprefix("containerd://")
        root = self.cgroups.hierarchy(controller) / self.node.cgroup_root
        found = [p for p in root.rglob(bare) if p.is_dir()]
        if len(found) != 1:
            raise LookupError(f"no single cgroup for container {bare} under {root}: {found}")
        return found[0]

    def container_cpu_seconds(self, container_id: str) -> float:
        """The CPU time a container's processes have used since its cgroup was made; OSError once it is
        gone."""
        return self.cgroups.cpu_seconds(self.container_cgroup(container_id, self.cgroups.cpu_controller))

    def container_memory(self, container_id: str) -> ContainerMemory:
        """A container's memory as its cgroup (made by the kubelet) holds it; OSError once it is gone."""
        return self.cgroups.memory(self.container_cgroup(container_id))


@contextlib.contextmanager
def running_node_stack(
    extra_images: Sequence[images.Image] = (), kubernetes: str = KUBERNETES_VERSION
) -> Iterator[NodeStack]:
    """The control plane and a real node of Kubernetes `kubernetes` (a pinned release: kubernetes-pins)."""
    stack = NodeStack(build_binaries(kubernetes), [*node_images(), *extra_images])
    stack.start()
    try:
        yield stack
    finally:
        stack.stop()
