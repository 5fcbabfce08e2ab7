"""Kubernetes Events for our decisions, on the RSync they are about (`events.k8s.io/v1`), so that
`kubectl describe rootsync` shows what we did, as VPA, HPA and the cluster autoscaler show theirs.

Repeats are aggregated into an event series the way client-go's event recorder does it: the first
occurrence of a (regarding object, type, reason, action; and the note, for a change of size) creates
an Event; the second, within six
minutes of the last, patches it into a series (count 2); later ones only count in memory, and the
series is patched with its count and last time at most once a minute. So a burst of reconciles that
decide the same thing writes one Event and a few patches, never one Event each. The note is the first
occurrence's (client-go keeps it too); the count and the last time tell how often it happened since.

Writes never block a reconcile and never fail one: `record` puts the event on a bounded queue that a
thread of its own writes from; a full queue drops the event, and every failed or dropped write is
counted (`objcount_event_write_errors_total`) and logged at debug level (the metric is the signal).

`SeriesBook` is the pure part (no I/O; time is passed in); `EventWriter` writes through the API.
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from inventory.core.times import micro_time
from inventory.kube import kubeapi

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "objcount.dev/autoscaler"
SERIES_GAP_S = 6 * 60.0  # a repeat later than this after the last starts a new Event (client-go's)
SERIES_FLUSH_S = 60.0  # a series is patched with its count at most this often
MAX_NOTE = 1024  # the API server's limit on `note`
QUEUE_SIZE = 1000


EventType = Literal["Normal", "Warning"]
Key = tuple["Regarding", str, str, str, str]
# Every reason we write, with its type and action (docs/metrics.md "Events" lists them).
REASONS: dict[str, tuple[EventType, str]] = {
    "ScaledUp": ("Normal", "Scale"),
    "ScaledDown": ("Normal", "Scale"),
    "ScaleDownPostponed": ("Normal", "Hold"),
    "Calibrated": ("Normal", "Calibrate"),
    "HeldByOwner": ("Warning", "Hold"),
    "HandsOff": ("Warning", "Hold"),
    "OomFloorRaised": ("Warning", "Scale"),
    "ApplyFailed": ("Warning", "Scale"),
    "Capped": ("Warning", "Scale"),
    "CappedToNode": ("Warning", "Scale"),
    "FellBack": ("Warning", "Scale"),
    "SourceRejected": ("Warning", "Hold"),
    "ResizeDeferred": ("Warning", "Hold"),
}


@dataclass(frozen=True)
class Regarding:
    """The object an Event is about (an RSync)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Occurrence:
    """One decision worth an Event."""

    regarding: Regarding
    type: EventType
    reason: str  # CamelCase, as Kubernetes' own (ScaledUp, HeldByOwner, ...)
    action: str  # what we did or did not do (Scale, Hold, Calibrate, ...)
    note: str
    at: float  # wall-clock seconds

    @classmethod
    def of(cls, regarding: Regarding, reason: str, note: str, at: float) -> Occurrence:
        type_, action = REASONS[reason]
        return cls(regarding, type_, reason, action, note, at)

    @property
    def key(self) -> Key:
        """What makes a repeat: a decision that holds a size repeats on every reconcile with a note that
        only counts the seconds, so its note is not part of it (client-go's rule); a change of size is
        told for each size (the restart cap keeps those few)."""
        note = "" if self.action == "Hold" else self.note
        return self.regarding, self.type, self.reason, self.action, note


@dataclass(frozen=True)
class Series:
    """An Event written, and how often it has happened since."""

    name: str
    first: float
    last: float
    count: int = 1
    written_count: int = 1  # the count the API server holds
    written_at: float = 0.0


@dataclass(frozen=True)
class Write:
    """What to write: a new Event, or a series patch of an existing one."""

    kind: Literal["create", "series"]
    occurrence: Occurrence
    series: Series


