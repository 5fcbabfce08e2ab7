"""An HTTPS proxy between a client (our service, client-go's informers) and the real API server: it
forwards every request, answers the ones a fault names with that fault instead, can cut every stream it
holds open (the watches), and records every request it sees. It serves with the API server's own
certificate, so a client trusts it as it trusts the API server (client-go sends no bearer token over plain
HTTP), on loopback or on a listener inside the real node's network namespace (what Pods reach).
Played by us: the faults; every other answer is the real API server's."""

from __future__ import annotations

import contextlib
import math
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import orjson
import urllib3
import yaml

# Every read (list, watch, get) of Config Sync's objects: RootSyncs, RepoSyncs, ResourceGroups.
CONFIG_SYNC_READS = r"^GET /apis/(configsync\.gke\.io|kpt\.dev)/"


def reads_of(plural: str) -> str:
    """The pattern of every list and watch of Config Sync's `plural` (rootsyncs, reposyncs, ...)."""
    return rf"{CONFIG_SYNC_READS}.*/{plural}(\?|$)"


# What is forwarded of a request (urllib3 sets the rest); the answer is never compressed, so it streams.
FORWARDED = ("Authorization", "Accept", "Content-Type", "User-Agent")


@dataclass(frozen=True)
class Fault:
    """What requests whose "METHOD /path?query" matches `pattern` meet: an answer with this status (and
    `Retry-After`), or, with status 0, the real answer slowed by `delay_s` and reset after `cut_after`
    bytes of its body."""

    pattern: str
    status: int = 0
    reason: str = ""
    retry_after: int | None = None
    delay_s: float = 0.0
    cut_after: int | None = None

    def body(self, request: str) -> bytes:
        return orjson.dumps(
            {
                "kind": "Status",
                "apiVersion": "v1",
                "status": "Failure",
                "reason": self.reason,
                "code": self.status,
                "message": f"injected by the test's fault proxy: {self.reason} for {request}",
            }
        )


