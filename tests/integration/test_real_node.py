"""The real node: kubelet, containerd and runc in the stack's sandbox, Pods bound by kube-scheduler, our
image built from the checkout's Dockerfile. What our stand-in for the kubelet (now removed) used to play
is checked here on the real kubelet: OOMKilled, in-place resize, a lowered limit below usage, the kubelet's restart backoff."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane import kubernetes_build
from controlplane.cgroups import Cgroups
from controlplane.images import OBJCOUNT_IMAGE
from controlplane.kubelet import CGROUP_PREFIX, NODE_NAME, cgroup_root_name
from controlplane.sandbox import (
    LOCK,
    Sandbox,
    cgroup_dirs,
    remove_stale_cgroups,
    remove_stale_sandboxes,
)
from controlplane.seed import REPO_ROOT
from controlplane.stack import NodeStack, running_node_stack
from tests.helpers import FIGURES, NODE_STARTUP, alive, network_namespaces_in_use, wait_for

JSON = dict[str, Any]
MiB = 1024 * 1024
# Grows to `MIB` MiB of resident memory and holds it (python from our own image: no other image here).
HOLD = "import sys, time; b = bytearray({mib} * 1048576); b[::4096] = b'x' * len(b[::4096]); print('holding', flush=True); time.sleep(3600)"


@pytest.fixture(scope="module")
def node() -> Iterator[NodeStack]:
    with running_node_stack() as stack:
        FIGURES.append((NODE_STARTUP, stack.startup_seconds or 0.0))
        yield stack


@pytest.fixture
def ns(node: NodeStack) -> str:
    name = f"n-{uuid.uuid4().hex[:8]}"
    node.kubectl("create", "namespace", name)
    wait_for(
        lambda: node.kubectl("get", "serviceaccount", "default", "-n", name, check=False).returncode == 0,
        timeout=30,
        what="the namespace's default ServiceAccount",
    )
    return name


def python_pod(name: str, code: str, *, memory: str | None = None, restart: str = "Always") -> JSON:
    container: JSON = {
        "name": "main",
        "image": OBJCOUNT_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": ["python", "-c", code],
        "securityContext": {"readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False},
    }
    if memory:
        container["resources"] = {
            "requests": {"memory": memory, "cpu": "50m"},
            "limits": {"memory": memory, "cpu": "50m"},
        }
        container["resizePolicy"] = [{"resourceName": "memory", "restartPolicy": "NotRequired"}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container], "restartPolicy": restart, "terminationGracePeriodSeconds": 1},
    }


def create(node: NodeStack, ns: str, pod: JSON) -> None:
    node.kubectl("apply", "-n", ns, "-f", "-", input_text=json.dumps(pod))


def get(node: NodeStack, ns: str, name: str) -> JSON:
    pod: JSON = json.loads(node.kubectl("get", "pod", name, "-n", ns, "-o", "json").stdout)
    return pod


def status_of(pod: JSON) -> JSON:
    statuses = pod.get("status", {}).get("containerStatuses") or [{}]
    status: JSON = statuses[0]
    return status


def running(node: NodeStack, ns: str, name: str) -> JSON | None:
    pod = get(node, ns, name)
    return pod if "running" in status_of(pod).get("state", {}) else None


def sandbox_pid(host_pid: int) -> int:
    """A process's pid in the sandbox's PID namespace (NSpid lists the host's, the sandbox's, then the
    container's own)."""
    status = Path(f"/proc/{host_pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[2])


def memory_limit(cgroup: Path) -> int | None:
    """The memory limit the kernel holds the cgroup to (either cgroup layout: controlplane.cgroups)."""
    return Cgroups.of_host().memory(cgroup).limit


def test_the_kubelet_registers_the_node_and_the_scheduler_binds_pods(node: NodeStack, ns: str) -> None:
    nodes = json.loads(node.kubectl("get", "nodes", "-o", "json").stdout)["items"]
    assert [n["metadata"]["name"] for n in nodes] == [NODE_NAME]
    assert nodes[0]["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://1.6")
    assert nodes[0]["status"]["nodeInfo"]["kubeletVersion"] == kubernetes_build.VERSION
    create(node, ns, python_pod("bound", "import os; print(os.getuid(), os.getgid())", restart="Never"))
    pod = wait_for(
        lambda: (p := get(node, ns, "bound"))["status"].get("phase") == "Succeeded" and p,
        timeout=60,
        what="the Pod to run to completion",
    )
    assert pod["spec"]["nodeName"] == NODE_NAME  # set by kube-scheduler: the manifest names no node
    events = node.kubectl("get", "events", "-n", ns, "-o", "json").stdout
    assert any(
        e["reason"] == "Scheduled"
        and e["source"].get("component", e.get("reportingComponent")) == "default-scheduler"
        for e in json.loads(events)["items"]
    ), events
    # Our image's user, from the Dockerfile, with a read-only root file system.
    assert node.kubectl("logs", "bound", "-n", ns).stdout.split() == ["10001", "10001"]


def test_containers_are_containerds_and_run_in_the_kubelets_cgroup(node: NodeStack, ns: str) -> None:
    create(node, ns, python_pod("cg", HOLD.format(mib=1), memory="64Mi"))
    pod = wait_for(lambda: running(node, ns, "cg"), timeout=60, what="the container to run")
    container_id = status_of(pod)["containerID"]
    assert container_id.startswith("containerd://")
    task = node.node.ctr("tasks", "ls").stdout
    line = next(
        row for row in task.splitlines() if row.startswith(container_id.removeprefix("containerd://"))
    )
    pid = int(line.split()[1])
    cgroup = node.container_cgroup(container_id)
    # The kubelet's path: <cgroupRoot>/kubepods/<QoS>/pod<UID>/<container>; the process is in it.
    assert f"/{node.node.cgroup_root}/kubepods/" in str(cgroup)
    assert f"pod{pod['metadata']['uid']}" in str(cgroup)
    # ctr names the pid as the sandbox's PID namespace numbers it; the cgroup lists host pids.
    inside = [sandbox_pid(int(p)) for p in (cgroup / "cgroup.procs").read_text().split()]
    assert pid in inside
    assert memory_limit(cgroup) == 64 * MiB


def test_the_kernel_oom_kill_is_reported_as_oomkilled_by_the_kubelet(node: NodeStack, ns: str) -> None:
    create(node, ns, python_pod("oom", HOLD.format(mib=200), memory="48Mi"))
    status = wait_for(
        lambda: (s := status_of(get(node, ns, "oom"))).get("lastState", {}).get("terminated") and s,
        timeout=90,
        what="the container's first termination",
    )
    terminated = status["lastState"]["terminated"]
    assert terminated["reason"] == "OOMKilled"
    assert terminated["exitCode"] == 137
    assert status["restartCount"] >= 1


def test_in_place_resize_changes_the_running_containers_cgroup(node: NodeStack, ns: str) -> None:
    create(node, ns, python_pod("resize", HOLD.format(mib=16), memory="64Mi"))
    before = status_of(wait_for(lambda: running(node, ns, "resize"), timeout=60, what="the container to run"))
    cgroup = node.container_cgroup(before["containerID"])
    assert memory_limit(cgroup) == 64 * MiB
    patch = {
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": {"memory": "96Mi"}, "limits": {"memory": "96Mi"}}}
            ]
        }
    }
    node.kubectl(
        "patch",
        "pod",
        "resize",
        "-n",
        ns,
        "--subresource=resize",
        "--type=strategic",
        "-p",
        json.dumps(patch),
    )
    after = wait_for(
        lambda: (
            (s := status_of(get(node, ns, "resize"))).get("resources", {}).get("limits", {}).get("memory")
            == "96Mi"
            and s
        ),
        timeout=60,
        what="the kubelet to report the resized limit",
    )
    assert memory_limit(cgroup) == 96 * MiB
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == before["restartCount"] == 0