@dataclass
class SeriesBook:
    """The series of every Event written recently. Pure: `observe` and `due` return the writes to make."""

    series: dict[Key, Series] = field(default_factory=dict)
    new_name: Callable[[str], str] = lambda name: f"{name}.{secrets.token_hex(8)}"

    def observe(self, occurrence: Occurrence) -> Write | None:
        """The write this occurrence calls for now (None: it only counts, to be flushed later)."""
        known = self.series.get(occurrence.key)
        if known is None or occurrence.at - known.last > SERIES_GAP_S:
            created = Series(
                self.new_name(occurrence.regarding.name), occurrence.at, occurrence.at, 1, 1, occurrence.at
            )
            self.series[occurrence.key] = created
            return Write("create", occurrence, created)
        counted = replace(known, last=occurrence.at, count=known.count + 1)
        if known.written_count == 1:  # the second occurrence makes it a series at once, as client-go does
            counted = replace(counted, written_count=counted.count, written_at=occurrence.at)
            self.series[occurrence.key] = counted
            return Write("series", occurrence, counted)
        self.series[occurrence.key] = counted
        return None

    def due(self, now: float, template: Callable[[Key], Occurrence]) -> list[Write]:
        """Series patches due at `now` (counts not written for SERIES_FLUSH_S), and forget series that
        ended (no occurrence for SERIES_GAP_S, their last count written)."""
        writes = []
        for key, known in list(self.series.items()):
            if known.count > known.written_count and now - known.written_at >= SERIES_FLUSH_S:
                flushed = replace(known, written_count=known.count, written_at=now)
                self.series[key] = flushed
                writes.append(Write("series", template(key), flushed))
            elif known.count == known.written_count and now - known.last > SERIES_GAP_S:
                del self.series[key]
        return writes


def event_body(write: Write, reporting_instance: str) -> dict[str, object]:
    """The Event to create for a first occurrence."""
    o, s = write.occurrence, write.series
    return {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": s.name, "namespace": o.regarding.namespace},
        "eventTime": micro_time(s.first),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": reporting_instance[:128],
        "action": o.action,
        "reason": o.reason,
        "type": o.type,
        "note": o.note[:MAX_NOTE],
        "regarding": {
            "apiVersion": o.regarding.api_version,
            "kind": o.regarding.kind,
            "namespace": o.regarding.namespace,
            "name": o.regarding.name,
            "uid": o.regarding.uid,
        },
    }


def series_patch(write: Write) -> dict[str, object]:
    return {"series": {"count": write.series.count, "lastObservedTime": micro_time(write.series.last)}}


def regarding_rsync(rsync: Mapping[str, object], kind: str) -> Regarding | None:
    """The Event's object for an RSync as cached; None when it lacks a name or uid (nothing to attach to)."""
    metadata = rsync.get("metadata")
    if not isinstance(metadata, Mapping):
        return None
    name, namespace, uid = metadata.get("name"), metadata.get("namespace"), metadata.get("uid")
    if not all(isinstance(v, str) and v for v in (name, namespace, uid)):
        return None
    return Regarding("configsync.gke.io/v1beta1", kind, str(namespace), str(name), str(uid))


@dataclass
class EventWriter:
    """Writes the book's Events from a thread of its own; `record` never blocks and never raises."""

    api: kubeapi.KubeApi
    reporting_instance: str
    clock: Callable[[], float] = time.time
    # Told each Event written (its reason), and each write that failed or was dropped (why): the service
    # counts them (objcount_events_total, objcount_event_write_errors_total).
    written: Callable[[str], None] = lambda reason: None
    failed: Callable[[str], None] = lambda reason: None
    book: SeriesBook = field(default_factory=SeriesBook)
    _queue: queue.Queue[Occurrence | None] = field(default_factory=lambda: queue.Queue(QUEUE_SIZE))
    _last: dict[Key, Occurrence] = field(default_factory=dict)
    _thread: threading.Thread | None = None

    def start(self) -> EventWriter:
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=10)

    def record(self, occurrence: Occurrence) -> None:
        try:
            self._queue.put_nowait(occurrence)
        except queue.Full:
            self.failed("dropped")

    def _run(self) -> None:
        while True:
            try:
                occurrence = self._queue.get(timeout=SERIES_FLUSH_S / 4)
            except queue.Empty:
                occurrence = None
                stopping = False
            else:
                stopping = occurrence is None
            if occurrence is not None:
                self._last[occurrence.key] = occurrence
                write = self.book.observe(occurrence)
                if write is not None:
                    self._write(write)
            for write in self.book.due(self.clock(), self._last.__getitem__):
                self._write(write)
            for key in set(self._last) - set(self.book.series):
                del self._last[key]
            if stopping:
                return

    def _write(self, write: Write) -> None:
        o = write.occurrence
        try:
            if write.kind == "create":
                body = event_body(write, self.reporting_instance)
                self.api.create(kubeapi.EVENT, o.regarding.namespace, body)
            else:
                self.api.patch(kubeapi.EVENT, o.regarding.namespace, write.series.name, series_patch(write))
        except kubeapi.ApiError as error:
            if write.kind == "create":  # nothing to patch: the next occurrence creates it again
                self.book.series.pop(o.key, None)
            self.failed(error.reason or type(error).__name__.lower())
            log.debug(
                "could not write the %s Event on %s/%s: %s",
                o.reason,
                o.regarding.kind,
                o.regarding.name,
                error,
            )
            return
        self.written(o.reason)
