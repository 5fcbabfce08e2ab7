"""Plays the node (the kubelet) for Config Sync's reconciler Pods on the local control plane.

PLAYED BY US, NOT A KUBELET. The local control plane has no nodes: kube-controller-manager creates the
reconciler Pods and nothing runs them. This module runs the containers we have binaries for (Config
Sync's `reconciler`, built from its source, and our sidecar where our webhook added it) as real processes
and writes the Pod status a kubelet would. Our sidecar's "image" is played too: the host's Python, this
checkout and its virtualenv, bind-mounted read-only at their own paths.
What is real: the process, its arguments and environment from the Pod spec, its ServiceAccount token
(TokenRequest API, bound to the Pod), its memory cgroup with the container's limit (following
`pods/resize`), the kernel's OOM kills. What is ours: the Pod lifecycle around it (status, restarts with
a kubelet-like backoff, the volumes). Containers we have no binary for (git-sync, otel-agent) are not
run; they are reported running and ready so the Deployment becomes available as on a node: the test
writes the commits git-sync would fetch into the `repo` volume, and nothing needs otel-agent. Results
that depend on this say so.

How a Pod runs here:
- a *sandbox* process (`unshare --net`) holds the Pod's own network namespace with only `lo` up, and
  forwards 127.0.0.1:<API server port> inside it to a Unix socket served by the supervisor, which
  forwards to the API server on the host's loopback: all traffic stays on loopback and Unix sockets
  (two Config Sync processes in one network namespace would collide on :8080);
- each container runs in that network namespace and its own mount namespace (`nsenter` + `unshare
  --mount`), chrooted into a directory of ours where its `volumeMounts`, the binary and the token volume
  are bind-mounted, as the Pod's user, in a memory cgroup (v1 or v2) whose limit is its memory limit;
- the supervisor (this module as a process, `python -m controlplane.node supervise CONFIG`) watches the
  Pods, starts and stops them, restarts a container after it exits (10 s, doubling, at most 5 min, as
  the kubelet), and writes `phase`, `conditions`, `containerStatuses` (with `resources`,
  `allocatedResources`, `lastState.terminated.reason: OOMKilled`) and resize conditions.
- Pods are never bound to a Node (the pod garbage collector would delete them); an unbound Pod is
  deleted at once, so a container is stopped when its Pod's deletion is seen, before the next Pod's
  containers start (events are handled in order).

Cleanup: every process started here carries a parent-death signal, the supervisor stops its Pods and
removes its cgroups on SIGTERM (which it gets when its parent dies, even by SIGKILL), and a new
supervisor removes cgroups left by a dead one. Mounts live in private mount namespaces and vanish with
their processes.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import fcntl
import json
import math
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from autoscaler.quantity import QuantityError
from autoscaler.quantity import parse as quantity_parse

JSON = dict[str, Any]
KUBELET_BACKOFF_MAX = 300.0
KUBELET_BACKOFF_RESET = 600.0
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_PR_SET_PDEATHSIG = 1
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC = 1, 32, 4096, 16384


class NodeError(RuntimeError):
    """The harness could not run a Pod (a missing binary, an unusable cgroup, an unsupported volume)."""


# ----- memory cgroups (v1 or v2) -------------------------------------------------------------------------
class MemoryCgroup:
    """One container's memory cgroup, under the cgroup this process runs in."""

    def __init__(self, path: Path, version: int) -> None:
        self.path = path
        self.version = version

    @staticmethod
    def parent_of_this_process() -> tuple[Path, int]:
        """The memory cgroup this process is in, and the hierarchy's version."""
        lines = Path("/proc/self/cgroup").read_text().splitlines()
        for line in lines:
            _, controllers, path = line.split(":", 2)
            if "memory" in controllers.split(","):
                return Path("/sys/fs/cgroup/memory") / path.lstrip("/"), 1
        unified = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
        root = Path("/sys/fs/cgroup")
        if unified is not None and "memory" in (root / "cgroup.controllers").read_text().split():
            return root / unified.lstrip("/"), 2
        raise NodeError("no memory cgroup controller is available (neither cgroup v1 nor v2)")

    @classmethod
    def create(cls, parent: Path, version: int, name: str) -> MemoryCgroup:
        if version == 2:
            try:
                (parent / "cgroup.subtree_control").write_text("+memory")
            except OSError as error:
                raise NodeError(f"cannot enable the memory controller under {parent}: {error}") from error
        path = parent / name
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise NodeError(f"cannot create the memory cgroup {path}: {error}") from error
        return cls(path, version)

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version == 1 else v2)

    def set_limit(self, limit: int | None) -> None:
        """Raises OSError when the kernel refuses (v1: EBUSY when usage cannot be brought under it)."""
        if self.version == 1:
            value = str(limit if limit is not None else -1)
        else:
            value = str(limit) if limit is not None else "max"
        self._file("memory.limit_in_bytes", "memory.max").write_text(value)

    def limit(self) -> int | None:
        text = self._file("memory.limit_in_bytes", "memory.max").read_text().strip()
        value = None if text == "max" else int(text)
        return None if value is None or value >= 1 << 62 else value

    def usage(self) -> int:
        return int(self._file("memory.usage_in_bytes", "memory.current").read_text())

    def oom_kills(self) -> int:
        text = self._file("memory.oom_control", "memory.events").read_text()
        for line in text.splitlines():
            name, _, value = line.partition(" ")
            if name == "oom_kill":
                return int(value)
        return 0

    def remove(self) -> None:
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.1)  # the last task is still exiting


