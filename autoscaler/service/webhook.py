"""Webhook mode: serve the mutating admission webhook that adds the sidecar to reconciler Pods (the
sidecar install: `webhook_sidecar`) and sizes each new one from its RSync (`webhook_sizing`).

HTTPS on `webhook_port` (`POST /mutate`), with the certificate and key of `webhook_cert_dir`
(`tls.crt`, `tls.key`: the Secret the install created, mounted as files). A rotated certificate is
picked up on the next connection: the files are checked before each handshake. `/healthz` and
`/metrics` are plain HTTP on their usual ports. Adding the sidecar needs no Kubernetes credentials (it
comes from the AdmissionReview); sizing reads the RSyncs from a watch cache (get, list and watch of
RootSyncs and RepoSyncs: nothing else), so an admission never waits on the API server. See `injection`.

Every answer allows the Pod. The webhook configuration's `failurePolicy: Ignore` and short timeout cover
the cases where this process cannot answer at all.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from autoscaler.core.certificate import CertificateError, expires_at
from autoscaler.core.injection import (
    Decision,
    RSyncLookup,
    SidecarTemplate,
    TemplateError,
    decide,
)
from autoscaler.kube.platform import detect
from autoscaler.service.http_endpoint import QuietHandler
from autoscaler.service.metrics import TALLY, WEBHOOK_ADMISSIONS, WEBHOOK_CERTIFICATE_EXPIRY, WEBHOOK_SIZES
from autoscaler.service.settings import Settings
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from inventory.kube.watch import ObjectCodec, RawObject, Reflector

log = logging.getLogger(__name__)
MAX_REVIEW_BYTES = 4 << 20  # a Pod's AdmissionReview is a few KiB; anything near this is not one


class ReloadingTLS:
    """The server's TLS context, rebuilt when the certificate or key file changes."""

    def __init__(self, cert_dir: Path) -> None:
        self.cert, self.key = cert_dir / "tls.crt", cert_dir / "tls.key"
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._context = self._load()

    def _load(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert, self.key)
        self._stamp = (self.cert.stat().st_mtime_ns, self.key.stat().st_mtime_ns)
        self._show_expiry()
        return context

    def _show_expiry(self) -> None:
        """When the certificate now served expires, on /metrics (ObjcountWebhookCertificateExpiring); one
        whose expiry cannot be read leaves the last value shown, and says so (unknown is not zero)."""
        try:
            expiry = expires_at(self.cert.read_bytes())
        except (OSError, CertificateError) as error:
            log.warning("cannot read when the webhook certificate %s expires: %s", self.cert, error)
            return
        WEBHOOK_CERTIFICATE_EXPIRY.set(expiry.timestamp())
        log.info("webhook certificate %s expires at %s", self.cert, expiry.isoformat())

    def context(self) -> ssl.SSLContext:
        with self._lock:
            try:
                stamp = (self.cert.stat().st_mtime_ns, self.key.stat().st_mtime_ns)
                if stamp != self._stamp:
                    self._context = self._load()
                    log.info("webhook certificate reloaded from %s", self.cert)
            except (OSError, ssl.SSLError) as error:  # mid-rotation: keep serving the one we have
                log.warning("cannot reload the webhook certificate (%s); keeping the current one", error)
            return self._context


class _TLSServer(ThreadingHTTPServer):
    tls: ReloadingTLS

    def get_request(self) -> tuple[socket.socket, Any]:
        connection, address = super().get_request()
        return self.tls.context().wrap_socket(
            connection, server_side=True, do_handshake_on_connect=False
        ), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        try:
            request.do_handshake()  # in the connection's own thread, never in the accept loop
        except (ssl.SSLError, OSError) as error:
            log.warning("TLS handshake with %s failed: %s", client_address[0], error)
            return
        super().finish_request(request, client_address)


class RSyncCache:
    """Every RootSync and RepoSync, kept by a list-then-watch each; an RSync is None until both lists
    are complete (not known is not "not there")."""

    def __init__(self, api: kubeapi.KubeApi) -> None:
        self.reflectors: dict[str, Reflector[RawObject]] = {
            kind: Reflector(api, resource, ObjectCodec(), lambda *_: None, tally=TALLY)
            for kind, resource in kubeapi.RSYNC_RESOURCES.items()
        }

    def start(self) -> RSyncCache:
        for reflector in self.reflectors.values():
            reflector.start()
        return self

    def stop(self) -> None:
        for reflector in self.reflectors.values():
            reflector.signal_stop()

    def __call__(self, key: RSyncKey) -> dict[str, object] | None:
        reflector = self.reflectors[key.kind]
        cached = reflector.store.get((key.namespace, key.name)) if reflector.synced.is_set() else None
        return None if cached is None else cached.body


