"""The service: wires settings, the controller, the scheduler, leader election and the HTTP endpoints,
and owns the timing of every side effect. `objcount run` calls `run(settings)`.

Shutdown on SIGTERM or SIGINT: stop the watches, let the reconcile in flight finish, release the Lease,
stop the endpoints, exit 0. A sidecar that cannot act (no credentials yet, or a target it refuses) stays
alive serving its probes and metrics until then; one that refused its target exits 1.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from datetime import UTC
from http.server import ThreadingHTTPServer
from types import FrameType
from typing import cast

from apscheduler.schedulers.background import BackgroundScheduler
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from autoscaler.core.reasons import Reason
from autoscaler.core.sizing import STANDARD
from autoscaler.kube.events import EventWriter
from autoscaler.kube.leader import LeaderElector
from autoscaler.kube.platform import detect
from autoscaler.kube.targets import TARGETS, Target, TargetOptions, refusal_if_known
from autoscaler.service import logs, malloc_tuning
from autoscaler.service.controller import Controller, Scope
from autoscaler.service.http_endpoint import QuietHandler
from autoscaler.service.metrics import (
    APPLY_ERRORS,
    EVENT_ERRORS,
    EVENTS_WRITTEN,
    LEADER,
    RECONCILE_ERRORS,
    WEBHOOK_ONLY,
)
from autoscaler.service.settings import DETECT, Settings
from inventory.core.backoff import exponential
from inventory.core.objects import RSync
from inventory.kube import kubeapi
from inventory.kube.watch import WatchSettings
from inventory.source.source_watch import SourceLayout

log = logging.getLogger(__name__)
EXIT_OK, EXIT_FAILED = 0, 1
CREDENTIALS_RETRY_S = 30.0  # the kubelet refreshes Secret volumes about every minute
RSYNC_RETRY_S, RSYNC_RETRY_MAX_S = 2.0, 60.0  # a sidecar's first read of its RSync, retried with backoff


def build_target(settings: Settings, api: kubeapi.KubeApi) -> Target:
    options = TargetOptions(settings.reconciler_namespace, settings.vpa_recommender, settings.vpa_create)
    return TARGETS[settings.target].build(api, options)


def sync_dir_of(rsync: RSync) -> str:
    """The directory of the manifests inside the source, as the RSync names it."""
    spec = rsync.get("spec") or {}
    for source in (spec.get("git"), spec.get("oci")):
        directory = (source or {}).get("dir")
        if directory:
            return str(directory).strip("/").removeprefix("./")
    return ""


def _source_layout(settings: Settings, api: kubeapi.KubeApi, stop: threading.Event) -> SourceLayout:
    """Where the sidecar's RSync keeps its manifests, read from the RSync. Until it can be read (created
    after its reconciler's sidecar, its account not granted, the API server failing) the sidecar serves
    its probes saying why, tries again with backoff, and never exits (an exit would crash-loop every
    reconciler Pod it is in)."""
    if settings.sync_dir is not None:
        return SourceLayout(settings.source_root, settings.sync_dir)
    key = settings.rsync
    resource = kubeapi.RSYNC_RESOURCES[key.kind]
    try:
        return SourceLayout(
            settings.source_root, sync_dir_of(cast(RSync, api.get(resource, key.namespace, key.name)))
        )
    except kubeapi.ApiError as error:
        why = _rsync_unreadable(settings, error)
    RECONCILE_ERRORS.labels("read").inc()
    log.error("%s; trying again with backoff, up to every %.0f s", why, RSYNC_RETRY_MAX_S)
    with _idle_endpoints(settings, healthz=f"alive, {why}", readyz=why):
        attempt = 0
        while not stop.wait(exponential(attempt, RSYNC_RETRY_S, RSYNC_RETRY_MAX_S)):
            attempt += 1
            try:
                rsync = cast(RSync, api.get(resource, key.namespace, key.name))
            except kubeapi.ApiError as error:
                RECONCILE_ERRORS.labels("read").inc()
                log.debug("%s", _rsync_unreadable(settings, error))
                continue
            log.info("%s read: its sync directory is known", key)
            return SourceLayout(settings.source_root, sync_dir_of(rsync))
    return SourceLayout(settings.source_root, "")


def _rsync_unreadable(settings: Settings, error: kubeapi.ApiError) -> str:
    """Why the sidecar cannot read its RSync, and what to do about it."""
    key = settings.rsync
    if isinstance(error, kubeapi.NotFound):
        return f"waiting for {key} to exist ({error})"
    if isinstance(error, kubeapi.Forbidden):
        grant = (
            f"objcount grant-reposync {key.namespace} {key.name} | kubectl apply -f -"
            if key.kind == "RepoSync"
            else "the RBAC of manifests/sidecar"
        )
        return f"this sidecar's account may not read {key} ({error}): apply {grant}"
    return f"cannot read {key} ({error})"


def build_controller(
    settings: Settings,
    api: kubeapi.KubeApi,
    target: Target,
    stop: threading.Event,
    events: EventWriter | None = None,
) -> Controller:
    watch = WatchSettings(
        server_timeout=settings.watch_timeout_seconds, inactivity_timeout=settings.watch_inactivity_seconds
    )
    if settings.mode == "sidecar":
        scope = Scope.sidecar(settings.rsync)
        layout: SourceLayout | None = _source_layout(settings, api, stop)
    else:
        scope = Scope.cluster(settings.inventory_selector, settings.watch_namespace or None)
        layout = None  # the source count comes from the RSync status, written by a sidecar or the reconciler
    controller = Controller(
        api,
        scope,
        source_layout=layout,
        watch_settings=watch,
        target=target,
        profile=settings.profile(),
        hysteresis=settings.hysteresis(),
        margin=settings.margin(),
        measure_others=settings.others_cpu_m is None and settings.others_memory_mib is None,
        reconciler_namespace=settings.reconciler_namespace,
        # A sidecar's Pod: the template sets OBJCOUNT_IDENTITY to it; its host name is the Pod's name too,
        # cut to 63 characters (then it matches no Pod, and the sidecar sizes as it did without it).
        own_pod=_replica(settings) if settings.mode == "sidecar" else None,
        counts_in_status=settings.counts_in_status,
        events=None if events is None else events.record,
        # A sidecar has one RSync to reconcile, and the queue never hands one RSync to two workers.
        workers=1 if settings.mode == "sidecar" else settings.workers,
        resync_interval_s=settings.resync_interval_seconds,
        source_poll_s=settings.source_poll_seconds,
    )
    return controller


class _Endpoints(QuietHandler):
    controller: Controller
    leading: threading.Event
    paths: frozenset[str]
    # Threads besides the controller's that the service relies on (leader election, the scheduler).
    threads: dict[str, Callable[[], bool]]

    def unhealthy(self) -> list[str]:
        """Every part that should run and does not. A standby replica runs no controller yet."""
        broken = [name for name, alive in self.threads.items() if not alive()]
        if self.leading.is_set():
            broken += self.controller.unhealthy()
        return broken

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path not in self.paths:
            self._send(404, b"not found\n")
        elif path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            broken = self.unhealthy()
            body = "ok\n" if not broken else "not running: " + ", ".join(broken) + "\n"
            self._send(503 if broken else 200, body.encode())
        else:  # /readyz: caches synced and counts restored (a standby replica is ready to take over)
            if not self.leading.is_set():
                self._send(200, b"ok\n")
                return
            problems = self.controller.observer.problems()
            waiting = [] if self.controller.synced else ["caches not synced yet"]
            why = "; ".join(waiting + problems)
            self._send(503 if why else 200, f"{why or 'ok'}\n".encode())


def start_endpoints(
    settings: Settings,
    controller: Controller,
    leading: threading.Event,
    threads: dict[str, Callable[[], bool]],
) -> list[ThreadingHTTPServer]:
    wanted: dict[int, set[str]] = {}
    wanted.setdefault(settings.metrics_port, set()).add("/metrics")
    wanted.setdefault(settings.health_port, set()).update({"/healthz", "/readyz"})
    servers = []
    for port, paths in wanted.items():
        handler = type(
            "Endpoints",
            (_Endpoints,),
            {"controller": controller, "leading": leading, "paths": frozenset(paths), "threads": threads},
        )
        server = ThreadingHTTPServer((settings.bind_address, port), handler)
        threading.Thread(target=server.serve_forever, name=f"http-{port}", daemon=True).start()
        servers.append(server)
    return servers


class _Idle(QuietHandler):
    """The endpoints of a sidecar that cannot act (no credentials yet, or a target it must refuse): alive
    and saying why. A sidecar that exits would restart in a loop and keep Config Sync's reconciler Pod
    from being ready; alive, it stays out of the way and its metrics can be scraped."""

    healthz: bytes  # /healthz (200): alive, and why it does nothing
    readyz: bytes  # /readyz (503): what would make it act

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/healthz":
            self._send(200, self.healthz)
        elif path == "/metrics":
            self._send(200, generate_latest(REGISTRY), CONTENT_TYPE_LATEST)
        else:
            self._send(503, self.readyz)


@contextlib.contextmanager
def _idle_endpoints(settings: Settings, *, healthz: str, readyz: str) -> Iterator[None]:
    """Serve `_Idle` on the health and metrics ports while the block runs."""
    handler = type("Idle", (_Idle,), {"healthz": f"{healthz}\n".encode(), "readyz": f"{readyz}\n".encode()})
    servers = []
    for port in sorted({settings.health_port, settings.metrics_port}):
        server = ThreadingHTTPServer((settings.bind_address, port), handler)
        threading.Thread(target=server.serve_forever, name=f"http-{port}-idle", daemon=True).start()
        servers.append(server)
    try:
        yield
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def _connected(settings: Settings, stop: threading.Event) -> kubeapi.KubeApi | None:
    """The API client. A sidecar whose credentials cannot be loaded waits for them (the kubelet fills an
    optional Secret volume once the Secret exists), serving /healthz; other modes stop (None)."""
    try:
        return kubeapi.KubeClient.connect(settings.kubeconfig, service=True)
    except kubeapi.ApiError as error:
        RECONCILE_ERRORS.labels("credentials").inc()
        log.error("%s", error)
        if settings.mode != "sidecar":
            return None
    log.error(
        "no credentials for %s %s/%s (is its RepoSync granted? objcount grant-reposync); sizing nothing, "
        "trying again every %.0f s",
        settings.rsync_kind,
        settings.rsync_namespace,
        settings.rsync_name,
        CREDENTIALS_RETRY_S,
    )
    waiting = "waiting for credentials"
    with _idle_endpoints(
        settings, healthz=f"alive, {waiting}", readyz=f"{waiting} (objcount grant-reposync)"
    ):
        while not stop.wait(CREDENTIALS_RETRY_S):
            try:
                return kubeapi.KubeClient.connect(settings.kubeconfig, service=True)
            except kubeapi.ApiError as error:
                RECONCILE_ERRORS.labels("credentials").inc()
                log.debug("%s", error)
        return None


def with_platform(settings: Settings, api: kubeapi.KubeApi) -> Settings:
    """The settings with their platform: as set, else detected (`autoscaler.kube.platform`); where it
    cannot be read, Standard's rules, said as an error (set OBJCOUNT_PLATFORM)."""
    if settings.platform != DETECT:
        return settings
    try:
        platform, why = detect(api)
        log.info("platform %s, detected (%s)", platform, why)
    except kubeapi.ApiError as error:
        RECONCILE_ERRORS.labels("platform").inc()
        platform = STANDARD.name
        log.error("cannot detect the platform (%s); sizing for %s: set OBJCOUNT_PLATFORM", error, platform)
    return settings.model_copy(update={"platform": platform})