def remove_stale_cgroups(parent: Path) -> None:
    """Cgroups of supervisors that died without cleaning up (their pid is in the name)."""
    for stale in parent.glob("objcount-node-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            for child in sorted(stale.rglob("*"), key=lambda p: -len(p.parts)):
                if child.is_dir():
                    with contextlib.suppress(OSError):
                        child.rmdir()
            with contextlib.suppress(OSError):
                stale.rmdir()


# ----- loopback <-> Unix socket forwarding --------------------------------------------------------------
def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(1 << 16):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                end.close()


def forward(listener: socket.socket, connect: Callable[[], socket.socket]) -> None:
    """Accept on `listener` forever; splice each connection to a new `connect()` in two threads."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for source, sink in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(source, sink), daemon=True).start()


def _bring_loopback_up() -> None:
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, siocgifflags, request))[1]
        fcntl.ioctl(sock, siocsifflags, struct.pack("16sH22x", b"lo", flags | iff_up))


def sandbox_main(port: int, unix_socket: str) -> None:
    """Inside a new network namespace: `lo` up, 127.0.0.1:port forwarded to the API server's socket."""
    _bring_loopback_up()
    listener = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))

    def connect() -> socket.socket:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(unix_socket)
        return upstream

    forward(listener, connect)


# ----- one container: mounts, chroot, user, cgroup, exec ------------------------------------------------
@dataclass
class ContainerSpec:
    """What `container_main` needs to exec one container (written as JSON for the child)."""

    root: str
    argv: list[str]
    env: dict[str, str]
    mounts: list[tuple[str, str, bool]]  # (host path, path in the container, read-only)
    cgroup_procs: str
    working_dir: str = "/"
    uid: int = 0
    gid: int = 0
    groups: list[int] = field(default_factory=list)


