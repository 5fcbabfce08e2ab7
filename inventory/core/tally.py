"""What the inventory side's threads tell /metrics, as a protocol: the metrics themselves are declared in
one module of the service (autoscaler/service/metrics.py, `TALLY`), which implements it, so the counting
and the watches stay free of Prometheus and the layers point one way."""

from __future__ import annotations

from typing import Protocol


class Tally(Protocol):
    def watch_restarted(self, resource: str, reason: str) -> None:
        """A watch stream of `resource` ended and is started again (gone, closed, timeout, error)."""

    def cache_synced(self, resource: str, synced: bool) -> None:
        """Whether the first complete list of `resource` is cached."""

    def inventory_malformed(self) -> None:
        """A ResourceGroup update was rejected as malformed (its last good count is kept)."""

    def source_error(self, reason: str) -> None:
        """A source commit was not fully counted (rejected, unread, unreadable, crashed)."""


class Untallied:
    """Tells nothing: for tools that serve no /metrics (a benchmark decoding bytes, a test's watch)."""

    def watch_restarted(self, resource: str, reason: str) -> None:
        pass

    def cache_synced(self, resource: str, synced: bool) -> None:
        pass

    def inventory_malformed(self) -> None:
        pass

    def source_error(self, reason: str) -> None:
        pass