def _refuse(settings: Settings, refusal: str, stop: threading.Event) -> int:
    """A sidecar whose target someone else owns acts on nothing until it is stopped, serving its probes
    and the `owned` error in its metrics (an exit would crash-loop the reconciler Pod and hide both);
    the exit code then says it never ran."""
    APPLY_ERRORS.labels(settings.target, Reason.OWNED).inc()
    log.error("refusing to size anything: %s", refusal)
    with _idle_endpoints(settings, healthz=f"alive, refusing: {refusal}", readyz=f"refusing: {refusal}"):
        stop.wait()
    log.info("stopped (refused the target at start)")
    return EXIT_FAILED


def _scheduler(settings: Settings, controller: Controller) -> BackgroundScheduler:
    scheduler = BackgroundScheduler(
        job_defaults={
            "max_instances": 1,
            "coalesce": True,
            "misfire_grace_time": int(settings.misfire_grace_seconds),
        },
        timezone=UTC,
    )
    if settings.calibration_interval_seconds > 0 and controller.target is not None:
        interval = settings.calibration_interval_seconds
        scheduler.add_job(controller.sample_usage, "interval", seconds=interval, id="sample-usage")
    return scheduler


def _elect(
    settings: Settings,
    api: kubeapi.KubeApi,
    stop: threading.Event,
    *,
    failed: threading.Event,
    leading: threading.Event,
    threads: dict[str, Callable[[], bool]],
) -> LeaderElector | None:
    """Cluster mode: wait until this replica leads (or `stop`). Elsewhere: lead at once."""
    elector = None
    if settings.mode == "cluster" and settings.leader_election:
        elector = LeaderElector(
            api,
            settings.lease_namespace,
            settings.lease_name,
            _replica(settings),
            settings.lease_duration_seconds,
            is_leader=leading,
        )

        def lost() -> None:
            failed.set()
            stop.set()

        election = threading.Thread(
            target=elector.run, args=(stop, lost), name="leader-election", daemon=True
        )
        election.start()
        threads["leader election"] = election.is_alive
        log.info("waiting to become the leader (lease %s/%s)", settings.lease_namespace, settings.lease_name)
        while not stop.is_set() and not leading.wait(0.5):
            pass
    else:
        leading.set()
    return elector