def _mount(source: str, target: str, flags: int) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    if libc.mount(source.encode(), target.encode(), None, flags, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {source} on {target}: {os.strerror(errno)}")


def container_main(spec_file: str) -> None:
    """Inside the Pod's network namespace and a new mount namespace: become the container, then exec."""
    spec = ContainerSpec(**json.loads(Path(spec_file).read_text()))
    root = Path(spec.root)
    for source, target, read_only in spec.mounts:
        where = root / target.lstrip("/")
        if Path(source).is_symlink():  # e.g. /lib -> usr/lib on a merged-/usr host: the same link
            where.parent.mkdir(parents=True, exist_ok=True)
            if not where.is_symlink():
                where.symlink_to(os.readlink(source))
            continue
        if Path(source).is_dir():
            where.mkdir(parents=True, exist_ok=True)
        else:
            where.parent.mkdir(parents=True, exist_ok=True)
            where.touch(exist_ok=True)
        _mount(source, str(where), _MS_BIND | _MS_REC)
        if read_only:
            _mount(source, str(where), _MS_BIND | _MS_REMOUNT | _MS_RDONLY)
    Path(spec.cgroup_procs).write_text(str(os.getpid()))
    os.chroot(root)
    os.chdir(spec.working_dir)
    os.setgroups(spec.groups)
    os.setgid(spec.gid)
    os.setuid(spec.uid)
    # A change of user clears the parent-death signal: set it again, for the supervisor.
    ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    os.execve(spec.argv[0], spec.argv, spec.env)


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6").prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class Sandbox:
    """A Pod's network namespace, held by a small forwarding process."""

    def __init__(self, port: int, unix_socket: Path) -> None:
        self.process = subprocess.Popen(
            [
                "unshare",
                "--net",
                sys.executable,
                "-m",
                "controlplane.node",
                "sandbox",
                str(port),
                str(unix_socket),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - started from the supervisor's own threads only
        )
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            self.process.kill()
            raise NodeError(f"the network sandbox did not start (exit {self.process.wait()})")

    def start_container(self, spec: ContainerSpec, spec_file: Path, log: Path) -> subprocess.Popen[bytes]:
        spec_file.write_text(json.dumps(spec.__dict__))
        with log.open("ab") as out:
            return subprocess.Popen(
                [
                    "nsenter",
                    f"--net=/proc/{self.process.pid}/ns/net",
                    "unshare",
                    "--mount",
                    "--propagation",
                    "private",
                    sys.executable,
                    "-m",
                    "controlplane.node",
                    "container",
                    str(spec_file),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - started from the supervisor's own threads only
            )

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()


def stop_process(process: subprocess.Popen[bytes], grace: float) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def memory_bytes(quantity: str | None) -> int | None:
    if not quantity:
        return None
    try:
        return math.ceil(quantity_parse(quantity))
    except QuantityError as error:
        raise NodeError(str(error)) from error


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# ----- the supervisor ------------------------------------------------------------------------------------
@dataclass
class NodeConfig:
    kubeconfig: str
    api_port: int
    work_dir: str
    repos_dir: str
    binaries: dict[str, str]  # container name -> binary on this machine
    # container name -> host directories it needs at the same paths, read-only (an interpreter's)
    runtime_dirs: dict[str, list[str]] = field(default_factory=dict)
    namespace: str = "config-management-system"
    selector: str = "app in (reconciler, reconciler-manager)"
    restart_backoff_seconds: float = 10.0


class ContainerRunner:
    """Runs one container of a Pod, restarts it with backoff, follows its memory limit."""

    def __init__(self, pod: PodRunner, spec: JSON, binary: str) -> None:
        self.pod = pod
        self.name: str = spec["name"]
        self.spec = spec
        self.binary = binary
        self.cgroup = MemoryCgroup.create(
            pod.node.cgroup_root, pod.node.cgroup_version, f"{pod.uid}-{self.name}"
        )
        self.restarts = 0
        self.state: JSON = {"waiting": {"reason": "ContainerCreating"}}
        self.last_state: JSON = {}
        self.resources: JSON = spec.get("resources") or {}
        self.resize_error = ""
        self.process: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._apply_limit(self.resources, at_start=True)
        self._thread = threading.Thread(target=self._run, name=f"{pod.name}/{self.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def ready(self) -> bool:
        return "running" in self.state

    def status(self) -> JSON:
        status: JSON = {
            "name": self.name,
            "image": self.spec.get("image") or self.name,
            "imageID": "",
            "containerID": f"objcount-node://{self.pod.uid}/{self.name}/{self.restarts}",
            "ready": self.ready,
            "started": self.ready,
            "restartCount": self.restarts,
            "state": self.state,
            "resources": self.resources,
            "allocatedResources": self.resources.get("requests") or {},
        }
        if self.last_state:
            status["lastState"] = self.last_state
        return status

    def _apply_limit(self, resources: JSON, *, at_start: bool = False) -> bool:
        """Set the cgroup's limit; False (and why, for the Pod status) when it is refused. A lower limit
        below the current usage is refused before the cgroup is touched, as the kubelet checks before
        lowering a memory limit (on cgroup v2 the kernel would reclaim and OOM-kill instead); a write
        the kernel then refuses (v1: EBUSY) is reported too."""
        limit = memory_bytes((resources.get("limits") or {}).get("memory"))
        if limit is not None and not at_start and limit < (self.cgroup.limit() or 1 << 62):
            usage = self.cgroup.usage()
            if usage > limit:
                self.resize_error = (
                    f"attempting to set the memory limit ({limit}) below the current usage ({usage})"
                )
                return False
        try:
            self.cgroup.set_limit(limit)
        except OSError as error:
            self.resize_error = f"the kernel refused the memory limit {limit}: {error.strerror}"
            return False
        self.resize_error = ""
        return True

    def resize(self, spec: JSON) -> bool:
        """Follow a `pods/resize`; True when what the status shows changed."""
        self.spec = spec
        wanted = spec.get("resources") or {}
        if wanted == self.resources:
            return False
        error_before = self.resize_error
        if self._apply_limit(wanted):
            self.resources = wanted
            return True
        return self.resize_error != error_before

    def _run(self) -> None:
        backoff = self.pod.node.config.restart_backoff_seconds
        first = True
        while not self._stopping.is_set():
            if not first:
                self.restarts += 1  # as the kubelet: counted when the container is started again
            first = False
            began = time.monotonic()
            oom_before = self.cgroup.oom_kills()
            try:
                self.process = self.pod.start_container(self)
            except (OSError, NodeError) as error:
                self.state = {"waiting": {"reason": "CreateContainerError", "message": str(error)}}
                self.pod.publish()
                return
            self.state = {"running": {"startedAt": _now()}}
            self.pod.publish()
            code = self.process.wait()
            if self._stopping.is_set():
                return
            ran = time.monotonic() - began
            oom_killed = self.cgroup.oom_kills() > oom_before
            exit_code = 128 - code if code < 0 else code
            reason = "OOMKilled" if oom_killed else ("Completed" if exit_code == 0 else "Error")
            self.last_state = {"terminated": {"exitCode": exit_code, "reason": reason, "finishedAt": _now()}}
            backoff = self.pod.node.config.restart_backoff_seconds if ran > KUBELET_BACKOFF_RESET else backoff
            self.state = {"waiting": {"reason": "CrashLoopBackOff", "message": f"back-off {backoff:.0f}s"}}
            self.pod.publish()
            self._stopping.wait(backoff)
            backoff = min(backoff * 2, KUBELET_BACKOFF_MAX)

    def stop(self, grace: float) -> None:
        self._stopping.set()
        if self.process is not None:
            stop_process(self.process, grace)
        if self._thread.is_alive():
            self._thread.join()
        self.cgroup.remove()


class PodRunner:
    """One Pod: its directory, volumes, token, sandbox and the containers we run."""

    def __init__(self, node: Node, pod: JSON) -> None:
        self.node = node
        meta = pod["metadata"]
        self.uid: str = meta["uid"]
        self.name: str = meta["name"]
        self.namespace: str = meta["namespace"]
        self.pod = pod
        self.dir = Path(node.config.work_dir) / "pods" / f"{self.name}-{self.uid[:8]}"
        self.dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self.started_at = _now()
        self.volumes = self._prepare_volumes()
        self.sandbox = Sandbox(node.config.api_port, node.api_socket)
        self.containers = {
            c["name"]: ContainerRunner(self, c, node.config.binaries[c["name"]])
            for c in pod["spec"]["containers"]
            if c["name"] in node.config.binaries
        }

    # -- volumes ------------------------------------------------------------------------------------
    def _prepare_volumes(self) -> dict[str, Path]:
        """The volumes the containers we run mount (and nothing else), as directories of ours."""
        used = {
            mount["name"]
            for container in self.pod["spec"]["containers"]
            if container["name"] in self.node.config.binaries
            for mount in container.get("volumeMounts") or []
        }
        fs_group = (self.pod["spec"].get("securityContext") or {}).get("fsGroup")
        volumes: dict[str, Path] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            name = volume["name"]
            if name not in used:
                continue
            path = self.dir / "volumes" / name
            if name == "repo":
                # git-sync's volume: the RSync's directory, which the test (playing git-sync) fills.
                path = self.node.repo_dir(self.pod)
            elif "projected" in volume:
                self._write_projected(path, volume["projected"])
            elif "emptyDir" in volume:
                path.mkdir(parents=True, exist_ok=True)
                if fs_group is not None:
                    os.chown(path, -1, fs_group)
                    path.chmod(0o2775)
            elif "configMap" in volume:
                self._write_config_map(path, volume["configMap"])
            elif "secret" in volume:
                self._write_secret(path, volume["secret"])
            else:
                raise NodeError(
                    f"volume {name} of {self.name}: only emptyDir, configMap, secret and projected are played"
                )
            volumes[name] = path
        return volumes

    def _write_projected(self, path: Path, projected: JSON) -> None:
        path.mkdir(parents=True, exist_ok=True)
        for source in projected.get("sources") or []:
            if "serviceAccountToken" in source:
                (path / source["serviceAccountToken"]["path"]).write_text(self._token())
            elif "configMap" in source:
                self._write_config_map(path, source["configMap"])
            elif "downwardAPI" in source:
                for item in source["downwardAPI"].get("items") or []:
                    value = self._field(item["fieldRef"]["fieldPath"])
                    (path / item["path"]).write_text(value)
        for file in path.iterdir():
            file.chmod(0o644)

    def _write_config_map(self, path: Path, ref: JSON) -> None:
        path.mkdir(parents=True, exist_ok=True)
        data = self.node.get_json(f"/api/v1/namespaces/{self.namespace}/configmaps/{ref['name']}")["data"]
        items = ref.get("items") or [{"key": k, "path": k} for k in data]
        for item in items:
            (path / item["path"]).write_text(data[item["key"]])

    def _write_secret(self, path: Path, ref: JSON) -> None:
        """As the kubelet: every key a file (mode `defaultMode`, else 0644), written once at start; an
        optional Secret that does not exist leaves the volume empty."""
        path.mkdir(parents=True, exist_ok=True)
        try:
            secret = self.node.get_json(f"/api/v1/namespaces/{self.namespace}/secrets/{ref['secretName']}")
        except self.node.kubeapi.NotFound:
            if ref.get("optional"):
                return  # as the kubelet: an optional Secret that does not exist is an empty volume
            raise
        for key, value in (secret.get("data") or {}).items():
            file = path / key
            file.write_bytes(base64.b64decode(value))
            file.chmod(ref.get("defaultMode", 0o644))

    def _token(self) -> str:
        account = self.pod["spec"].get("serviceAccountName") or "default"
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "expirationSeconds": 86400,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.name, "uid": self.uid},
            },
        }
        path = f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{account}/token"
        token: str = self.node.post_json(path, request)["status"]["token"]
        return token

    def _field(self, field_path: str) -> str:
        meta = self.pod["metadata"]
        simple: dict[str, str] = {
            "metadata.name": self.name,
            "metadata.namespace": self.namespace,
            "metadata.uid": self.uid,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", ""),
            "spec.nodeName": "",
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        if field_path in simple:
            return simple[field_path]
        for prefix, values in (
            ("metadata.labels", meta.get("labels")),
            ("metadata.annotations", meta.get("annotations")),
        ):
            if field_path.startswith(prefix + "['"):
                return str((values or {}).get(field_path[len(prefix) + 2 : -2], ""))
        raise NodeError(f"unsupported fieldRef {field_path}")

    # -- containers ---------------------------------------------------------------------------------
    def _env(self, container: JSON) -> dict[str, str]:
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOSTNAME": self.name,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.node.config.api_port),
        }
        # As the kubelet: envFrom first, then env (which wins).
        for source in container.get("envFrom") or []:
            ref = source.get("configMapRef")
            if ref is None:
                raise NodeError(f"envFrom {source} of {container['name']}: only configMapRef is played")
            try:
                data = self.node.get_json(f"/api/v1/namespaces/{self.namespace}/configmaps/{ref['name']}")
            except self.node.kubeapi.NotFound:
                if ref.get("optional"):
                    continue
                raise
            env.update({source.get("prefix", "") + k: v for k, v in (data.get("data") or {}).items()})
        for item in container.get("env") or []:
            if "value" in item or "valueFrom" not in item:
                env[item["name"]] = item.get("value", "")
            elif "fieldRef" in item["valueFrom"]:
                env[item["name"]] = self._field(item["valueFrom"]["fieldRef"]["fieldPath"])
            elif "configMapKeyRef" in item["valueFrom"]:
                ref = item["valueFrom"]["configMapKeyRef"]
                data = self.node.get_json(f"/api/v1/namespaces/{self.namespace}/configmaps/{ref['name']}")
                env[item["name"]] = data.get("data", {}).get(ref["key"], "")
        return env

    def start_container(self, runner: ContainerRunner) -> subprocess.Popen[bytes]:
        container = runner.spec
        root = self.dir / "rootfs" / runner.name
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc" / "hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
        command = (container.get("command") or [f"/{runner.name}"]) + (container.get("args") or [])
        mounts = [(runner.binary, command[0], True), ("/proc", "/proc", False)]
        mounts += [(d, d, True) for d in self.node.config.runtime_dirs.get(runner.name, [])]
        mounts += [(f"/dev/{d}", f"/dev/{d}", False) for d in ("null", "zero", "urandom", "random")]
        for mount in container.get("volumeMounts") or []:
            if mount["name"] not in self.volumes:
                raise NodeError(f"volume {mount['name']} of {runner.name} is not supported by the harness")
            source = self.volumes[mount["name"]] / mount.get("subPath", "")
            mounts.append((str(source), mount["mountPath"], bool(mount.get("readOnly"))))
        pod_security = self.pod["spec"].get("securityContext") or {}
        security = {**pod_security, **(container.get("securityContext") or {})}
        fs_group = pod_security.get("fsGroup")
        spec = ContainerSpec(
            root=str(root),
            argv=command,
            env=self._env(container),
            mounts=mounts,
            cgroup_procs=str(runner.cgroup.procs_file),
            working_dir=container.get("workingDir") or "/",
            uid=security.get("runAsUser", 0),
            gid=security.get("runAsGroup", 0),
            groups=[fs_group] if fs_group is not None else [],
        )
        log = self.node.log_dir / f"{self.name}.{runner.name}.log"
        process = self.sandbox.start_container(spec, self.dir / f"{runner.name}.json", log)
        self.node.write_state(self, runner, process.pid)
        return process

    # -- status -------------------------------------------------------------------------------------
    def update(self, pod: JSON) -> None:
        """A new version of the Pod (often our own status write): publish only when a resize changed it."""
        self.pod = pod
        changed = False
        for container in pod["spec"]["containers"]:
            runner = self.containers.get(container["name"])
            if runner is not None:
                changed |= runner.resize(container)
        if changed:
            self.publish()

    def publish(self) -> None:
        """Write the status a kubelet would (merge patch of the status subresource)."""
        with self._lock:
            statuses = []
            for container in self.pod["spec"]["containers"]:
                runner = self.containers.get(container["name"])
                statuses.append(runner.status() if runner else self._played_status(container))
            ready = all(s["ready"] for s in statuses)
            conditions = [
                {"type": "PodReadyToStartContainers", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": str(ready)},
                {"type": "Ready", "status": str(ready)},
            ]
            errors = [r.resize_error for r in self.containers.values() if r.resize_error]
            if errors:
                conditions.append(
                    {"type": "PodResizeInProgress", "status": "True", "reason": "Error", "message": errors[0]}
                )
            status = {
                "phase": "Running",
                "startTime": self.started_at,
                "observedGeneration": self.pod["metadata"].get("generation", 1),
                "conditions": [self._with_transition(c) for c in conditions],
                "containerStatuses": statuses,
            }
            self.node.patch_status(self, status)

    def _with_transition(self, condition: JSON) -> JSON:
        """Keep lastTransitionTime while a condition's status is unchanged (availability counts from it)."""
        old = next(
            (
                c
                for c in (self.pod.get("status") or {}).get("conditions") or []
                if c["type"] == condition["type"]
            ),
            None,
        )
        same = old is not None and old.get("status") == condition["status"] and old.get("lastTransitionTime")
        return {**condition, "lastTransitionTime": old["lastTransitionTime"] if same and old else _now()}

    def _played_status(self, container: JSON) -> JSON:
        return {
            "name": container["name"],
            "image": container.get("image") or container["name"],
            "imageID": "",
            "containerID": f"objcount-node://{self.uid}/{container['name']}/not-run",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": self.started_at}},
            "resources": container.get("resources") or {},
            "allocatedResources": (container.get("resources") or {}).get("requests") or {},
        }

    def stop(self) -> None:
        grace = min(float(self.pod["spec"].get("terminationGracePeriodSeconds", 30)), 10.0)
        for runner in self.containers.values():
            runner.stop(grace)
        self.sandbox.stop()
        self.node.remove_state(self)
        shutil.rmtree(self.dir, ignore_errors=True)


class Node:
    """The supervisor: watches the Pods it plays the node for and runs them."""

    def __init__(self, config: NodeConfig) -> None:
        from inventory import kubeapi  # noqa: PLC0415 - only the supervisor process needs the client

        self.config = config
        self.kubeapi = kubeapi
        self.api = kubeapi.KubeApi.connect(config.kubeconfig)
        self.log_dir = Path(config.work_dir) / "logs"
        self.state_dir = Path(config.work_dir) / "state"
        for directory in (self.log_dir, self.state_dir):
            directory.mkdir(parents=True, exist_ok=True)
        parent, self.cgroup_version = MemoryCgroup.parent_of_this_process()
        remove_stale_cgroups(parent)
        self.cgroup_root = parent / f"objcount-node-{os.getpid()}"
        self.pods: dict[str, PodRunner] = {}
        self.api_socket = Path(config.work_dir) / "apiserver.sock"
        self.api_socket.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.api_socket))
        listener.listen(64)
        upstream = ("127.0.0.1", config.api_port)
        threading.Thread(
            target=forward, args=(listener, lambda: socket.create_connection(upstream)), daemon=True
        ).start()

    # -- API access ------------------------------------------------------------------------------------
    def get_json(self, path: str) -> JSON:
        return self.api.request_json("GET", path)

    def post_json(self, path: str, body: JSON) -> JSON:
        return self.api.request_json("POST", path, body=body)

    def patch_status(self, pod: PodRunner, status: JSON) -> None:
        try:
            self.api.patch(
                self.kubeapi.POD, pod.namespace, pod.name, {"status": status}, subresource="status"
            )
        except self.kubeapi.NotFound:
            pass  # deleted meanwhile: its runner is being stopped
        except self.kubeapi.ApiError as error:
            print(f"node: status of {pod.name}: {error}", file=sys.stderr, flush=True)

    def repo_dir(self, pod: JSON) -> Path:
        labels = pod["metadata"].get("labels") or {}
        kind = labels.get("configsync.gke.io/sync-kind", "")
        namespace = labels.get("configsync.gke.io/sync-namespace", "")
        name = labels.get("configsync.gke.io/sync-name", "")
        path = repo_path(Path(self.config.repos_dir), kind, namespace, name)
        (path / "source").mkdir(parents=True, exist_ok=True)
        return path

    def write_state(self, pod: PodRunner, runner: ContainerRunner, pid: int) -> None:
        state = {
            "pod": pod.name,
            "uid": pod.uid,
            "container": runner.name,
            "pid": pid,
            "cgroup": str(runner.cgroup.path),
        }
        target = self.state_dir / f"{pod.name}.{runner.name}.json"
        temporary = target.with_suffix(".tmp")
        temporary.write_text(json.dumps(state))
        os.replace(temporary, target)

    def remove_state(self, pod: PodRunner) -> None:
        for file in self.state_dir.glob(f"{pod.name}.*.json"):
            file.unlink(missing_ok=True)

    # -- the watch -------------------------------------------------------------------------------------
    def handle(self, kind: str, pod: JSON) -> None:
        uid = pod["metadata"]["uid"]
        runner = self.pods.get(uid)
        if kind == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            if runner is not None:
                del self.pods[uid]
                runner.stop()
            return
        if runner is None:
            try:
                runner = PodRunner(self, pod)
            except (NodeError, OSError, self.kubeapi.ApiError) as error:
                print(f"node: cannot run {pod['metadata']['name']}: {error}", file=sys.stderr, flush=True)
                return
            self.pods[uid] = runner
            for container in runner.containers.values():
                container.start()
            runner.publish()
        else:
            runner.update(pod)

    def run(self, ready: Callable[[], None]) -> None:
        announced = False
        while True:
            try:
                version = self._list()
                if not announced:
                    ready()
                    announced = True
                self._watch(version)
            except self.kubeapi.ApiError as error:
                print(f"node: watch: {error}; re-listing", file=sys.stderr, flush=True)
                time.sleep(1)

    def _list(self) -> str:
        body = orjson.loads(
            self.api.list_page(self.kubeapi.POD, self.config.namespace, label_selector=self.config.selector)
        )
        seen = set()
        for pod in body["items"]:
            seen.add(pod["metadata"]["uid"])
            self.handle("ADDED" if pod["metadata"]["uid"] not in self.pods else "MODIFIED", pod)
        for uid in [u for u in self.pods if u not in seen]:
            self.pods.pop(uid).stop()
        version: str = body["metadata"]["resourceVersion"]
        return version

    def _watch(self, version: str) -> None:
        stream = self.api.watch(
            self.kubeapi.POD,
            self.config.namespace,
            resource_version=version,
            label_selector=self.config.selector,
        )
        for line in stream:
            event = orjson.loads(line)
            if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                self.handle(event["type"], event["object"])
            elif event["type"] == "ERROR":
                return

    def shutdown(self) -> None:
        for uid in list(self.pods):
            self.pods.pop(uid).stop()
        for child in sorted(self.cgroup_root.glob("*"), reverse=True):
            with contextlib.suppress(OSError):
                child.rmdir()
        with contextlib.suppress(OSError):
            self.cgroup_root.rmdir()


