"""The namespaces that hold a whole local stack with a real node: network, mount and PID.

Everything of the real-node stack (etcd, kube-apiserver, the controllers, containerd, the kubelet,
kube-proxy, the git server and every Pod) runs inside one network, mount and PID namespace that this
module creates, so that no packet and no DNS query leaves it, and two stacks on one machine never
collide (each has its own addresses and ports). Inside:

- `lo` is up, and a bridge (`BRIDGE`) holds the node's address (`NODE_IP`); Pods get addresses on it
  from the bridge CNI plugin, and the node routes between them;
- `/etc/resolv.conf` names only 127.0.0.1, where nothing answers: a name lookup (an image pull, say)
  fails at once, inside the namespace;
- the mount namespace is shared-propagating inside (the kubelet's volume mounts reach containerd's
  shims), private towards the host: every mount made inside vanishes with the namespace.

The first process of the PID namespace is `python -m controlplane.sandbox init`. It holds the namespaces,
reaps orphans (containerd's shims), and on SIGTERM stops every process inside, removes the cgroups named
in its configuration and exits, which ends the namespaces. It gets that SIGTERM from `unshare
--kill-child` when `unshare` dies, and `unshare` carries a parent-death signal: when the process that
started the sandbox dies, even by SIGKILL, nothing is left behind. Only where the init itself is killed
(SIGKILL, or the machine going down) do its cgroups and files stay: the host side and the init hold one
lock (`sandbox.lock` in the work directory) while either lives, so the next stack removes a sandbox
directory whose lock nobody holds (`remove_stale_sandboxes`), as it removes unused cgroups.

The host side reaches a port inside through `forward()`: a listener on the host's loopback whose
connections are dialled from inside the namespace (a thread joins the network namespace with setns).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.cgroups import CgroupError, Cgroups

BRIDGE = "objcount0"
NODE_IP = "10.88.0.1"
POD_CIDR = "10.88.0.0/16"
_CLONE_NEWNET = 0x40000000
_PR_SET_PDEATHSIG = 1
_STOP_GRACE = 10.0
# How long the init keeps trying to remove cgroups that refuse rmdir just after their tasks exited.
_CGROUP_PATIENCE = 10.0
WORK_DIR_PREFIX = "objcount-sandbox-"
LOCK = "sandbox.lock"


class SandboxError(RuntimeError):
    """The namespaces could not be made or entered."""


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL("libc.so.6", use_errno=True)


def die_with_parent() -> None:
    """Runs in a child between fork and exec: the kernel SIGKILLs it when its parent thread dies."""
    _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def cgroup_dirs(name: str) -> list[Path]:
    """`name` (a path relative to each hierarchy's root) in every cgroup hierarchy of the host ([] where the
    host has no cgroup file system)."""
    try:
        return Cgroups.of_host().dirs(name)
    except CgroupError:
        return []


def remove_cgroup_tree(path: Path, until: float | None = None) -> bool:
    """Remove a cgroup directory and every cgroup below it, deepest first (rmdir is how cgroups go);
    whether it is gone.

    A cgroup whose last task has just exited can refuse rmdir (EBUSY) for a moment, longer on a loaded
    machine, while the kernel lets go of it (runc retries its rmdir for the same reason). So what is left
    is tried again after a pause doubling from 10 ms, until the monotonic time `until` (None: once)."""
    pause = 0.01
    while True:
        _rmdir_deepest_first(path)
        if not path.exists():
            return True
        if until is None or time.monotonic() + pause > until:
            return False
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def _rmdir_deepest_first(path: Path) -> None:
    with contextlib.suppress(OSError):  # a directory that vanished while it was walked
        below = [p for p in path.rglob("*") if p.is_dir()]
        for sub in sorted(below, key=lambda p: len(p.parts), reverse=True):
            with contextlib.suppress(OSError):
                sub.rmdir()
    with contextlib.suppress(OSError):
        path.rmdir()


def _tasks(path: Path) -> bool:
    for procs in path.rglob("cgroup.procs"):
        with contextlib.suppress(OSError):
            if procs.read_text().strip():
                return True
    return False


def owner_alive(name: str, prefix: str) -> bool:
    """Whether the process whose PID follows `prefix` in the cgroup's name (`prefix<pid>-<random>`) is
    still running. Another test worker may have just made a cgroup it has put no task in yet: its owner,
    alive, keeps it. A name without a PID has no owner to ask."""
    pid = name.removeprefix(prefix).split("-", 1)[0]
    if not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_cgroups(prefix: str) -> None:
    """Remove top-level cgroups named `prefix*` whose owner has ended and that no process uses (left by a
    sandbox that was killed before it could clean up after itself)."""
    try:
        hierarchies = Cgroups.of_host().hierarchies()
    except CgroupError:
        return
    for hierarchy in hierarchies:
        with contextlib.suppress(OSError):
            for path in hierarchy.glob(f"{prefix}*"):
                if path.is_dir() and not owner_alive(path.name, prefix) and not _tasks(path):
                    remove_cgroup_tree(path)


def remove_stale_sandboxes(root: Path | None = None) -> list[Path]:
    """Remove the sandbox directories under `root` (default: the temporary directory) whose lock no
    process holds: their sandbox was killed before it could remove them. A directory without the lock
    file (one being made, or made by an older version) is left alone. Returns what was removed."""
    removed = []
    for work_dir in sorted((root or Path(tempfile.gettempdir())).glob(f"{WORK_DIR_PREFIX}*")):
        try:
            fd = os.open(work_dir / LOCK, os.O_RDWR | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # its sandbox, or the process that started it, is alive
            shutil.rmtree(work_dir, ignore_errors=True)
            removed.append(work_dir)
        finally:
            os.close(fd)
    return removed


def _hold_lock(work_dir: Path) -> int:
    """Lock `work_dir/sandbox.lock` for as long as the returned descriptor (or a copy a child inherits)
    is open. The file is locked before it gets its name, so no one can find it unlocked while it lives."""
    made = work_dir / f".{LOCK}.{os.getpid()}"
    fd = os.open(made, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    made.rename(work_dir / LOCK)
    return fd


# ----- inside: the first process of the PID namespace -----------------------------------------------------
def _run(*argv: str) -> None:
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _set_up_inside(config: dict[str, str]) -> None:
    _run("mount", "--make-rshared", "/")
    _run("mount", "--bind", config["resolv_conf"], "/etc/resolv.conf")
    _run("ip", "link", "set", "lo", "up")
    _run("ip", "link", "add", BRIDGE, "type", "bridge")
    _run("ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE)
    _run("ip", "link", "set", BRIDGE, "up")
    # The node forwards between Pods and from Pods to its own addresses (as on any node).
    Path("/proc/sys/net/ipv4/ip_forward").write_text("1\n")


def _stop_everything_inside(grace: float) -> None:
    """As the PID namespace's first process: signal every other process in it, then reap them."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        while True:
            os.waitpid(-1, 0)