class FaultProxy:
    """`upstream`: where this process reaches the API server, whose certificate `ca_file` verifies;
    `serving`: the API server's certificate and key (they name the addresses clients reach it on);
    `listener`: where to serve (default: a free port on loopback)."""

    def __init__(
        self,
        upstream: str,
        ca_file: Path,
        serving: tuple[Path, Path],
        listener: socket.socket | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.ca_file = ca_file
        self._pool = urllib3.PoolManager(ca_certs=str(ca_file), cert_reqs="CERT_REQUIRED", maxsize=32)
        self._lock = threading.Lock()
        self._faults: list[tuple[Fault, float]] = []  # each with when it ends (monotonic seconds)
        self._open: set[socket.socket] = set()
        self.seen: list[tuple[float, str]] = []  # (time.monotonic(), "METHOD /path?query")
        handler = type("Handler", (_Handler,), {"proxy": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler, bind_and_activate=listener is None)
        if listener is not None:
            self._server.socket.close()  # made by the server's constructor, never bound
            self._server.socket = listener
        tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        tls.load_cert_chain(*serving)
        # The handshake in the handler's thread, not in the accepting one.
        self._server.socket = tls.wrap_socket(
            self._server.socket, server_side=True, do_handshake_on_connect=False
        )
        self._server.daemon_threads = True
        self.address: tuple[str, int] = self._server.socket.getsockname()[:2]
        threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True).start()

    # ----- what the test drives -------------------------------------------------------------------------
    def begin(self, *faults: Fault, until: float = math.inf) -> float:
        """Answer with these faults from now on, every open stream cut (each client must ask again); when
        they began (monotonic seconds). `until` (monotonic seconds): the faults meet only the requests that
        arrive before it, as `requests` times them (by default, every request until `clear()`)."""
        began = time.monotonic()
        with self._lock:
            self._faults.extend((fault, until) for fault in faults)
        self.cut_streams()
        return began

    def clear(self) -> None:
        with self._lock:
            self._faults.clear()

    def cut_streams(self) -> None:
        """Close every connection held open (the watches): each client must ask again."""
        with self._lock:
            held = list(self._open)
        for connection in held:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def requests(self, pattern: str, since: float = 0.0) -> list[float]:
        """When each request matching `pattern` arrived (monotonic seconds), from `since` on."""
        with self._lock:
            seen = list(self.seen)
        return [at for at, request in seen if at >= since and re.search(pattern, request)]

    def read_times(self, plural: str, began: float, seconds: float) -> list[float]:
        """When each list and watch of Config Sync's `plural` came in the `seconds` from `began`."""
        return [at for at in self.requests(reads_of(plural), began) if at < began + seconds]

    def reads(self, plural: str, began: float, seconds: float) -> int:
        return len(self.read_times(plural, began, seconds))

    def read_since(self, at: float) -> bool:
        """Whether a read of Config Sync's objects came at or after `at` (every one before it is counted)."""
        return bool(self.requests(CONFIG_SYNC_READS, at))

    @property
    def in_cluster_env(self) -> dict[str, str]:
        """The variables that send a Pod's in-cluster credentials through this proxy (a container's own
        `env` wins over the kubelet's)."""
        return {"KUBERNETES_SERVICE_HOST": self.address[0], "KUBERNETES_SERVICE_PORT": str(self.address[1])}

    def kubeconfig(self, token: str, path: Path) -> Path:
        """A kubeconfig that reaches the API server through this proxy with `token`."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "proxy",
                    "cluster": {
                        "server": f"https://{self.address[0]}:{self.address[1]}",
                        "certificate-authority": str(self.ca_file),
                    },
                }
            ],
            "users": [{"name": "user", "user": {"token": token}}],
            "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "user"}}],
            "current-context": "proxy",
        }
        path.write_text(yaml.safe_dump(config))
        path.chmod(0o600)
        return path

    def close(self) -> None:
        self.cut_streams()
        self._server.shutdown()
        self._server.server_close()

    # ----- the handler's side ---------------------------------------------------------------------------
    def _seen(self, request: str) -> Fault | None:
        with self._lock:
            at = time.monotonic()
            self.seen.append((at, request))
            faults = (fault for fault, until in self._faults if at < until)
            return next((f for f in faults if re.search(f.pattern, request)), None)

    def _hold(self, connection: socket.socket, held: bool) -> None:
        with self._lock:
            (self._open.add if held else self._open.discard)(connection)


class _Handler(BaseHTTPRequestHandler):
    proxy: FaultProxy
    protocol_version = "HTTP/1.1"  # chunked answers

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self._handle()

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _handle(self) -> None:
        request = f"{self.command} {self.path}"
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        fault = self.proxy._seen(request)
        if fault is not None and fault.status:
            self._answer(fault, request)
            return
        if fault is not None:
            time.sleep(fault.delay_s)
        budget = None if fault is None else fault.cut_after
        headers = {name: self.headers[name] for name in FORWARDED if self.headers.get(name)}
        headers["Accept-Encoding"] = "identity"
        self.proxy._hold(self.connection, True)
        try:
            upstream = self.proxy._pool.urlopen(
                self.command,
                self.proxy.upstream + self.path,
                body=body,
                headers=headers,
                preload_content=False,
                redirect=False,
                retries=False,
                timeout=urllib3.Timeout(connect=5.0, read=None),
            )
            self.send_response(upstream.status)
            for name in ("Content-Type", "Retry-After", "Audit-Id"):
                if upstream.headers.get(name):
                    self.send_header(name, upstream.headers[name])
            # Chunked, as the API server answers: a client reads a chunk as it comes (a watch's event),
            # where a body without length would be read 64 KiB at a time.
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Connection", "close")
            self.end_headers()
            while chunk := upstream.read1(1 << 16, decode_content=False):
                if budget is not None and len(chunk) >= budget:  # reset in the middle of the body
                    self.wfile.write(b"%x\r\n%s" % (len(chunk), chunk[:budget]))
                    self.wfile.flush()
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                budget = None if budget is None else budget - len(chunk)
                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            upstream.release_conn()
        except (OSError, urllib3.exceptions.HTTPError):
            pass  # the stream was cut (by the test or the client): the client sees the connection end
        finally:
            self.proxy._hold(self.connection, False)
        self.close_connection = True

    def _answer(self, fault: Fault, request: str) -> None:
        body = fault.body(request)
        self.send_response(fault.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if fault.retry_after is not None:
            self.send_header("Retry-After", str(fault.retry_after))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True
