"""Prometheus metrics of the inventory side. Label values are bounded (resource kinds, fixed reasons)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge

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