def repo_path(repos_dir: Path, kind: str, namespace: str, name: str) -> Path:
    """The directory standing for an RSync's `repo` volume (git-sync's root is its `source/`)."""
    return repos_dir / f"{kind}.{namespace}.{name}"


def supervise_main(config_file: str) -> None:
    config = NodeConfig(**json.loads(Path(config_file).read_text()))
    node = Node(config)
    node.cgroup_root.mkdir(exist_ok=True)
    stopping = threading.Event()

    def on_signal(*_: object) -> None:
        if not stopping.is_set():
            stopping.set()
            node.shutdown()
            os._exit(0)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    worker = threading.Thread(target=node.run, args=(lambda: print("ready", flush=True),), daemon=True)
    worker.start()
    while not stopping.is_set():
        stopping.wait(1)


# ----- the handle tests, `make run` and the profiles use ---------------------------------------------
@dataclass
class ContainerState:
    pid: int
    cgroup: MemoryCgroup

    def resident_kib(self) -> tuple[int, int]:
        """The process's resident memory now and at its peak (`VmRSS`, `VmHWM` of /proc), KiB; OSError
        once the process is gone."""
        fields = dict(
            line.split(":", 1) for line in Path(f"/proc/{self.pid}/status").read_text().splitlines()
        )
        try:
            return int(fields["VmRSS"].split()[0]), int(fields["VmHWM"].split()[0])
        except (KeyError, ValueError, IndexError) as error:  # a zombie has no Vm* lines
            raise OSError(f"no resident memory for process {self.pid}") from error


