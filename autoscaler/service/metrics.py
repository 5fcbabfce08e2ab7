"""Every Prometheus metric of the service, declared here and nowhere else. Per-RSync series are bounded by
the number of RSyncs managed; other labels by fixed vocabularies (reasons, resource kinds).

The counters a reconcile's plan says to increment are named by `Counted`, the gauges it sets by `Shown`
(autoscaler/core/said.py), found through `COUNTED` and `SHOWN`; docs/metrics.md lists every metric
(tests/unit/test_docs.py)."""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client import Counter, Gauge, Histogram

from autoscaler.core.injection import RESULTS, SIZE_RESULTS
from autoscaler.core.reasons import Reason
from autoscaler.core.said import Counted, Shown
from inventory.core.tally import Tally

# Each counter a plan says to increment, by its `Counted` name; each gauge it sets, by its `Shown` name.
COUNTED: dict[Counted, Counter] = {}
SHOWN: dict[Shown, Gauge] = {}


def _counted(name: Counted, documentation: str, labels: Sequence[str] = ()) -> Counter:
    COUNTED[name] = Counter(name, documentation, labels)
    return COUNTED[name]


def _shown(name: Shown, documentation: str, labels: Sequence[str] = ()) -> Gauge:
    """A gauge labelled by the RSync first, then `labels`."""
    SHOWN[name] = Gauge(name, documentation, ("rsync", *labels))
    return SHOWN[name]


