"""Why reading or writing a reconciler's size failed or was refused: one list, for the errors the
Kubernetes side raises, the `reason` label of `objcount_apply_errors_total`, the `ApplyFailed` Events
and the metrics table of docs/metrics.md (a unit test holds the four together)."""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    CONFLICT = "conflict"  # the object kept changing under a read-modify-write
    REJECTED = "rejected"  # the API server refused it, or stored something else (a mutating webhook)
    FORBIDDEN = "forbidden"  # RBAC: the service lacks a permission
    NOT_FOUND = "not_found"  # the object to read or write does not exist
    TRANSIENT = "transient"  # a timeout, 5xx or a dropped connection: tried again later
    UNREADABLE = "unreadable"  # the reconciler's resources do not parse (never taken as unset)
    NO_CONTAINER = "no-container"  # the object has no `reconciler` container
    OWNED = "owned"  # the field belongs to another owner, who would put its value back
    REFUSED = "refused"  # the kubelet refused a lower memory limit than the container uses
    REVERTED = "reverted"  # another writer replaced the size we wrote


class SizeError(Exception):
    """A read or a write of the reconciler's size failed, for `reason`; `retry_after`: the seconds the API
    server asked to wait before trying again (None: it said nothing)."""

    def __init__(self, reason: Reason, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after = retry_after


class ReadError(SizeError):
    """What the reconciler has (its size, its Pod's other containers) could not be read."""


class WriteError(SizeError):
    """The size could not be written (or the write was refused)."""