def test_a_limit_lowered_below_usage_is_refused_by_the_kubelet_and_the_container_keeps_running(
    node: NodeStack, ns: str
) -> None:
    create(node, ns, python_pod("lower", HOLD.format(mib=80), memory="160Mi"))
    before = status_of(wait_for(lambda: running(node, ns, "lower"), timeout=60, what="the container to run"))
    wait_for(
        lambda: "holding" in node.kubectl("logs", "lower", "-n", ns).stdout, timeout=60, what="80 MiB held"
    )
    cgroup = node.container_cgroup(before["containerID"])
    patch = {
        "spec": {
            "containers": [
                {"name": "main", "resources": {"requests": {"memory": "48Mi"}, "limits": {"memory": "48Mi"}}}
            ]
        }
    }
    node.kubectl(
        "patch", "pod", "lower", "-n", ns, "--subresource=resize", "--type=strategic", "-p", json.dumps(patch)
    )

    def resize_condition() -> JSON | None:
        conditions = get(node, ns, "lower")["status"].get("conditions") or []
        return next(
            (
                c
                for c in conditions
                if c["type"] in ("PodResizeInProgress", "PodResizePending") and c.get("message")
            ),
            None,
        )

    condition = wait_for(resize_condition, timeout=60, what="the kubelet to report the resize it cannot do")
    assert condition["type"] == "PodResizeInProgress", condition
    assert condition["reason"] == "Error", condition
    assert "memory" in condition["message"], condition
    after = status_of(get(node, ns, "lower"))
    assert memory_limit(cgroup) == 160 * MiB  # the old limit stays
    assert after["containerID"] == before["containerID"]
    assert after["restartCount"] == 0
    assert after["resources"]["limits"]["memory"] == "160Mi"


