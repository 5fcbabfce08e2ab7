"""OOM feedback: a reconciler killed at its memory limit needs more than that limit, whatever the count
says (a kind or an object size the sizing never measured). Pure.

When the reconciler container of an RSync's Pod was `OOMKilled` (its current or last termination, as the
kubelet reports it), the RSync gets a memory floor:

    floor = max(limit x 3/2, limit + 128 MiB), rounded up to the sizing step

where `limit` is the memory limit the container was killed at. The floor is the least memory that RSync
gets (the count-based size still wins when it is higher), it is kept on the RSync (annotation
`objcount.dev/oom-floor`) so a restart of the service keeps it, a later kill raises it again from the
limit of that kill, and it is dropped after `oom_quiet_seconds` without a new kill.

Why this rule rather than VPA's max(usage + 100 MiB, usage x 1.2): a reconciler reaches its peak
during the apply or prune of a whole commit, and a kill restarts it into the same apply from the start,
behind the kubelet's growing restart backoff (up to 5 minutes). Each kill costs a whole resync, so the
rule is meant to clear the peak in one step: Config Sync's published measurements put the cost of one
object of different kinds 60-fold apart, so a count-based size can miss by far more than 20 %. A floor
that is too high costs memory until it decays; one that is too low costs another outage.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from autoscaler.core import quantity
from autoscaler.core.resources import ceil_to
from inventory.core.ids import RECONCILER_CONTAINER
from inventory.core.objects import ContainerStatus, Pod, PodView, block_of

RAISE_FACTOR = Fraction(3, 2)
RAISE_AT_LEAST_MIB = 128


@dataclass(frozen=True)
class OomKill:
    """One OOM kill of the reconciler container, as its Pod status reports it."""

    finished_at: str  # the kubelet's `finishedAt` (RFC 3339, UTC): tells one kill from the next
    limit_mib: int  # the memory limit the container was killed at


@dataclass(frozen=True)
class OomFloor:
    """The least memory an RSync gets after an OOM kill."""

    memory_mib: int
    killed_at: str  # `finishedAt` of the last kill it answers
    since: float  # wall-clock seconds when it was last raised: the quiet period counts from there


def raised(limit_mib: int, step_mib: int) -> int:
    """The floor after a kill at `limit_mib`."""
    wanted: Fraction = max(limit_mib * RAISE_FACTOR, Fraction(limit_mib + RAISE_AT_LEAST_MIB))
    return ceil_to(wanted, step_mib)


def next_floor(
    stored: OomFloor | None, kill: OomKill | None, *, now: float, quiet_s: float, step_mib: int
) -> OomFloor | None:
    """The floor from now on: raised by a kill newer than the one the stored floor answers, dropped
    after the quiet period, else as stored."""
    if kill is not None and (stored is None or kill.finished_at > stored.killed_at):
        memory = max(raised(kill.limit_mib, step_mib), stored.memory_mib if stored else 0)
        return OomFloor(memory, kill.finished_at, now)
    if stored is not None and now - stored.since >= quiet_s:
        return None
    return stored


def oom_kill_of(pod: Pod | None) -> OomKill | None:
    """The latest OOM kill of the reconciler container of this Pod, or None (none, or no memory limit to
    reason from: without a limit the kernel killed it for the node, not for its size)."""
    view = PodView.of(pod)
    status = view.status_of(RECONCILER_CONTAINER)
    kills = [
        str(ended.get("finishedAt") or "")
        for ended in status.terminated()
        if ended.get("reason") == "OOMKilled"
    ]
    limit = _killed_at_limit(view, status)
    if not kills or limit is None:
        return None
    return OomKill(max(kills), limit)


def _killed_at_limit(pod: PodView, status: ContainerStatus) -> int | None:
    """The container's memory limit in MiB: what the kubelet reports it runs with, else its spec."""
    running = block_of(block_of(status.raw, "resources"), "limits").get("memory")
    declared = block_of(block_of(pod.container(RECONCILER_CONTAINER), "resources"), "limits").get("memory")
    for value in (running, declared):
        if value is None:
            continue
        try:
            return quantity.mebibytes(value)
        except quantity.QuantityError:
            continue
    return None