LEADER = Gauge("objcount_leader", "1 while this replica acts (always 1 in sidecar mode).")
DECISIONS = Counter("objcount_decisions_total", "Reconcile outcomes.", ["outcome"])
APPLY_ERRORS = _counted(
    Counted.APPLY_ERRORS,
    f"Failed or refused reads and writes of the reconciler's size, by reason ({', '.join(Reason)}).",
    ["target", "reason"],
)
RESTARTS_CAUSED = _counted(
    Counted.RESTARTS_CAUSED,
    "Applies that restart the reconciler pod (template or override changes).",
)
RECONCILE_SECONDS = Histogram(
    "objcount_reconcile_duration_seconds",
    "Time of one reconcile (counts, decision, apply).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
OBJECTS = _shown(Shown.OBJECTS, "Object counts the decision used.", ["count"])
RECOMMENDED = _shown(
    Shown.RECOMMENDED,
    "Recommended reconciler resources (cpu in millicores, memory in MiB).",
    ["resource"],
)
APPLIED = _shown(
    Shown.APPLIED,
    "Reconciler resources last applied (cpu in millicores, memory in MiB).",
    ["resource"],
)
RECONCILE_ERRORS = _counted(
    Counted.RECONCILE_ERRORS,
    "Reconciles that ended in an error, by stage (read, decide, apply, counts, crash), failed reads of "
    "the API surface (discovery), of the Nodes (nodes) and of the reconciler Pods waiting for room "
    "(room), reads of the metrics API that failed or did not parse (usage), and attempts to load "
    "credentials that failed (credentials).",
    ["stage"],
)
OOM_FLOORS = _counted(
    Counted.OOM_FLOORS,
    "OOM kills of a reconciler answered by raising its RSync's memory floor (objcount.dev/oom-floor).",
)
CAPPED = _counted(
    Counted.CAPPED,
    "Sizes written and capped by the applier's own policy (target vpa: the VerticalPodAutoscaler's "
    "resourcePolicy minAllowed/maxAllowed) or to the cluster's largest node, by target.",
    ["target"],
)
FALLBACKS = _counted(
    Counted.FALLBACKS,
    "Sizes the target could not apply its own way and applied through its fallback (in-place: the RSync "
    "override, a rollout), by target; an Event FellBack on the RSync and objcount.dev/fallback say why.",
    ["target"],
)
WORKING_SET = Gauge(
    "objcount_reconciler_working_set_mib",
    "The reconciler container's working set as the metrics API (metrics-server) last reported it.",
    ["rsync"],
)
CALIBRATION_FACTOR = _shown(
    Shown.CALIBRATION_FACTOR,
    "The factor on the model learned from the reconciler's working set (objcount.dev/calibration).",
)
CALIBRATIONS = _counted(
    Counted.CALIBRATIONS,
    "Calibrations learned after a finished sync, by direction (first, lowered, raised).",
    ["direction"],
)
COUNT_UNKNOWN = _shown(
    Shown.COUNT_UNKNOWN,
    "1 while a count of the RSync is unknown (its source or its inventory): no scale-down until both are.",
)
SOURCE_REJECTED = _shown(
    Shown.SOURCE_REJECTED,
    "1 while Config Sync rejects the RSync's newest source commit (sidecar): it syncs none of it, and "
    "nothing is sized for it or lowered.",
)
WAITING_FOR_ROOM = _shown(
    Shown.WAITING_FOR_ROOM,
    "1 while the kubelet defers the reconciler's resize in place (no room on its node now): the running "
    "container keeps its size (objcount.dev/waiting-for-room; docs/sizing.md, Room on the node).",
)
RESIZES_DEFERRED = _counted(
    Counted.RESIZES_DEFERRED,
    "Waits for room on the node begun: resizes in place the kubelet deferred (an Event ResizeDeferred each).",
)

STATUS_WRITES = _counted(
    Counted.STATUS_WRITES, "Object-count writes to RSyncs, by where they went.", ["destination"]
)
STATUS_WRITE_ERRORS = _counted(
    Counted.STATUS_WRITE_ERRORS, "Object-count writes that failed, by error.", ["reason"]
)
PRUNED_STATUS_FALLBACKS = _counted(
    Counted.PRUNED_STATUS_FALLBACKS,
    "RSyncs whose CRD pruned status.*.objectCount, so the counts went to annotations instead.",
)

# The webhook's, registered by its process alone (`autoscaler.service.main`): a sidecar or a controller
# answers no admission, and a 0 from them would read as a webhook that sizes nothing.
WEBHOOK_ADMISSIONS = Counter(
    "objcount_webhook_admissions_total",
    "Reconciler Pod admissions answered by the webhook, by result (every answer allows the Pod).",
    ["result"],
    registry=None,
)
WEBHOOK_SIZES = Counter(
    "objcount_webhook_sizes_total",
    "Reconciler Pods the webhook was asked to size at admission, by result (`sized`: the size published "
    "for a new Pod, objcount.dev/start-resources; any other: the template's size).",
    ["result"],
    registry=None,
)
WEBHOOK_CERTIFICATE_EXPIRY = Gauge(
    "objcount_webhook_certificate_expiry_timestamp_seconds",
    "When the certificate the webhook serves expires (its notAfter, Unix seconds), as last loaded.",
    registry=None,
)
WEBHOOK_ONLY = (WEBHOOK_ADMISSIONS, WEBHOOK_SIZES, WEBHOOK_CERTIFICATE_EXPIRY)
for _result in RESULTS:
    WEBHOOK_ADMISSIONS.labels(_result)
for _size in SIZE_RESULTS:
    WEBHOOK_SIZES.labels(_size)

# The Events writer's (`autoscaler.kube.events.EventWriter`, told through its callbacks).
EVENTS_WRITTEN = Counter(
    "objcount_events_total", "Kubernetes Events created or patched into a series, by reason.", ["reason"]
)
EVENT_ERRORS = Counter(
    "objcount_event_write_errors_total",
    "Event writes that failed or were dropped (queue full); a reconcile never waits for them.",
    ["reason"],
)


# ----- the inventory side: its watches, the ResourceGroups and the source (told through `TALLY`) ---------
WATCH_RESTARTS = Counter(
    "objcount_watch_restarts_total",
    "Watch streams restarted, by resource and reason (gone, closed, timeout, error).",
    ["resource", "reason"],
)
CACHE_SYNCED = Gauge(
    "objcount_cache_synced", "1 once the first complete list of the resource is cached.", ["resource"]
)
MALFORMED_INVENTORIES = Counter(
    "objcount_malformed_inventories_total",
    "ResourceGroup updates rejected as malformed (the last good count is kept).",
)
SOURCE_ERRORS = Counter(
    "objcount_source_errors_total",
    "Source commits not fully counted: rejected (Config Sync rejects a file and syncs none of the "
    "commit: the last good count is kept), unread (files we did not read: a lower bound, nothing is "
    "lowered), unreadable (the directory: the last good count is kept), crashed.",
    ["reason"],
)


class _Tally:
    """The inventory side's `Tally`, told to the metrics above."""

    def watch_restarted(self, resource: str, reason: str) -> None:
        WATCH_RESTARTS.labels(resource, reason).inc()

    def cache_synced(self, resource: str, synced: bool) -> None:
        CACHE_SYNCED.labels(resource).set(1 if synced else 0)

    def inventory_malformed(self) -> None:
        MALFORMED_INVENTORIES.inc()

    def source_error(self, reason: str) -> None:
        SOURCE_ERRORS.labels(reason).inc()


TALLY: Tally = _Tally()
