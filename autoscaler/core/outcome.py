"""How a reconcile ended: the one vocabulary of `decide` and the loop, and the
`outcome` label of objcount_decisions_total (docs/metrics.md lists the same values: tests/unit/test_docs.py).
"""

from __future__ import annotations

from enum import StrEnum


class Outcome(StrEnum):
    UNCHANGED = "unchanged"  # sized as it should be
    SCALED_UP = "scaled_up"
    SCALED_DOWN = "scaled_down"
    POSTPONED = "postponed"  # waits (delay, prune, unknown count, restart cap, a sidecar's Pod going)
    # The step can give no size (the platform cannot fit the Pod, an unknown platform asked): not retried,
    # the same inputs give the same error; it waits for a change of them or the resync.
    ERROR = "error"
    # A read or a write failed, or the reconcile crashed: tried again after the work queue's backoff.
    FAILED = "failed"
    OPTED_OUT = "opted_out"  # objcount.dev/autoscale: "false": counts recorded, nothing sized
    HANDS_OFF = "hands_off"  # another writer keeps reverting our size: not applying for a while
    HELD_BY_OWNER = "held_by_owner"  # the field we would write is another owner's: recommended only
    DEFERRED_STARTUP = "deferred_startup"  # the caches are not synced yet: looked at again shortly
    GONE = "gone"  # the RSync was deleted: what we knew of it is forgotten
