"""Whether the reconciler has finished syncing what it fetched, as it reports on its RSync. Pure.

A scale-down must wait while a prune may still be running. The inventory alone cannot tell: it may hold
objects the source does not name (the Namespaces an unstructured RootSync creates implicitly), so
`inventory > source` is normal. Config Sync (v1.22.0 and v1.24.3 alike) reports its progress in the RSync
status: the commit it fetched (`status.source.commit`), the commit it is applying or has applied
(`status.sync.commit`, written when the apply starts), a `Syncing` condition that is True while it
applies, error summaries, and the last commit it finished without errors (`status.lastSyncedCommit`,
written only then). A reconciler stopped in the middle of an apply (its Pod replaced by a rollout)
leaves `sync.commit` at the commit it was applying and may leave no `Syncing` condition at all (seen on
the real node: the reconciler-manager's `Reconciling` condition replaced it), so a sync is finished only
when `lastSyncedCommit` names the commit too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from inventory.core.objects import RSync, block_of
from inventory.core.times import timestamp

_STAGES = ("source", "rendering", "sync")


@dataclass(frozen=True)
class SyncProgress:
    """What the RSync status says of the reconciler's last sync, read once. `reported`: the reconciler
    has written a sync status; `pending`: why its sync is not finished (None when it has finished the
    commit it fetched, without errors)."""

    reported: bool
    pending: str | None = None
    fetched: str | None = None  # the commit it last fetched from its source (`status.source.commit`)
    syncing: str | None = None  # the commit it is applying or has applied (`status.sync.commit`)
    written_at: float | None = None  # when it last wrote its sync status (`status.sync.lastUpdate`)

    @property
    def finished(self) -> str | None:
        """The commit it reports finished (applied and pruned, without errors); None while a sync is
        pending or nothing is reported."""
        return self.syncing if self.reported and self.pending is None else None


UNREPORTED = SyncProgress(reported=False)


def _errors(stage: Mapping[str, object]) -> int:
    total = block_of(stage, "errorSummary").get("totalCount")
    if isinstance(total, int) and total > 0:
        return total
    errors = stage.get("errors")
    return len(errors) if isinstance(errors, list) else 0


def _syncing(status: Mapping[str, object]) -> Mapping[str, object]:
    conditions = status.get("conditions")
    if not isinstance(conditions, list):
        return {}
    return next((c for c in conditions if isinstance(c, Mapping) and c.get("type") == "Syncing"), {})


def sync_progress(rsync: RSync) -> SyncProgress:
    """What the RSync status says of the reconciler's last sync."""
    status = block_of(rsync, "status")
    source = block_of(status, "source").get("commit")
    synced = block_of(status, "sync").get("commit")
    read = SyncProgress(
        False, None, _commit(source), _commit(synced), timestamp(block_of(status, "sync").get("lastUpdate"))
    )
    return replace(read, reported=bool(source or synced), pending=_pending(status, source, synced))


def _pending(status: Mapping[str, object], source: object, synced: object) -> str | None:
    """Why the reconciler's sync is not finished; None when it is, or when it reports nothing."""
    if not source and not synced:
        return None
    if source != synced:
        return f"the reconciler has synced {_short(synced)}, not yet {_short(source)}"
    if _syncing(status).get("status") == "True":
        return f"the reconciler is syncing {_short(source)}"
    for stage in _STAGES:
        errors = _errors(block_of(status, stage))
        if errors:
            return f"the reconciler reports {errors} {stage} error(s)"
    last = status.get("lastSyncedCommit")
    if last != synced:
        return f"the reconciler started {_short(synced)}, last finished {_short(last)}"
    return None


def _commit(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _short(commit: object) -> str:
    return str(commit)[:12] if commit else "nothing"
