"""A list-then-watch cache of one resource, filtered by label and field selectors.

The reflector lists (in pages), then watches from the list's resourceVersion. It re-lists on 410 Gone,
resumes the watch from the last resourceVersion when the stream ends or stays silent longer than the
inactivity timeout, and backs off exponentially on every failure as client-go's reflector does
(`Reflector.run`).
`synced` is set after the first complete list. Objects are decoded by a codec from raw JSON bytes into
small summaries, so the cache holds counts, not objects.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson
import simdjson

from inventory.core.backoff import Backoff
from inventory.core.inventory_count import InventoryCounter, InventorySummary
from inventory.core.objects import declaring_entries
from inventory.core.tally import Tally
from inventory.kube import kubeapi

log = logging.getLogger(__name__)


class Identified(Protocol):
    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...


T = TypeVar("T", bound=Identified)
Key = tuple[str, str]


@dataclass(frozen=True)
class ListPage(Generic[T]):
    items: list[T]
    resource_version: str
    continue_token: str


@dataclass(frozen=True)
class WatchEvent(Generic[T]):
    type: str
    obj: T | None = None
    resource_version: str = ""
    error_code: int = 0
    message: str = ""


class Codec(Protocol[T]):
    def decode_list(self, page: bytes) -> ListPage[T]: ...

    def decode_event(self, line: bytes) -> WatchEvent[T]: ...


@dataclass(frozen=True)
class RawObject:
    """A small object (an RSync) kept decoded, with only the managedFields that say who declares it
    (`declaring_entries`: others' server-side applies and Config Sync's own updates; the rest is
    dropped)."""

    namespace: str
    name: str
    resource_version: str
    body: dict[str, Any]


def _raw_object(body: dict[str, Any]) -> RawObject:
    metadata = body.get("metadata") or {}
    declared = declaring_entries(metadata.pop("managedFields", None))
    if declared:
        metadata["managedFields"] = declared
    return RawObject(
        metadata.get("namespace", ""), metadata.get("name", ""), metadata.get("resourceVersion", ""), body
    )


def _control_event(line: bytes) -> WatchEvent[Any] | None:
    """BOOKMARK and ERROR events, decoded fully (they are small); None for object events."""
    if not (line.startswith(b'{"type":"BOOKMARK"') or line.startswith(b'{"type":"ERROR"')):
        return None
    event = orjson.loads(line)
    obj = event.get("object") or {}
    if event["type"] == "BOOKMARK":
        return WatchEvent("BOOKMARK", resource_version=obj.get("metadata", {}).get("resourceVersion", ""))
    return WatchEvent("ERROR", error_code=int(obj.get("code", 0)), message=str(obj.get("message", "")))


@dataclass(frozen=True)
class ObjectCodec:
    """Decodes small objects fully with orjson; `kept` makes what is cached of each (default: an RSync's
    `_raw_object`)."""

    kept: Callable[[dict[str, Any]], RawObject] = _raw_object

    def decode_list(self, page: bytes) -> ListPage[RawObject]:
        decoded = orjson.loads(page)
        metadata = decoded.get("metadata") or {}
        items = [self.kept(item) for item in decoded.get("items") or []]
        return ListPage(items, metadata.get("resourceVersion", ""), metadata.get("continue", ""))

    def decode_event(self, line: bytes) -> WatchEvent[RawObject]:
        control = _control_event(line)
        if control is not None:
            return control
        event = orjson.loads(line)
        obj = self.kept(event["object"])
        return WatchEvent(event["type"], obj, obj.resource_version)


class InventoryCodec:
    """Decodes ResourceGroups into summaries straight from the bytes (see inventory_count)."""

    def __init__(self, tally: Tally) -> None:
        self._tally = tally
        self._counter = InventoryCounter()
        self._page_parser = simdjson.Parser()

    def decode_list(self, page: bytes) -> ListPage[InventorySummary]:
        document: Any = self._page_parser.parse(page)
        metadata = document.get("metadata") or {}
        items = [self._summary(item.mini) for item in document.get("items") or []]
        return ListPage(items, str(metadata.get("resourceVersion", "")), str(metadata.get("continue", "")))

    def decode_event(self, line: bytes) -> WatchEvent[InventorySummary]:
        control = _control_event(line)
        if control is not None:
            return control
        event_type, summary = self._counter.summarize_event(line)
        self._report(summary)
        return WatchEvent(event_type, summary, summary.resource_version)

    def _summary(self, raw: bytes) -> InventorySummary:
        return self._report(self._counter.summarize(raw))

    def _report(self, summary: InventorySummary) -> InventorySummary:
        if not summary.valid:
            self._tally.inventory_malformed()
            log.error(
                "malformed ResourceGroup %s/%s: %s; keeping its last good count",
                summary.namespace,
                summary.name,
                summary.error,
            )
        return summary


@dataclass(frozen=True)
class WatchSettings:
    page_size: int = 500
    server_timeout: int = 300
    inactivity_timeout: float = 90.0
    backoff_initial: float = 1.6  # twice client-go's reflector's first step (inventory/core/backoff.py)
    backoff_max: float = 30.0


Handler = Callable[[str, Key, Any], None]


@dataclass
class Reflector(Generic[T]):
    """Keeps `store` equal to the selected objects; calls `on_change(type, key, obj)` for each change.

    `type` is ADDED, MODIFIED or DELETED (`obj` is None for DELETED). Changes found by a re-list are
    reported the same way, so a missed watch event is never missed by the consumer.
    """

    api: kubeapi.KubeApi
    resource: kubeapi.Resource
    codec: Codec[T]
    on_change: Handler
    tally: Tally = field(kw_only=True)  # its restarts and whether it is synced, for /metrics
    namespace: str | None = None
    label_selector: str = ""
    field_selector: str = ""
    settings: WatchSettings = field(default_factory=WatchSettings)
    store: dict[Key, T] = field(default_factory=dict)
    # How a new version of an object is stored over the one cached (default: it replaces it).
    keep: Callable[[T | None, T], T] = field(default=lambda cached, new: new)
    synced: threading.Event = field(default_factory=threading.Event)
    stopping: threading.Event = field(default_factory=threading.Event)
    # Why the resource cannot be listed or watched, when that is no passing fault (a missing CRD or
    # permission): said once, shown by the service's /readyz, cleared once it is read again.
    problem: str | None = None
    _thread: threading.Thread | None = None
    _stream: kubeapi.Stream | None = None

    @property
    def label(self) -> str:
        return self.resource.plural

    def start(self) -> Reflector[T]:
        self._thread = threading.Thread(target=self.run, name=f"watch-{self.label}", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.signal_stop()
        if self._thread is not None:
            self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def signal_stop(self) -> None:
        """Ask the loop to end and unblock its watch; returns at once."""
        self.stopping.set()
        stream = self._stream
        if stream is not None:
            stream.shutdown()

    def run(self) -> None:
        """List, then watch, until stopped. Every failure waits its backoff (growing, jittered, at least
        the server's `Retry-After`; reset after two quiet minutes), a 410 and a stream closed before it
        said anything included, so whatever the API server answers it is asked at a bounded rate; only
        a stream silent past our own inactivity timeout is resumed at once (once per timeout)."""
        backoff = Backoff(self.settings.backoff_initial, self.settings.backoff_max)
        resource_version = ""
        if not self.synced.is_set():  # a cache that never syncs shows 0 (ObjcountNotReady), not nothing
            self.tally.cache_synced(self.label, False)
        while not self.stopping.is_set():
            try:
                if not resource_version:
                    resource_version = self._relist()
                    self.problem = None
                said = False
                for event in self._events(resource_version):
                    resource_version = self._apply(event) or resource_version
                    said, self.problem = True, None
                self.tally.watch_restarted(self.label, "closed")
                if not said:  # closed before saying anything: a server refusing watches, not a timeout
                    self._wait(backoff.next_delay(), "watch of %s closed at once; watching again in %.2f s")
            except kubeapi.WatchSilent:
                self.tally.watch_restarted(self.label, "timeout")
                log.info(
                    "watch of %s silent for %.0f s; reconnecting",
                    self.label,
                    self.settings.inactivity_timeout,
                )
            except kubeapi.Gone:
                self.tally.watch_restarted(self.label, "gone")
                resource_version = ""
                self._wait(backoff.next_delay(), "watch of %s expired (410 Gone); re-listing in %.2f s")
            except (kubeapi.NotFound, kubeapi.Forbidden) as error:
                # Not a passing fault: a missing CRD or a missing permission. Say what to do, keep trying.
                self.tally.watch_restarted(self.label, "error")
                delay = backoff.next_delay(error.retry_after)
                what = f"{self.resource.api_version} {self.resource.plural}"
                hint = (
                    "install Config Sync (its CRDs define RootSync, RepoSync and ResourceGroup)"
                    if isinstance(error, kubeapi.NotFound)
                    else "grant the rules in manifests/rbac to this service's ServiceAccount"
                )
                problem = f"cannot list or watch {what} ({type(error).__name__}): {hint}"
                level = (
                    logging.DEBUG if problem == self.problem else logging.ERROR
                )  # said once while it lasts
                log.log(level, "%s (%s); retrying in %.1f s", problem, error, delay)
                self.problem = problem
                self.stopping.wait(delay)
            except kubeapi.ApiError as error:
                if self.stopping.is_set():
                    return
                self.tally.watch_restarted(self.label, "error")
                delay = backoff.next_delay(error.retry_after)
                log.warning("watch of %s failed (%s); retrying in %.2f s", self.label, error, delay)
                self.stopping.wait(delay)

    def _wait(self, delay: float, message: str) -> None:
        log.info(message, self.label, delay)
        self.stopping.wait(delay)

    def _events(self, resource_version: str) -> Iterator[WatchEvent[T]]:
        self._stream = stream = self.api.watch(
            self.resource,
            self.namespace,
            resource_version=resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            server_timeout=self.settings.server_timeout,
            inactivity_timeout=self.settings.inactivity_timeout,
        )
        try:
            for line in stream:
                if self.stopping.is_set():
                    return
                yield self.codec.decode_event(line)
        finally:
            self._stream = None
            stream.close()

    def _apply(self, event: WatchEvent[T]) -> str:
        if event.type == "ERROR":
            if event.error_code == 410:
                raise kubeapi.Gone(event.message, status=410, reason="Expired")
            raise kubeapi.Transient(
                f"watch error {event.error_code}: {event.message}", status=event.error_code
            )
        if event.obj is not None:
            key = (event.obj.namespace, event.obj.name)
            if event.type == "DELETED":
                self.store.pop(key, None)
                self.on_change("DELETED", key, None)
            elif event.type in ("ADDED", "MODIFIED"):
                self.store[key] = self.keep(self.store.get(key), event.obj)
                self.on_change(event.type, key, event.obj)
        return event.resource_version

    def _relist(self) -> str:
        fresh: dict[Key, T] = {}
        continue_token, resource_version = "", ""
        while True:
            page = self.codec.decode_list(
                self.api.list_page(
                    self.resource,
                    self.namespace,
                    label_selector=self.label_selector,
                    field_selector=self.field_selector,
                    limit=self.settings.page_size,
                    continue_token=continue_token,
                )
            )
            fresh.update(((item.namespace, item.name), item) for item in page.items)
            resource_version = resource_version or page.resource_version
            continue_token = page.continue_token
            if not continue_token:
                break
        for key in [k for k in self.store if k not in fresh]:
            del self.store[key]
            self.on_change("DELETED", key, None)
        for key, item in fresh.items():
            change = "MODIFIED" if key in self.store else "ADDED"
            self.store[key] = self.keep(self.store.get(key), item)
            self.on_change(change, key, item)
        if not self.synced.is_set():
            self.synced.set()
            self.tally.cache_synced(self.label, True)
            log.info("cache of %s synced: %d object(s)", self.label, len(fresh))
        return resource_version