def test_a_failing_container_is_restarted_with_the_kubelets_backoff(node: NodeStack, ns: str) -> None:
    create(node, ns, python_pod("crash", "import sys; print('failing'); sys.exit(3)"))
    status = wait_for(
        lambda: (
            (s := status_of(get(node, ns, "crash"))).get("restartCount", 0) >= 2
            and s.get("state", {}).get("waiting", {}).get("reason") == "CrashLoopBackOff"
            and s
        ),
        timeout=120,
        what="two restarts and CrashLoopBackOff",
    )
    assert status["lastState"]["terminated"]["exitCode"] == 3
    # The kubelet's own back-off, doubling from 10 s, in its message (not timed by the test).
    assert "back-off 20s restarting failed container" in status["state"]["waiting"]["message"], status


def test_a_second_stack_runs_beside_the_first_without_colliding(node: NodeStack, ns: str) -> None:
    with running_node_stack() as second:
        assert os.readlink(second.sandbox.netns) != os.readlink(node.sandbox.netns)
        second.kubectl("create", "namespace", "beside")
        wait_for(
            lambda: (
                second.kubectl("get", "serviceaccount", "default", "-n", "beside", check=False).returncode
                == 0
            ),
            timeout=30,
            what="the second stack's default ServiceAccount",
        )
        for stack, namespace in ((node, ns), (second, "beside")):
            create(stack, namespace, python_pod("same-name", HOLD.format(mib=1)))
        for stack, namespace in ((node, ns), (second, "beside")):
            wait_for(
                lambda s=stack, n=namespace: running(s, n, "same-name"), timeout=60, what="both Pods to run"
            )
        # The same node name, node address and Pod address in each: nothing is shared.
        assert (
            get(node, ns, "same-name")["status"]["hostIP"]
            == get(second, "beside", "same-name")["status"]["hostIP"]
        )
    assert node.node.ready()


