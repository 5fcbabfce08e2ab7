"""Prune pending from what the reconciler reports (RSync status), not from a count difference."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.outcome import Outcome
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis, decide_size, initial
from autoscaler.core.sizing import PROTOTYPE, STANDARD, Profile
from inventory.core.counts import ObjectCounts
from inventory.core.objects import RSync
from inventory.core.sync_progress import SyncProgress, sync_progress

A, B = "a" * 40, "b" * 40
SYNCED = {"type": "Syncing", "status": "False", "reason": "Sync", "message": "Sync Completed"}
SYNCING = {"type": "Syncing", "status": "True", "reason": "Sync", "message": "Sync in progress"}


def rsync(status: Any) -> RSync:
    return {"apiVersion": "configsync.gke.io/v1beta1", "kind": "RootSync", "status": status}


def status(
    fetched: str | None,
    synced: str | None,
    *conditions: dict[str, str],
    last: str | None = None,
    **stages: Any,
) -> Any:
    """A RootSync status as the reconciler writes it; `stages` give error summaries (source=..., sync=...).
    As Config Sync does, `lastSyncedCommit` is the synced commit once a sync completed without errors
    (the Syncing condition False), else `last`."""
    body: dict[str, Any] = {"conditions": list(conditions)}
    if fetched is not None:
        body["source"] = {"commit": fetched}
    if synced is not None:
        body["sync"] = {"commit": synced}
    for stage, summary in stages.items():
        body.setdefault(stage, {})["errorSummary"] = summary
    completed = SYNCED in conditions and not any(summary.get("totalCount") for summary in stages.values())
    if completed or last is not None:
        body["lastSyncedCommit"] = synced if completed else last
    return body


@pytest.mark.parametrize(
    ("name", "given", "expected"),
    [
        ("no-status", None, SyncProgress(False)),
        ("status-not-an-object", ["x"], SyncProgress(False)),
        ("nothing-synced-yet", status(A, None, SYNCING), SyncProgress(True, "synced nothing, not yet aaaa")),
        ("new-commit-fetched", status(B, A, SYNCED), SyncProgress(True, "synced aaaa")),
        ("syncing", status(A, A, SYNCING), SyncProgress(True, "is syncing aaaa")),
        ("sync-errors", status(A, A, SYNCED, sync={"totalCount": 3}), SyncProgress(True, "3 sync error")),
        ("source-errors", status(A, A, SYNCED, source={"totalCount": 1}), SyncProgress(True, "1 source")),
        ("finished", status(A, A, SYNCED), SyncProgress(True, None)),
        ("finished-zero-errors", status(A, A, SYNCED, sync={"totalCount": 0}), SyncProgress(True, None)),
        # The reconciler's Pod replaced while it applied A (a rollout): sync.commit is A, the Syncing
        # condition gone, the last commit it finished B (seen on the real node with v1.24.3).
        ("interrupted", status(A, A, last=B), SyncProgress(True, "started aaaa")),
        ("interrupted-first-sync", status(A, A), SyncProgress(True, "last finished nothing")),
        (
            "conditions-garbage",
            {"source": {"commit": A}, "sync": {"commit": A}, "lastSyncedCommit": A, "conditions": 7},
            SyncProgress(True),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_what_the_reconciler_reports(name: str, given: Any, expected: SyncProgress) -> None:
    got = sync_progress(rsync(given))
    assert got.reported == expected.reported
    if expected.pending is None:
        assert got.pending is None
    else:
        assert got.pending is not None
        assert expected.pending in got.pending


# The prototype preset on Standard, worked by hand (DESIGN.md 2.5): 5,000 objects: 1128 -> 1152Mi, 1125m;
# 1,001 objects: 128 + 200.2 = 328.2 -> 352Mi, 344m.
AT_5000 = Resources(1125, 1152, 1125, 1152)
AT_1001 = Resources(344, 352, 344, 352)
PROFILE = Profile(PROTOTYPE, STANDARD)
NO_DELAY = Hysteresis(0, 100)


def test_an_implicit_namespace_does_not_hold_the_scale_down_once_the_sync_has_finished() -> None:
    # The inventory holds the source's 1,000 objects and the Namespace they live in.
    counts = ObjectCounts(source=1000, sync=1001)
    last = initial(AT_5000)
    finished = sync_progress(rsync(status(A, A, SYNCED)))
    decision = decide_size(counts, PROFILE, last, now=0, hysteresis=NO_DELAY, progress=finished)
    assert (decision.outcome, decision.resources) == (Outcome.SCALED_DOWN, AT_1001)


@pytest.mark.parametrize(
    "reported", [status(B, A, SYNCED), status(A, A, SYNCING), status(A, A, SYNCED, sync={"totalCount": 2})]
)
def test_no_scale_down_while_the_reconciler_has_not_finished(reported: Any) -> None:
    counts = ObjectCounts(source=1000, sync=1000)
    progress = sync_progress(rsync(reported))
    decision = decide_size(
        counts, PROFILE, initial(AT_5000), now=10_000, hysteresis=NO_DELAY, progress=progress
    )
    assert (decision.outcome, decision.resources) == (Outcome.POSTPONED, AT_5000)
    assert "prune pending (the reconciler" in decision.reason


def test_without_a_report_a_larger_inventory_stands_for_a_prune() -> None:
    decision = decide_size(
        ObjectCounts(source=1000, sync=1001), PROFILE, initial(AT_5000), now=0, hysteresis=NO_DELAY
    )
    assert (decision.outcome, decision.resources) == (Outcome.POSTPONED, AT_5000)
    assert "inventory 1001 > source 1000" in decision.reason