def _unmount_below(directory: str) -> None:
    mounts = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    below = [m for m in mounts if m == directory or m.startswith(directory.rstrip("/") + "/")]
    for mount_point in sorted(set(below), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", mount_point], capture_output=True, check=False)


def init_main(config_file: str) -> None:
    config = json.loads(Path(config_file).read_text())
    # A plain list, not a threading.Event: an Event's set() in a signal handler takes the lock its wait()
    # may hold at that moment, and the init then hangs for ever with the whole stack running (seen when
    # a SIGTERM reached it during Event.wait).
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _: stopping.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _: stopping.append(signum))
    try:
        _set_up_inside(config)
    except subprocess.CalledProcessError as error:
        stderr = error.stderr.decode(errors="replace") if error.stderr else ""
        Path(config["ready_file"]).write_text(f"error: {' '.join(error.cmd)}: {stderr}")
        sys.exit(1)
    Path(config["ready_file"]).write_text("ready")
    while not stopping:
        # Orphans (containerd's shims, a crashed process's children) are ours to reap.
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0] > 0:
                pass
        time.sleep(0.2)  # a signal ends the sleep at once
    _stop_everything_inside(_STOP_GRACE)
    until = time.monotonic() + _CGROUP_PATIENCE
    for name in json.loads(config["cgroups"]):
        for path in cgroup_dirs(name):
            remove_cgroup_tree(path, until)
    # The stack's files (etcd's data, containerd's image store, the Pods' volumes) go with it. The mounts
    # under them (snapshots, volumes, network namespaces) live in this mount namespace: unmount them first.
    _unmount_below(config["work_dir"])
    shutil.rmtree(config["work_dir"], ignore_errors=True)