def test_a_killed_parent_leaves_nothing_of_the_stack_behind(tmp_path: Path) -> None:
    """SIGKILL the process that started a stack with a running Pod: every process, cgroup, mount, network
    namespace and file of it (etcd's data, containerd's image store) is gone."""
    script = textwrap.dedent(
        """
        import json, os, signal
        from controlplane.stack import NodeStack, node_images
        from controlplane.kubernetes_build import build_binaries
        stack = NodeStack(build_binaries(), node_images()).start()
        stack.kubectl("run", "held", "--image=objcount-autoscaler:0.1.0", "--command", "--", "sleep", "3600")
        print(json.dumps({
            "pids": stack.plane.pids() + stack.node.pids() + [stack.sandbox.init_pid],
            "cgroup": stack.node.cgroup_root,
            "work_dir": str(stack.sandbox.work_dir),
            "netns": os.readlink(stack.sandbox.netns),
        }), flush=True)
        signal.pause()  # until the test kills this process
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": "."},
    )
    try:
        _the_stack_is_whole_then_killed(parent)
    finally:
        parent.kill()


def _the_stack_is_whole_then_killed(parent: subprocess.Popen[str]) -> None:
    assert parent.stdout is not None
    started = json.loads(parent.stdout.readline())
    work_dir = Path(started["work_dir"])
    assert (work_dir / "plane" / "node" / "containerd" / "root").is_dir()
    wait_for(
        lambda: list(cgroup_dirs(started["cgroup"] + "/kubepods")), timeout=30, what="the kubelet's cgroups"
    )
    pod_processes = wait_for(
        lambda: [
            p
            for c in cgroup_dirs(started["cgroup"])
            for p in c.rglob("cgroup.procs")
            if p.read_text().strip()
        ],
        timeout=60,
        what="a container process in the kubelet's cgroups",
    )
    assert pod_processes
    assert started["netns"] in network_namespaces_in_use()

    parent.send_signal(signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not any(alive(pid) for pid in started["pids"]), timeout=60, what="every process to exit")
    wait_for(lambda: not cgroup_dirs(started["cgroup"]), timeout=30, what="the cgroups to be removed")
    wait_for(lambda: not work_dir.exists(), timeout=30, what="the stack's files to be removed")
    assert started["netns"] not in network_namespaces_in_use()
    assert str(work_dir) not in Path("/proc/self/mountinfo").read_text()
    assert str(work_dir) not in Path("/proc/1/mountinfo").read_text()


def test_the_sandbox_stops_and_removes_itself_on_a_sigterm_to_its_init(tmp_path: Path) -> None:
    """A SIGTERM straight to the sandbox's first process (as `unshare --kill-child` sends when its parent
    dies, or a `pkill`) ends everything in it and removes its files. Twenty times: the init once took a
    lock in its signal handler and hung for ever with a whole stack running when the signal came at the
    wrong moment (this cannot force that moment; it checks the handler's effect each time)."""
    for attempt in range(20):
        work_dir = tmp_path / f"sandbox-{attempt}"
        sandbox = Sandbox(work_dir=work_dir).start()
        try:
            init = sandbox.init_pid
            os.kill(init, signal.SIGTERM)
            wait_for(lambda i=init: not alive(i), timeout=30, what=f"the init {init} gone")
            assert not work_dir.exists()
        finally:
            sandbox.stop()


def test_a_sandbox_killed_with_its_init_is_removed_by_the_next_one(tmp_path: Path) -> None:
    """When the sandbox's init is SIGKILLed (a machine going down kills everything at once), nothing inside
    is left to remove its files. They stay until the next stack starts, which removes every sandbox
    directory whose lock no process holds, and leaves a live sandbox's alone."""
    script = textwrap.dedent(
        f"""
        import signal, sys
        from pathlib import Path
        from controlplane.sandbox import Sandbox
        sandbox = Sandbox(work_dir=Path({str(tmp_path)!r}) / "objcount-sandbox-killed").start()
        print(sandbox.init_pid, flush=True)
        signal.pause()  # until the test kills this process
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    live = Sandbox(work_dir=tmp_path / "objcount-sandbox-live").start()
    unlocked = tmp_path / "objcount-sandbox-being-made"  # no lock file yet: not judged
    unlocked.mkdir()
    try:
        assert parent.stdout is not None
        init = int(parent.stdout.readline())
        killed = tmp_path / "objcount-sandbox-killed"
        assert (killed / LOCK).exists()
        os.kill(init, signal.SIGKILL)
        wait_for(lambda: not alive(init), timeout=30, what="the killed init gone")
        assert remove_stale_sandboxes(tmp_path) == []  # the process that started it still holds the lock
        parent.kill()
        parent.wait()
        assert (killed / "sandbox.json").exists()  # no one removed its files
        assert remove_stale_sandboxes(tmp_path) == [killed]
        assert not killed.exists()
        assert (live.work_dir / "sandbox.json").exists()
        assert live.running()
        assert unlocked.is_dir()
    finally:
        parent.kill()
        live.stop()
    assert not live.work_dir.exists()


def test_a_cgroup_another_worker_just_made_is_not_removed_as_stale() -> None:
    """In the real cgroup hierarchy: an empty node cgroup whose owner lives (a worker starting its node,
    no task in it yet) stays; one whose owner ended goes."""
    child = subprocess.Popen(["true"])
    child.wait()
    ours, orphan = cgroup_root_name(), f"{CGROUP_PREFIX}{child.pid}-0a1b2c3d"
    memory = Cgroups.of_host().hierarchy("memory")
    for name in (ours, orphan):
        (memory / name).mkdir()
    try:
        remove_stale_cgroups(CGROUP_PREFIX)
        assert (memory / ours).is_dir()
        assert not (memory / orphan).exists()
    finally:
        for name in (ours, orphan):
            with contextlib.suppress(OSError):
                (memory / name).rmdir()
