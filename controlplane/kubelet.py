"""The real node: containerd and runc, the kubelet and kube-proxy, inside the stack's sandbox.

Nothing here plays a kubelet. The kubelet (built from the pinned `k8s.io/kubernetes` module, like the API
server) registers the Node `NODE_NAME`, kube-scheduler binds Pods to it, and the kubelet runs them through
containerd (Debian's package, pinned in `controlplane/node-packages.sh`) and runc. Pods get addresses on
the sandbox's bridge from the bridge CNI plugin; kube-proxy (same module, iptables mode, inside the
sandbox's network namespace only) gives them the `kubernetes` Service.

What is set for these machines, and why:
- containerd has its own root, state and socket under the node's directory; its CRI uses the pause image
  we build (`controlplane.images`), runc with the cgroupfs driver (no systemd here), no AppArmor, no
  hugetlb controller (cgroup v2 holds only hugetlb on these hybrid hosts), and `restrict_oom_score_adj`
  (no CAP_SYS_RESOURCE: a negative score cannot be set). A pull is never needed (every image is
  imported); one attempted anyway meets `HTTPS_PROXY` on a closed loopback port and the sandbox's
  resolv.conf naming 127.0.0.1, and fails at once.
- the kubelet runs with `cgroupRoot` of its own (`CGROUP_PREFIX`-<id>, removed when the sandbox ends),
  the settings the host's cgroups need (`controlplane.cgroups`: on these v1 hosts `failCgroupV1: false`,
  said once on standard error as the node starts), `oomScoreAdj: 0`, image garbage collection off
  (imported images are never removed), eviction thresholds a busy development disk does not cross, and
  its own root and log directories under the node's directory.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from controlplane.cgroups import Cgroups, Layout, host_note, kubelet_settings
from controlplane.errors import ControlPlaneError
from controlplane.images import PAUSE_IMAGE, Image
from controlplane.launcher import LocalControlPlane
from controlplane.process import Process
from controlplane.sandbox import BRIDGE, NODE_IP, POD_CIDR, Sandbox

NODE_NAME = "objcount-node"
CGROUP_PREFIX = "objcount-kubelet-"
CNI_BIN_DIR = Path("/usr/lib/cni")
# A pull that is tried anyway goes here, and nothing listens: it fails at once, on loopback.
CLOSED_PROXY = "http://127.0.0.1:9"
CLUSTER_DOMAIN = "cluster.local"


KUBELET_HEALTHZ_PORT = 10248


def cgroup_root_name() -> str:
    """A node's cgroup root: the prefix, the PID of the process that starts the node (its owner: until
    that process ends, no other one removes the cgroup as stale, even while no task is in it yet), and a
    random part."""
    return f"{CGROUP_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"


def containerd_config(directory: Path) -> str:
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = "{directory / "root"}"
state = "{directory / "state"}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{directory / "containerd.sock"}"

[ttrpc]
  address = "{directory / "containerd.sock.ttrpc"}"

[debug]
  level = "warn"

[plugins."io.containerd.internal.v1.opt"]
  path = "{directory / "opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  disable_apparmor = true
  restrict_oom_score_adj = true
  disable_hugetlb_controller = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  max_container_log_line_size = 16384

[{cri}.cni]
  bin_dir = "{CNI_BIN_DIR}"
  conf_dir = "{directory / "cni"}"

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
"""


def cni_config() -> str:
    return json.dumps(
        {
            "cniVersion": "1.0.0",
            "name": "objcount",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR, "rangeStart": "10.88.1.1", "gateway": NODE_IP}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                    },
                },
                {"type": "portmap", "capabilities": {"portMappings": True}},
            ],
        },
        indent=2,
    )


def kubelet_config(
    directory: Path, cgroup_root: str, resolv_conf: Path, client_ca: Path, layout: Layout
) -> dict[str, object]:
    return {
        **kubelet_settings(layout),
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": NODE_IP,
        "port": 10250,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{cgroup_root}",
        "cgroupsPerQOS": True,
        "enforceNodeAllocatable": ["pods"],
        "failSwapOn": False,
        "oomScoreAdj": 0,
        "containerRuntimeEndpoint": f"unix://{directory.parent / 'containerd' / 'containerd.sock'}",
        "resolvConf": str(resolv_conf),
        "clusterDomain": CLUSTER_DOMAIN,
        "podLogsDir": str(directory / "pod-logs"),
        "staticPodPath": "",
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "serializeImagePulls": False,
        # Imported images are all there is: never collect them.
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "imageMinimumGCAge": "876000h",
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "evictionPressureTransitionPeriod": "10s",
        "localStorageCapacityIsolation": True,
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "maxPods": 110,
        "nodeStatusUpdateFrequency": "2s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "runtimeRequestTimeout": "2m",
        "containerLogMaxSize": "10Mi",
        "featureGates": {},
    }