def refusal_at_start(settings: Settings, target: Target) -> str | None:
    """Why a sidecar must not run with its target (someone else owns what it writes), or None. Every
    apply checks again; this makes a wrong install show at once (in the log, /readyz and the metrics)
    instead of on the first scale change."""
    if settings.mode != "sidecar":
        return None
    return refusal_if_known(target, settings.rsync)


def _replica(settings: Settings) -> str:
    """This replica's name: in the Lease, the Events' reporting instance, a sidecar's own Pod."""
    return settings.identity or socket.gethostname()


def _serve_webhook(settings: Settings, stop: threading.Event) -> int:
    # Loaded only here: its TLS server is nothing a sidecar or controller runs, and its metrics are
    # registered only here (a 0 from another process would read as a webhook that sizes nothing).
    from autoscaler.service import webhook  # noqa: PLC0415

    # The webhook leads nothing: a 0 from it would read as "no replica acts" (ObjcountNotReady).
    REGISTRY.unregister(LEADER)
    for collector in WEBHOOK_ONLY:
        REGISTRY.register(collector)
    return webhook.serve(settings, stop)


def run(settings: Settings, stop: threading.Event | None = None) -> int:
    """Run until SIGTERM/SIGINT (or `stop`); the exit code."""
    stop = stop or threading.Event()
    logs.configure(
        settings.log_level, settings.log_format, str(settings.rsync) if settings.mode == "sidecar" else ""
    )
    malloc_tuning.tune_for_large_events()
    failed = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("received %s: shutting down", signal.Signals(signum).name)
        stop.set()

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
    if stop.is_set():  # a SIGTERM as the process started (`objcount run` caught it): nothing to stop
        log.info("asked to stop as it started: stopped")
        return EXIT_OK
    if settings.mode == "webhook":
        return _serve_webhook(settings, stop)
    api = _connected(settings, stop)
    if api is None:
        return EXIT_OK if stop.is_set() else EXIT_FAILED
    settings = with_platform(settings, api)
    log.info(
        "starting in %s mode against %s, target %s, profile %s",
        settings.mode,
        api.server,
        settings.target,
        settings.profile().name,
    )
    target = build_target(settings, api)
    refusal = refusal_at_start(settings, target)
    if refusal is not None:
        api.close()  # nothing is read or written while refusing
        return _refuse(settings, refusal, stop)
    # Events name this replica (a sidecar: its Pod, whose host name it is).
    events = (
        EventWriter(
            api,
            _replica(settings),
            written=lambda reason: EVENTS_WRITTEN.labels(reason).inc(),
            failed=lambda reason: EVENT_ERRORS.labels(reason).inc(),
        ).start()
        if settings.events
        else None
    )
    controller = build_controller(settings, api, target, stop, events)
    leading = threading.Event()
    threads: dict[str, Callable[[], bool]] = {}
    servers = start_endpoints(settings, controller, leading, threads)
    elector = _elect(settings, api, stop, failed=failed, leading=leading, threads=threads)
    scheduler = _scheduler(settings, controller)
    if leading.is_set() and not stop.is_set():
        LEADER.set(1)
        controller.start()
        scheduler.start()
        threads["scheduler"] = lambda: bool(scheduler.running)
    stop.wait()
    log.info("stopping: finishing the reconcile in flight")
    if scheduler.running:
        scheduler.shutdown(wait=False)
    controller.stop()
    if events is not None:
        events.stop()
    if elector is not None:
        elector.release()
    LEADER.set(0)
    for server in servers:
        server.shutdown()
        server.server_close()
    api.close()
    log.info("stopped")
    return EXIT_FAILED if failed.is_set() else EXIT_OK