# ----- outside: the host side ----------------------------------------------------------------------------
@dataclass
class Sandbox:
    """Network, mount and PID namespaces holding one stack; `cgroups` and `work_dir` are removed when it
    ends."""

    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix=WORK_DIR_PREFIX)))
    cgroups: Sequence[str] = ()
    ready_timeout: float = 20.0
    _unshare: subprocess.Popen[bytes] | None = None
    _init_pid: int = 0
    _lock: int = -1
    _listeners: list[socket.socket] = field(default_factory=list)

    def start(self) -> Sandbox:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._lock = _hold_lock(self.work_dir)
        resolv = self.work_dir / "resolv.conf"
        resolv.write_text("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        ready = self.work_dir / "sandbox.ready"
        ready.unlink(missing_ok=True)
        config = self.work_dir / "sandbox.json"
        config.write_text(
            json.dumps(
                {
                    "resolv_conf": str(resolv),
                    "ready_file": str(ready),
                    "cgroups": json.dumps(list(self.cgroups)),
                    "work_dir": str(self.work_dir),
                }
            )
        )
        log = (self.work_dir / "sandbox.log").open("ab")
        try:
            self._unshare = subprocess.Popen(
                [
                    "unshare",
                    "--net",
                    "--mount",
                    "--pid",
                    "--mount-proc",
                    "--propagation=private",
                    "--kill-child=SIGTERM",
                    sys.executable,
                    "-m",
                    "controlplane.sandbox",
                    "init",
                    str(config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the owning thread only
                cwd=str(Path(__file__).resolve().parent.parent),
                pass_fds=(self._lock,),  # init holds the lock too, until it has removed the directory
            )
        finally:
            log.close()
        deadline = time.monotonic() + self.ready_timeout
        while not ready.exists() or not ready.read_text():
            if self._unshare.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SandboxError(f"the sandbox did not start:\n{self.log_tail()}")
            time.sleep(0.05)
        if ready.read_text() != "ready":
            message = ready.read_text()
            self.stop()
            raise SandboxError(f"the sandbox did not start: {message}")
        self._init_pid = self._find_init()
        return self

    def _find_init(self) -> int:
        assert self._unshare is not None
        children = Path(f"/proc/{self._unshare.pid}/task/{self._unshare.pid}/children").read_text().split()
        if len(children) != 1:
            raise SandboxError(f"unshare has {len(children)} children, expected the sandbox's init")
        return int(children[0])

    @property
    def init_pid(self) -> int:
        return self._init_pid

    @property
    def netns(self) -> Path:
        return Path(f"/proc/{self._init_pid}/ns/net")

    def command(self, argv: Sequence[str]) -> list[str]:
        """`argv` run inside the namespaces (its working directory is kept)."""
        return ["nsenter", f"--target={self._init_pid}", "--net", "--mount", "--pid", "--wdns=/", "--", *argv]

    def popen(self, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None) -> SandboxProcess:
        log = log_path.open("ab")
        try:
            outer = subprocess.Popen(
                self.command(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the owning thread only
            )
        finally:
            log.close()
        return SandboxProcess(outer)

    def run(
        self, argv: Sequence[str], *, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(argv), capture_output=True, text=True, check=check, timeout=timeout
        )

    def connect(self, host: str, port: int, timeout: float = 5.0) -> socket.socket:
        """A TCP connection made from inside the network namespace."""
        connection = self._inside(lambda: socket.create_connection((host, port), timeout=timeout))
        connection.settimeout(None)
        return connection

    def listen(self, host: str) -> socket.socket:
        """A TCP listener inside the network namespace on `host` and a free port (a socket stays in the
        namespace it was made in, whichever thread accepts on it): a server of the tests' own that Pods
        reach."""

        def bound() -> socket.socket:
            listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, 0))
            listener.listen(64)
            return listener

        return self._inside(bound)

    def _inside(self, make: Callable[[], socket.socket]) -> socket.socket:
        """`make()` run in a thread that has joined the network namespace."""
        result: list[socket.socket | BaseException] = []

        def run() -> None:
            try:
                with self.netns.open("rb") as ns:
                    if _libc().setns(ns.fileno(), _CLONE_NEWNET) != 0:
                        raise OSError(ctypes.get_errno(), "setns into the sandbox's network namespace")
                result.append(make())
            except BaseException as error:  # handed to the caller's thread
                result.append(error)

        # A thread of its own: setns changes only the calling thread, which then ends.
        thread = threading.Thread(target=run, name="sandbox-socket", daemon=True)
        thread.start()
        thread.join()
        outcome = result[0]
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def forward(self, port: int, host: str = "127.0.0.1") -> int:
        """A port on the host's loopback whose connections reach `host:port` inside; returns it."""
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        self._listeners.append(listener)
        threading.Thread(
            target=self._accept, args=(listener, host, port), name=f"forward-{port}", daemon=True
        ).start()
        local: int = listener.getsockname()[1]
        return local

    def _accept(self, listener: socket.socket, host: str, port: int) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            try:
                upstream = self.connect(host, port)
            except OSError:
                client.close()
                continue
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def stop(self) -> None:
        for listener in self._listeners:
            with contextlib.suppress(OSError):
                listener.close()
        self._listeners.clear()
        if self._unshare is None:
            self._release_lock()
            return
        if self._unshare.poll() is None:
            # init stops everything and cleans up on SIGTERM; unshare waits for it, so this returns once
            # the sandbox's files are gone. (Signalling unshare instead would return at once: it dies and
            # only then does init get SIGTERM, through --kill-child.)
            if self._init_pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._init_pid, signal.SIGTERM)
            else:
                self._unshare.terminate()
            try:
                self._unshare.wait(_STOP_GRACE + 20)
            except subprocess.TimeoutExpired:
                self._unshare.kill()
                self._unshare.wait()
        self._unshare = None
        self._release_lock()

    def _release_lock(self) -> None:
        if self._lock >= 0:
            os.close(self._lock)
            self._lock = -1

    def running(self) -> bool:
        return self._unshare is not None and self._unshare.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            text = (self.work_dir / "sandbox.log").read_text(errors="replace")
            return "\n".join(text.splitlines()[-lines:])
        return ""

    def __enter__(self) -> Sandbox:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class SandboxProcess:
    """A process started inside the sandbox. `nsenter` forks it into the PID namespace and waits for it,
    but passes on no signal: stop the process itself (`pid`), and `nsenter` exits with it."""

    outer: subprocess.Popen[bytes]
    _pid: int = 0

    @property
    def pid(self) -> int:
        if not self._pid:
            deadline = time.monotonic() + 5.0
            while not self._pid and time.monotonic() < deadline and self.outer.poll() is None:
                with contextlib.suppress(OSError, ValueError):
                    children = Path(f"/proc/{self.outer.pid}/task/{self.outer.pid}/children").read_text()
                    self._pid = int(children.split()[0]) if children.split() else 0
                if not self._pid:
                    time.sleep(0.01)
        return self._pid

    def running(self) -> bool:
        return self.outer.poll() is None

    def signal(self, sig: int) -> None:
        if self.running() and self.pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def stop(self, grace: float = 10.0) -> None:
        self.signal(signal.SIGTERM)
        try:
            self.outer.wait(grace)
        except subprocess.TimeoutExpired:
            self.signal(signal.SIGKILL)
            self.outer.kill()
            self.outer.wait()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "init":
        sys.exit("usage: python -m controlplane.sandbox init CONFIG")
    init_main(sys.argv[2])