class NodeHarness:
    """Starts the supervisor as a child process and stops it (and everything it runs) on exit."""

    def __init__(
        self,
        *,
        kubeconfig: Path,
        api_port: int,
        work_dir: Path,
        binaries: dict[str, Path],
        runtime_dirs: dict[str, list[Path]] | None = None,
        restart_backoff_seconds: float = 10.0,
    ) -> None:
        self.work_dir = work_dir
        self.repos_dir = work_dir / "repos"
        self.config = NodeConfig(
            kubeconfig=str(kubeconfig),
            api_port=api_port,
            work_dir=str(work_dir),
            repos_dir=str(self.repos_dir),
            binaries={name: str(path) for name, path in binaries.items()},
            runtime_dirs={name: [str(d) for d in dirs] for name, dirs in (runtime_dirs or {}).items()},
            restart_backoff_seconds=restart_backoff_seconds,
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> NodeHarness:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        config_file = self.work_dir / "node.json"
        config_file.write_text(json.dumps(self.config.__dict__))
        log = (self.work_dir / "node.log").open("ab")
        repo = Path(__file__).resolve().parent.parent
        self.process = subprocess.Popen(
            [sys.executable, "-m", "controlplane.node", "supervise", str(config_file)],
            cwd=repo,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=log,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - started from the owning thread only
        )
        log.close()
        assert self.process.stdout is not None
        if self.process.stdout.readline().strip() != b"ready":
            code = self.process.wait()
            tail = (self.work_dir / "node.log").read_text(errors="replace")[-2000:]
            raise NodeError(f"the node harness did not start (exit {code}):\n{tail}")
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(60)
        self.process = None

    def __enter__(self) -> NodeHarness:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def repo_dir(self, kind: str, namespace: str, name: str) -> Path:
        path = repo_path(self.repos_dir, kind, namespace, name)
        (path / "source").mkdir(parents=True, exist_ok=True)
        return path

    def container(self, pod: str, container: str = "reconciler") -> ContainerState | None:
        """The running process of a container of a Pod, as last started (None before it starts)."""
        file = self.work_dir / "state" / f"{pod}.{container}.json"
        try:
            state = json.loads(file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None
        _, version = MemoryCgroup.parent_of_this_process()
        return ContainerState(state["pid"], MemoryCgroup(Path(state["cgroup"]), version))

    def log(self, pod: str, container: str = "reconciler") -> str:
        path = self.work_dir / "logs" / f"{pod}.{container}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def pids(self) -> Iterator[int]:
        if self.process is not None:
            yield self.process.pid


def main(argv: list[str]) -> None:
    command, *args = argv
    if command == "supervise":
        supervise_main(*args)
    elif command == "sandbox":
        sandbox_main(int(args[0]), args[1])
    elif command == "container":
        container_main(*args)
    else:
        raise SystemExit(
            "usage: python -m controlplane.node supervise CONFIG | sandbox PORT SOCKET | container SPEC"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