class _Mutate(QuietHandler):
    template: SidecarTemplate | None
    rsyncs: RSyncLookup | None
    platform: str | None

    def do_POST(self) -> None:
        if self.path.split("?")[0] != "/mutate":
            self._send(404, b"not found\n")
            return
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if 0 < length <= MAX_REVIEW_BYTES else b""
        decision = decide(body, self.template, self.rsyncs, self.platform)
        _record(decision)
        self._send(200, orjson.dumps(decision.response), "application/json")


def _record(decision: Decision) -> None:
    WEBHOOK_ADMISSIONS.labels(decision.result).inc()
    if decision.result == "injected":
        log.info("sidecar added to a reconciler Pod of %s", decision.detail)
    elif decision.result in ("invalid_labels", "malformed_review"):
        log.warning("Pod admitted without the sidecar (%s): %s", decision.result, decision.detail)
    else:
        log.debug("Pod admitted unchanged (%s): %s", decision.result, decision.detail)
    if decision.sized is None:
        return
    WEBHOOK_SIZES.labels(decision.sized).inc()
    if decision.sized == "sized":
        log.info("reconciler Pod of %s sized at admission: %s", decision.detail, decision.size_detail)
    elif decision.sized in ("size_unreadable", "rsync_unknown", "no_reconciler_container"):
        log.warning(
            "reconciler Pod of %s admitted at its template's size (%s): %s",
            decision.detail,
            decision.sized,
            decision.size_detail,
        )
    else:
        log.debug("reconciler Pod of %s keeps its template's size (%s)", decision.detail, decision.sized)


class _Probes(QuietHandler):
    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path in ("/healthz", "/readyz"):
            self._send(200, b"ok\n")
        else:
            self._send(404, b"not found\n")


def serve(settings: Settings, stop: threading.Event) -> int:
    """Serve until `stop`; the exit code (1 when the template or the certificate cannot be read)."""
    try:
        template = (
            SidecarTemplate.parse(Path(settings.sidecar_template).read_text())
            if settings.webhook_sidecar
            else None
        )
        tls = ReloadingTLS(Path(settings.webhook_cert_dir))
    except (OSError, TemplateError, ssl.SSLError) as error:
        log.error("cannot start the webhook: %s", error)
        return 1
    rsyncs, platform = _cluster_reads(settings)
    # staticmethod: a function kept on the class would be bound to the handler as a method.
    lookup = None if rsyncs is None else staticmethod(rsyncs)
    mutate = type("Mutate", (_Mutate,), {"template": template, "rsyncs": lookup, "platform": platform})
    webhook = _TLSServer((settings.bind_address, settings.webhook_port), mutate)
    webhook.tls = tls
    servers: list[ThreadingHTTPServer] = [webhook]
    for port in sorted({settings.metrics_port, settings.health_port}):
        servers.append(ThreadingHTTPServer((settings.bind_address, port), _Probes))
    for server in servers:
        threading.Thread(target=server.serve_forever, name=f"http-{server.server_port}", daemon=True).start()
    log.info(
        "webhook serving /mutate on :%d (sidecar: %s; sizing: %s)",
        webhook.server_port,
        "none" if template is None else f"{template.name!r} from {settings.sidecar_template}",
        "off" if rsyncs is None else "from the RSyncs' watch cache",
    )
    stop.wait()
    if isinstance(rsyncs, RSyncCache):
        rsyncs.stop()
    for server in servers:
        server.shutdown()
        server.server_close()
    log.info("stopped")
    return 0


def _cluster_reads(settings: Settings) -> tuple[RSyncLookup | None, str | None]:
    """Where new Pods' RSyncs are looked up (None: sizing is off), and the platform a sidecar is told
    (the setting, else detected; None: not known, the sidecar detects it). Without credentials every Pod
    keeps its template's size: said once here, counted per Pod as `rsync_unknown`."""
    platform = settings.platform or None
    try:
        api = kubeapi.KubeClient.connect(settings.kubeconfig, service=True)
    except kubeapi.ApiError as error:
        log.error("no API access (%s): new reconciler Pods keep their template's size", error)
        return ((lambda _key: None) if settings.webhook_sizing else None), platform
    if platform is None and settings.webhook_sidecar:
        try:
            platform, why = detect(api)
            log.info("platform %s, detected (%s): told to every sidecar added", platform, why)
        except kubeapi.ApiError as error:
            log.error(
                "cannot detect the platform (%s): the sidecars added are not told it, and theirs cannot "
                "read it either (Standard's rules; set OBJCOUNT_PLATFORM in the sidecar template)",
                error,
            )
    return (RSyncCache(api).start() if settings.webhook_sizing else None), platform
