"""Start and stop a real etcd + kube-apiserver (+ kube-controller-manager) on loopback.

With `controller_manager=True` (the default) kube-controller-manager runs too, so Deployments get
ReplicaSets and Pods, namespaces get their `default` ServiceAccount and finish deleting, ServiceAccount
admission is on (Pods get their projected token volume) and garbage collection runs. Alone it schedules
and runs no Pod: inside a sandbox with a real node (`controlplane.stack`) kube-scheduler and the
kubelet do. The plane without
the controller-manager (`controller_manager=False`) is the bare API server the first tests were written
against: Deployments are stored and nothing else happens.

Used by the integration tests, `make run` and the profiles. Every process started here is stopped by
`stop()`, by the context manager, when start-up fails half way, and (through the kernel's parent-death
signal, see `controlplane.process`) when the Python process that started it dies, even by SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from controlplane.errors import ControlPlaneError
from controlplane.kubernetes_build import build_binaries
from controlplane.ports import free_port
from controlplane.process import Process
from controlplane.sandbox import NODE_IP, Sandbox

# A documentation-range address (RFC 5737): kube-apiserver refuses to start without a default route
# unless it is told what to advertise, and nothing ever connects to this address.
ADVERTISE_ADDRESS = "192.0.2.1"
# 4,094 ClusterIPs: real repositories replicated into tenants declare hundreds of Services.
SERVICE_CIDR = "10.96.0.0/20"
# Inside a sandbox (the real node's namespaces) every address is the stack's own: fixed ports do not
# collide with another stack's.
SANDBOX_APISERVER_PORT = 6443
SANDBOX_ETCD_PORTS = (2379, 2380)

STOP_GRACE_S = 2.0  # stop(): SIGTERM, then SIGKILL after this


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def _ca_and_client(
    ca: Path, client: Path, *, ca_subject: str, client_subject: str, key: tuple[str, ...]
) -> None:
    """A CA (`ca`, its key beside it as `.key`) and a client certificate it signs (`client`, key `.key`)."""
    new_key = (*key, "-nodes", "-keyout")
    ca_key, client_key, request = (
        ca.with_suffix(".key"),
        client.with_suffix(".key"),
        client.with_suffix(".csr"),
    )
    _openssl("req", "-x509", *new_key, ca_key, "-days", "7", "-out", ca, "-subj", ca_subject)
    _openssl("req", *new_key, client_key, "-out", request, "-subj", client_subject)
    signer = ("-CA", ca, "-CAkey", ca_key, "-CAcreateserial")
    _openssl("x509", "-req", "-in", request, *signer, "-days", "7", "-out", client)


@dataclass
class LocalControlPlane:
    """A real etcd, kube-apiserver and (optionally) kube-controller-manager on free loopback ports, with
    an admin token and kubeconfig."""

    bin_dir: Path
    ready_timeout: float = 60.0
    extra_apiserver_args: Sequence[str] = ()
    controller_manager: bool = True
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="objcount-cp-")))
    admin_token: str = field(default_factory=lambda: secrets.token_hex(16))
    # The real node's namespaces: when given, every process runs inside, with kube-scheduler too, and the
    # host reaches the API server through a forwarded loopback port.
    sandbox: Sandbox | None = None
    startup_seconds: float | None = None
    _etcd: Process | None = None
    _apiserver: Process | None = None
    _controller_manager: Process | None = None
    _scheduler: Process | None = None
    _apiserver_port: int = 0
    _host_port: int = 0

    # ----- lifecycle -------------------------------------------------------------------------------
    def start(self) -> LocalControlPlane:
        began = time.monotonic()
        try:
            self._write_credentials()
            self._start_etcd()
            self._apiserver_port = SANDBOX_APISERVER_PORT if self.sandbox else free_port()
            self._host_port = (
                self.sandbox.forward(self._apiserver_port) if self.sandbox else self._apiserver_port
            )
            self._start_apiserver()
            self._write_kubeconfig(self.kubeconfig, self.admin_token)
            self._write_kubeconfig(self.inside_kubeconfig, self.admin_token, self.inside_server)
            self._wait_for_default_namespace(began + self.ready_timeout)
            if self.controller_manager:
                self._start_controller_manager()
                self._wait_for_default_service_account(began + self.ready_timeout)
            if self.sandbox is not None:
                self._start_scheduler()
        except BaseException:
            # Half-started is never left behind, whatever failed (including Ctrl-C during start).
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - began
        return self

    def stop(self) -> None:
        # A short grace: v1.37.2's API server, sent SIGTERM while the node's Pods still watch it, spent
        # all of the default 10 s in its graceful shutdown (measured), and a stack being removed needs none.
        for process in (self._scheduler, self._controller_manager, self._apiserver, self._etcd):
            if process is not None:
                process.stop(grace=STOP_GRACE_S)

    def restart_apiserver(self) -> None:
        """Stop and start kube-apiserver on the same port (etcd keeps the data)."""
        assert self._apiserver is not None
        self._apiserver.stop()
        self._start_apiserver()

    def restart_etcd(self) -> None:
        assert self._etcd is not None
        self._etcd.stop()
        self._etcd.start()
        self._wait_until(lambda: self._healthy("/readyz"), time.monotonic() + self.ready_timeout, "ready")

    def pids(self) -> list[int]:
        """Every process id this control plane started last (running or not), for leak checks."""
        processes = (self._etcd, self._apiserver, self._controller_manager, self._scheduler)
        return [p.last_pid for p in processes if p is not None and p.last_pid is not None]

    def __enter__(self) -> LocalControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)

    # ----- where to reach it -------------------------------------------------------------------------
    @property
    def server(self) -> str:
        """Where the host reaches the API server. Through the sandbox's forwarded port it is named
        `localhost`: the API server's own certificate names the node's address and `localhost`."""
        host = "localhost" if self.sandbox else "127.0.0.1"
        return f"https://{host}:{self._host_port}"

    @property
    def inside_server(self) -> str:
        """Where the node and its Pods reach the API server (the host's address, without a sandbox)."""
        return f"https://{NODE_IP}:{self._apiserver_port}" if self.sandbox else self.server

    @property
    def inside_kubeconfig(self) -> Path:
        """An admin kubeconfig naming `inside_server`, for the node's components."""
        return self.work_dir / "kubeconfig-inside"

    @property
    def ca_file(self) -> Path:
        # kube-apiserver writes its generated serving cert followed by the CA that signed it.
        return self.work_dir / "certs" / "apiserver.crt"

    @property
    def serving(self) -> tuple[Path, Path]:
        """The API server's serving certificate (with its CA) and key: a test's stand-in in front of it
        (the fault proxy) serves with them, trusted as the API server is."""
        certs = self.work_dir / "certs"
        return certs / "apiserver.crt", certs / "apiserver.key"

    @property
    def port(self) -> int:
        return self._host_port

    @property
    def kubeconfig(self) -> Path:
        return self.work_dir / "kubeconfig"

    def kubeconfig_for_token(self, token: str, name: str) -> Path:
        path = self.work_dir / f"kubeconfig-{name}"
        self._write_kubeconfig(path, token)
        return path

    def issue_service_account_token(self, namespace: str, name: str, seconds: int = 3600) -> str:
        """Create the ServiceAccount if needed and return a bound token for it (TokenRequest API).

        Restricted identities for RBAC tests are ServiceAccounts, exactly as in production.
        """
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}}
        status, body = self._request("POST", f"/api/v1/namespaces/{namespace}/serviceaccounts", sa)
        if status not in (201, 409):
            raise ControlPlaneError(f"creating ServiceAccount {namespace}/{name}: HTTP {status} {body!r}")
        request = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        }
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
        status, body = self._request("POST", path, request)
        if status != 201:
            raise ControlPlaneError(f"token request for {namespace}/{name}: HTTP {status} {body!r}")
        token: str = json.loads(body)["status"]["token"]
        return token

    # ----- internals ---------------------------------------------------------------------------------
    def _write_credentials(self) -> None:
        (self.work_dir / "certs").mkdir(parents=True, exist_ok=True)
        key = self.work_dir / "sa.key"
        if shutil.which("openssl") is None:
            raise ControlPlaneError("openssl is required to create the service-account signing key")
        subprocess.run(
            ["openssl", "genrsa", "-out", str(key), "2048"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if self.sandbox is not None:
            self._write_kubelet_client_certificate()
            self._write_front_proxy_certificates()
        (self.work_dir / "tokens.csv").write_text(
            f'{self.admin_token},objcount-admin,objcount-admin,"system:masters"\n'
        )

    @property
    def client_ca_file(self) -> Path:
        """The CA the kubelet trusts for client certificates: the API server's own comes from it."""
        return self.work_dir / "certs" / "client-ca.crt"

    def _write_kubelet_client_certificate(self) -> None:
        """A CA and the API server's client certificate for the kubelet (logs, exec, the summary API), in
        the group the API server authorizes everything for, as kubeadm makes it."""
        _ca_and_client(
            self.client_ca_file,
            self.kubelet_client_certificate,
            ca_subject="/CN=local-ca",
            client_subject="/O=system:masters/CN=kube-apiserver-kubelet-client",
            key=("-newkey", "rsa:2048"),
        )

    @property
    def kubelet_client_certificate(self) -> Path:
        return self.work_dir / "certs" / "kubelet-client.crt"

    @property
    def front_proxy_ca_file(self) -> Path:
        """The CA of the aggregation layer's client certificate: extension API servers (metrics-server)
        read it from the `extension-apiserver-authentication` ConfigMap and trust the user headers of
        requests whose client certificate it signed."""
        return self.work_dir / "certs" / "front-proxy-ca.crt"

    @property
    def front_proxy_client_certificate(self) -> Path:
        return self.work_dir / "certs" / "front-proxy-client.crt"

    @property
    def front_proxy_client_key(self) -> Path:
        return self.work_dir / "certs" / "front-proxy-client.key"

    def _write_front_proxy_certificates(self) -> None:
        """A CA of its own and the client certificate (CN front-proxy-client) the API server presents when
        it proxies to an aggregated API, as kubeadm makes them. A separate CA, as kubeadm's: a certificate
        from the kubelet's client CA must not be able to assert any user to an extension API server.
        P-256 keys: made in milliseconds, where each RSA key costs tens of them at every stack start."""
        _ca_and_client(
            self.front_proxy_ca_file,
            self.front_proxy_client_certificate,
            ca_subject="/CN=front-proxy-ca",
            client_subject="/CN=front-proxy-client",
            key=("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"),
        )

    def _start_etcd(self) -> None:
        client, peer = SANDBOX_ETCD_PORTS if self.sandbox else (free_port(), free_port())
        self._etcd_url = f"http://127.0.0.1:{client}"
        self._etcd_probe_url = (
            f"http://127.0.0.1:{self.sandbox.forward(client)}" if self.sandbox else self._etcd_url
        )
        peer_url = f"http://127.0.0.1:{peer}"
        self._etcd = self._process(
            "etcd",
            [
                str(self.bin_dir / "etcd"),
                "--name=default",
                f"--data-dir={self.work_dir / 'etcd'}",
                f"--listen-client-urls={self._etcd_url}",
                f"--advertise-client-urls={self._etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
                # Large inventories are stored whole; the default 1.5 MiB request cap is too small.
                "--max-request-bytes=33554432",
                "--quota-backend-bytes=8589934592",
            ],
            self.work_dir / "etcd.log",
        )
        self._etcd.start()
        deadline = time.monotonic() + self.ready_timeout
        self._wait_until(self._etcd_healthy, deadline, "etcd healthy", self._etcd)

    def _etcd_healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self._etcd_probe_url}/health", timeout=1) as response:
                return b'"health":"true"' in response.read()
        except (OSError, urllib.error.URLError):
            return False

    def _start_apiserver(self) -> None:
        key = self.work_dir / "sa.key"
        self._apiserver = self._process(
            "kube-apiserver",
            [
                str(self.bin_dir / "kube-apiserver"),
                f"--etcd-servers={self._etcd_url}",
                f"--cert-dir={self.work_dir / 'certs'}",
                f"--secure-port={self._apiserver_port}",
                *self._apiserver_network_args(),
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                f"--service-account-issuer={self.inside_server}",
                f"--service-account-key-file={key}",
                f"--service-account-signing-key-file={key}",
                f"--token-auth-file={self.work_dir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                # Without the controller-manager no ServiceAccount would ever exist to admit Pods against.
                *([] if self.controller_manager else ["--disable-admission-plugins=ServiceAccount"]),
                "--allow-privileged=true",
                "--v=0",
                *self.extra_apiserver_args,
            ],
            self.work_dir / "kube-apiserver.log",
        )
        self._apiserver.start()
        deadline = time.monotonic() + self.ready_timeout
        self._wait_until(lambda: self._healthy("/readyz"), deadline, "kube-apiserver ready", self._apiserver)

    def _apiserver_network_args(self) -> list[str]:
        if self.sandbox is None:
            return [
                "--bind-address=127.0.0.1",
                f"--advertise-address={ADVERTISE_ADDRESS}",
                # Nothing is at the advertised address: the `kubernetes` Service gets no endpoints.
                "--endpoint-reconciler-type=none",
            ]
        return [
            # Inside the sandbox: the node's address is advertised (the `kubernetes` Service's endpoint,
            # what Pods reach through kube-proxy), and webhooks are dialled at their endpoints.
            "--bind-address=0.0.0.0",
            f"--advertise-address={NODE_IP}",
            "--enable-aggregator-routing=true",
            "--kubelet-preferred-address-types=InternalIP",
            f"--kubelet-client-certificate={self.kubelet_client_certificate}",
            f"--kubelet-client-key={self.work_dir / 'certs' / 'kubelet-client.key'}",
            # The aggregation layer (front proxy), as kubeadm sets it up: aggregated APIs (metrics-server's
            # metrics.k8s.io) get the caller's identity in these headers, vouched for by this client
            # certificate. Without them an extension API server cannot tell who calls and refuses every
            # request the API server passes on.
            f"--requestheader-client-ca-file={self.front_proxy_ca_file}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={self.front_proxy_client_certificate}",
            f"--proxy-client-key-file={self.front_proxy_client_key}",
            # Published as `client-ca-file` in the same ConfigMap, as kubeadm's cluster CA is: an extension
            # API server looks it up there and, when it is missing, logs an error every few seconds. The
            # only certificate it signed is the API server's own client certificate for the kubelet.
            f"--client-ca-file={self.client_ca_file}",
        ]

    def _process(self, name: str, argv: list[str], log: Path) -> Process:
        return Process(name, argv, log, sandbox=self.sandbox)

    def _start_scheduler(self) -> None:
        self._scheduler = self._process(
            "kube-scheduler",
            [
                str(self.bin_dir / "kube-scheduler"),
                f"--kubeconfig={self.inside_kubeconfig}",
                f"--authentication-kubeconfig={self.inside_kubeconfig}",
                f"--authorization-kubeconfig={self.inside_kubeconfig}",
                "--secure-port=10259",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                "--v=0",
            ],
            self.work_dir / "kube-scheduler.log",
        )
        self._scheduler.start()

    def _start_controller_manager(self) -> None:
        self._controller_manager = self._process(
            "kube-controller-manager",
            [
                str(self.bin_dir / "kube-controller-manager"),
                f"--kubeconfig={self.inside_kubeconfig}",
                f"--secure-port={10257 if self.sandbox else free_port()}",
                "--bind-address=127.0.0.1",
                "--leader-elect=false",
                # Publishes the CA in every namespace's kube-root-ca.crt, the ca.crt of Pod token volumes.
                f"--root-ca-file={self.ca_file}",
                f"--service-account-private-key-file={self.work_dir / 'sa.key'}",
                "--cluster-name=local",
                "--v=0",
            ],
            self.work_dir / "kube-controller-manager.log",
        )
        self._controller_manager.start()

    def _wait_for_default_service_account(self, deadline: float) -> None:
        """The ServiceAccount controller is running once the `default` namespace has its account."""
        self._wait_until(
            lambda: self.get("/api/v1/namespaces/default/serviceaccounts/default")[0] == 200,
            deadline,
            "the default ServiceAccount (kube-controller-manager running)",
            self._controller_manager,
        )

    def _ssl_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def get(self, path: str) -> tuple[int, bytes]:
        """GET `path` as the admin: the HTTP status (0 when unreachable) and the body."""
        return self._request("GET", path)

    def _request(self, method: str, path: str, body: Mapping[str, object] | None = None) -> tuple[int, bytes]:
        request = urllib.request.Request(
            f"{self.server}{path}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.admin_token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=2, context=self._ssl_context()) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()
        except (OSError, urllib.error.URLError, ssl.SSLError):
            return 0, b""

    def _healthy(self, path: str) -> bool:
        if not self.ca_file.exists():
            return False
        status, body = self.get(path)
        return status == 200 and body.strip() == b"ok"

    def _wait_for_default_namespace(self, deadline: float) -> None:
        self._wait_until(
            lambda: self.get("/api/v1/namespaces/default")[0] == 200,
            deadline,
            "default namespace",
            self._apiserver,
        )

    def _wait_until(
        self, check: Callable[[], bool], deadline: float, what: str, process: Process | None = None
    ) -> None:
        while not check():
            if process is not None and not process.running():
                raise ControlPlaneError(
                    f"{process.name} exited before {what}; last log lines:\n{process.log_tail()}"
                )
            if time.monotonic() > deadline:
                tail = process.log_tail() if process else ""
                raise ControlPlaneError(f"timed out waiting for {what}; last log lines:\n{tail}")
            time.sleep(0.1)

    def _write_kubeconfig(self, path: Path, token: str, server: str | None = None) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": server or self.server, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "user"}}],
            "current-context": "local",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)


@contextlib.contextmanager
def running_control_plane(bin_dir: Path | None = None, **kwargs: object) -> Iterator[LocalControlPlane]:
    """Build (or reuse) the binaries, start a control plane, and stop and remove it on exit."""
    plane = LocalControlPlane(bin_dir or build_binaries(), **kwargs)  # type: ignore[arg-type]
    try:
        plane.start()
        yield plane
    finally:
        plane.cleanup()
