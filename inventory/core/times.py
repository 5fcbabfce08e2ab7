"""The API server's times (`Time` and `MicroTime`: RFC 3339 in UTC), written and read here only."""

from __future__ import annotations

from datetime import UTC, datetime


def api_time(seconds: float) -> str:
    """`Time`, as the API server writes it: whole seconds, UTC (`2026-11-29T10:00:04Z`)."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_time(seconds: float) -> str:
    """`MicroTime` (a Lease's renewTime, an Event's eventTime): with microseconds, UTC."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def timestamp(value: object) -> float | None:
    """A `Time` or `MicroTime` in seconds; None for anything else (no zone, not a time)."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return None if parsed.tzinfo is None else parsed.timestamp()