def kube_proxy_config(kubeconfig: Path) -> dict[str, object]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": NODE_NAME,
        "clusterCIDR": POD_CIDR,
        "bindAddress": NODE_IP,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # The sandbox is its own network namespace: kube-proxy changes no sysctl of the host's.
        "conntrack": {"maxPerCore": 0, "min": 0},
        "iptables": {"syncPeriod": "5s", "minSyncPeriod": "0s"},
    }


@dataclass
class RealNode:
    """containerd, the kubelet and kube-proxy of one stack, in its sandbox, with its images imported."""

    plane: LocalControlPlane
    sandbox: Sandbox
    images: Sequence[Image]
    cgroup_root: str
    cgroups: Cgroups
    ready_timeout: float = 120.0
    startup_seconds: float | None = None
    _containerd: Process | None = None
    _kubelet: Process | None = None
    _proxy: Process | None = None
    directory: Path = field(init=False)

    def __post_init__(self) -> None:
        self.directory = self.plane.work_dir / "node"

    # ----- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> RealNode:
        began = time.monotonic()
        try:
            self._start_containerd()
            self.import_images(self.images)
            self._start_kubelet()
            self._start_kube_proxy()
            self._wait_for_ready_node(began + self.ready_timeout)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        for process in (self._proxy, self._kubelet, self._containerd):
            if process is not None:
                process.stop()

    def restart_kubelet(self, sig: int = signal.SIGTERM, config: Mapping[str, object] | None = None) -> None:
        """Stop the kubelet (`sig`, then SIGKILL after a grace period) and start it again with its state,
        and its configuration with `config`'s fields replaced; returns once the Node is Ready again.
        Containers keep running."""
        assert self._kubelet is not None
        self._signal_and_wait(self._kubelet, sig)
        if config:
            path = self.directory / "kubelet" / "config.yaml"
            path.write_text(yaml.safe_dump({**yaml.safe_load(path.read_text()), **config}))
        self._kubelet.start()
        deadline = time.monotonic() + self.ready_timeout
        # The Node stays Ready through a short restart: wait for the new kubelet itself first.
        while not self.kubelet_healthy():
            if not self._kubelet.running() or time.monotonic() > deadline:
                raise ControlPlaneError(f"the kubelet did not come back:\n{self._kubelet.log_tail()}")
            time.sleep(0.1)
        self._wait_for_ready_node(deadline)

    def kubelet_healthy(self) -> bool:
        """The kubelet's /healthz (on the sandbox's loopback) answers 200."""
        try:
            with self.sandbox.connect("127.0.0.1", KUBELET_HEALTHZ_PORT, timeout=2.0) as connection:
                connection.settimeout(2.0)
                connection.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                status_line = connection.recv(64).split(b"\r\n", 1)[0]
                return status_line.split(b" ")[1:2] == [b"200"]
        except OSError:
            return False

    def restart_containerd(self, sig: int = signal.SIGTERM) -> None:
        """Stop containerd and start it again; its shims, so the containers, keep running (containerd
        does not own them). Returns once it answers again."""
        assert self._containerd is not None
        self._signal_and_wait(self._containerd, sig)
        self._containerd.start()
        self._wait_for_containerd(time.monotonic() + 30)

    @staticmethod
    def _signal_and_wait(process: Process, sig: int) -> None:
        if sig == signal.SIGTERM:
            process.stop()
            return
        if process.inside is not None:
            process.inside.signal(sig)
        process.stop()  # reaps it (a SIGKILLed process is gone already)

    def pids(self) -> list[int]:
        processes = (self._containerd, self._kubelet, self._proxy)
        return [p.last_pid for p in processes if p is not None and p.last_pid is not None]

    # ----- containerd -----------------------------------------------------------------------------------
    @property
    def containerd_dir(self) -> Path:
        return self.directory / "containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_dir / "containerd.sock"

    def _start_containerd(self) -> None:
        for tool in ("containerd", "runc", "ctr", "iptables"):
            if shutil.which(tool) is None:
                raise ControlPlaneError(
                    f"the real node needs {tool} (installed by `make`: controlplane/node-packages.sh)"
                )
        (self.containerd_dir / "cni").mkdir(parents=True, exist_ok=True)
        (self.containerd_dir / "cni" / "10-objcount.conflist").write_text(cni_config())
        config = self.containerd_dir / "config.toml"
        config.write_text(containerd_config(self.containerd_dir))
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "HTTPS_PROXY": CLOSED_PROXY,
            "HTTP_PROXY": CLOSED_PROXY,
            "NO_PROXY": "",
        }
        self._containerd = Process(
            "containerd",
            ["containerd", f"--config={config}"],
            self.directory / "containerd.log",
            sandbox=self.sandbox,
            env=env,
        )
        self._containerd.start()
        self._wait_for_containerd(time.monotonic() + 30)

    def _wait_for_containerd(self, deadline: float) -> None:
        assert self._containerd is not None
        while not self._ctr_ok():
            if not self._containerd.running() or time.monotonic() > deadline:
                raise ControlPlaneError(f"containerd did not start:\n{self._containerd.log_tail()}")
            time.sleep(0.1)

    def ctr(self, *args: str, check: bool = True, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self.sandbox.run(
            ["ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args],
            check=check,
            timeout=timeout,
        )

    def _ctr_ok(self) -> bool:
        return (
            self.containerd_socket.exists() and self.ctr("version", check=False, timeout=10).returncode == 0
        )

    def import_images(self, images: Sequence[Image]) -> None:
        for image in images:
            result = self.ctr("images", "import", "--no-unpack=false", str(image.archive), check=False)
            if result.returncode != 0:
                raise ControlPlaneError(f"importing {image.name} into containerd failed:\n{result.stderr}")

    # ----- kubelet and kube-proxy -----------------------------------------------------------------------
    def _start_kubelet(self) -> None:
        kubelet_dir = self.directory / "kubelet"
        kubelet_dir.mkdir(parents=True, exist_ok=True)
        self.cgroups.create(self.cgroup_root)
        print(f"the real node: {host_note(self.cgroups.layout)}", file=sys.stderr)
        config = kubelet_dir / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                kubelet_config(
                    kubelet_dir,
                    self.cgroup_root,
                    self.sandbox.work_dir / "resolv.conf",
                    self.plane.client_ca_file,
                    self.cgroups.layout,
                )
            )
        )
        self._kubelet = Process(
            "kubelet",
            [
                str(self.plane.bin_dir / "kubelet"),
                f"--config={config}",
                f"--kubeconfig={self.plane.inside_kubeconfig}",
                f"--root-dir={kubelet_dir / 'root'}",
                f"--cert-dir={kubelet_dir / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                f"--node-ip={NODE_IP}",
                "--v=1",
            ],
            self.directory / "kubelet.log",
            sandbox=self.sandbox,
        )
        self._kubelet.start()

    def _start_kube_proxy(self) -> None:
        config = self.directory / "kube-proxy.yaml"
        config.write_text(yaml.safe_dump(kube_proxy_config(self.plane.inside_kubeconfig)))
        self._proxy = Process(
            "kube-proxy",
            [str(self.plane.bin_dir / "kube-proxy"), f"--config={config}", "--v=0"],
            self.directory / "kube-proxy.log",
            sandbox=self.sandbox,
        )
        self._proxy.start()

    def _wait_for_ready_node(self, deadline: float) -> None:
        while not self.ready():
            for process in (self._containerd, self._kubelet, self._proxy):
                if process is not None and not process.running():
                    raise ControlPlaneError(
                        f"{process.name} exited before the Node was Ready:\n{process.log_tail()}"
                    )
            if time.monotonic() > deadline:
                assert self._kubelet is not None
                raise ControlPlaneError(f"the Node was not Ready in time:\n{self._kubelet.log_tail()}")
            time.sleep(0.2)

    def ready(self) -> bool:
        status, body = self.plane.get(f"/api/v1/nodes/{NODE_NAME}")
        if status != 200:
            return False
        conditions = json.loads(body).get("status", {}).get("conditions") or []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
