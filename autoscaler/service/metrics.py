"""Prometheus metrics of the sizing side. Per-RSync series are bounded by the number of RSyncs managed.

The counters a reconcile's plan says to increment are named by `Counted`, the gauges it sets by `Shown`
(autoscaler/core/said.py), found through `COUNTED` and `SHOWN`; docs/metrics.md lists every metric
(tests/unit/test_docs.py)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from autoscaler.core.reasons import Reason
from autoscaler.core.said import Counted, Shown

LEADER = Gauge("objcount_leader", "1 while this replica acts (always 1 in sidecar mode).")
DECISIONS = Counter("objcount_decisions_total", "Reconcile outcomes.", ["outcome"])
APPLY_ERRORS = Counter(
    Counted.APPLY_ERRORS,
    f"Failed or refused reads and writes of the reconciler's size, by reason ({', '.join(Reason)}).",
    ["target", "reason"],
)
RESTARTS_CAUSED = Counter(
    Counted.RESTARTS_CAUSED,
    "Applies that restart the reconciler pod (template or override changes).",
)
RECONCILE_SECONDS = Histogram(
    "objcount_reconcile_duration_seconds",
    "Time of one reconcile (counts, decision, apply).",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
OBJECTS = Gauge(Shown.OBJECTS, "Object counts the decision used.", ["rsync", "count"])
RECOMMENDED = Gauge(
    Shown.RECOMMENDED,
    "Recommended reconciler resources (cpu in millicores, memory in MiB).",
    ["rsync", "resource"],
)
APPLIED = Gauge(
    Shown.APPLIED,
    "Reconciler resources last applied (cpu in millicores, memory in MiB).",
    ["rsync", "resource"],
)
RECONCILE_ERRORS = Counter(
    Counted.RECONCILE_ERRORS,
    "Reconciles that ended in an error, by stage (read, decide, apply, counts, crash), failed reads of "
    "the API surface (discovery), of the Nodes (nodes) and of the reconciler Pods waiting for room "
    "(room), reads of the metrics API that failed or did not parse (usage), and attempts to load "
    "credentials that failed (credentials).",
    ["stage"],
)
OOM_FLOORS = Counter(
    Counted.OOM_FLOORS,
    "OOM kills of a reconciler answered by raising its RSync's memory floor (objcount.dev/oom-floor).",
)
CAPPED = Counter(
    Counted.CAPPED,
    "Sizes written and capped by the applier's own policy (target vpa: the VerticalPodAutoscaler's "
    "resourcePolicy minAllowed/maxAllowed) or to the cluster's largest node, by target.",
    ["target"],
)
FALLBACKS = Counter(
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
CALIBRATION_FACTOR = Gauge(
    Shown.CALIBRATION_FACTOR,
    "The factor on the model learned from the reconciler's working set (objcount.dev/calibration).",
    ["rsync"],
)
CALIBRATIONS = Counter(
    Counted.CALIBRATIONS,
    "Calibrations learned after a finished sync, by direction (first, lowered, raised).",
    ["direction"],
)
COUNT_UNKNOWN = Gauge(
    Shown.COUNT_UNKNOWN,
    "1 while a count of the RSync is unknown (its source or its inventory): no scale-down until both are.",
    ["rsync"],
)
SOURCE_REJECTED = Gauge(
    Shown.SOURCE_REJECTED,
    "1 while Config Sync rejects the RSync's newest source commit (sidecar): it syncs none of it, and "
    "nothing is sized for it or lowered.",
    ["rsync"],
)
WAITING_FOR_ROOM = Gauge(
    Shown.WAITING_FOR_ROOM,
    "1 while the kubelet defers the reconciler's resize in place (no room on its node now): the running "
    "container keeps its size (objcount.dev/waiting-for-room; docs/sizing.md, Room on the node).",
    ["rsync"],
)
RESIZES_DEFERRED = Counter(
    Counted.RESIZES_DEFERRED,
    "Waits for room on the node begun: resizes in place the kubelet deferred (an Event ResizeDeferred each).",
)

STATUS_WRITES = Counter(
    Counted.STATUS_WRITES, "Object-count writes to RSyncs, by where they went.", ["destination"]
)
STATUS_WRITE_ERRORS = Counter(
    Counted.STATUS_WRITE_ERRORS, "Object-count writes that failed, by error.", ["reason"]
)
PRUNED_STATUS_FALLBACKS = Counter(
    Counted.PRUNED_STATUS_FALLBACKS,
    "RSyncs whose CRD pruned status.*.objectCount, so the counts went to annotations instead.",
)

COUNTED: dict[Counted, Counter] = {
    Counted.APPLY_ERRORS: APPLY_ERRORS,
    Counted.RECONCILE_ERRORS: RECONCILE_ERRORS,
    Counted.RESTARTS_CAUSED: RESTARTS_CAUSED,
    Counted.OOM_FLOORS: OOM_FLOORS,
    Counted.CALIBRATIONS: CALIBRATIONS,
    Counted.CAPPED: CAPPED,
    Counted.FALLBACKS: FALLBACKS,
    Counted.RESIZES_DEFERRED: RESIZES_DEFERRED,
    Counted.STATUS_WRITES: STATUS_WRITES,
    Counted.STATUS_WRITE_ERRORS: STATUS_WRITE_ERRORS,
    Counted.PRUNED_STATUS_FALLBACKS: PRUNED_STATUS_FALLBACKS,
}
SHOWN: dict[Shown, Gauge] = {
    Shown.OBJECTS: OBJECTS,
    Shown.COUNT_UNKNOWN: COUNT_UNKNOWN,
    Shown.SOURCE_REJECTED: SOURCE_REJECTED,
    Shown.WAITING_FOR_ROOM: WAITING_FOR_ROOM,
    Shown.CALIBRATION_FACTOR: CALIBRATION_FACTOR,
    Shown.RECOMMENDED: RECOMMENDED,
    Shown.APPLIED: APPLIED,
}
