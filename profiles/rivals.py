"""The policies ours is compared with, as pure rules: one place for both comparisons, the simulator
(`profiles.simulate`, a usage model in 10-second ticks) and the run against the real reconciler
(`profiles.policies_real`, wall-clock seconds). No I/O; time is passed in.

- Config Sync's static defaults for the reconciler container (DESIGN.md 2.4): Standard requests
  200Mi and sets no memory limit; Autopilot sets request = limit = 512Mi.
- The prototype (DESIGN.md 2.5): 128 MiB + 0.2 MiB per object, request = limit, rewritten whenever the
  formula changes, on counts it does not persist: after a restart the synced count reads 0 until the
  reconciler reports a completed sync again, so a restart mid-prune sizes for the smaller source.
- VPA-like: every `every_s`, the 90th percentile of the usage seen over `window_s`, plus 15 %, becomes
  the request (and the limit: request = limit, as on Autopilot, so a kill is possible) when it differs
  by more than 10 % (VPA's updater evicts the Pod to apply it); after an OOM kill the request is raised
  by 20 % at once. A simplification of VPA's recommender (no decaying histogram, no minimum), kept the
  same in both comparisons.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from enum import StrEnum

from autoscaler.policy import PROTOTYPE


@dataclass(frozen=True)
class Static:
    request_mib: int
    limit_mib: int | None


STATIC_STANDARD = Static(200, None)
STATIC_AUTOPILOT = Static(512, 512)


def prototype_memory_mib(source: int, synced: int, synced_since_restart: bool) -> int:
    """The prototype's size: its synced count is lost on a restart and reads 0 until the next sync ends."""
    return PROTOTYPE.memory_mib(max(source, synced if synced_since_restart else 0))


class Change(StrEnum):
    RECOMMENDATION = "recommendation"  # applied by evicting the Pod
    OOM = "oom"  # raised after a kill (the kill already restarted the container)


@dataclass
class VpaLike:
    every_s: float
    window_s: float
    request_mib: float = 200.0  # Config Sync's Standard request until the first recommendation
    percentile: float = 0.9
    margin: float = 1.15
    threshold: float = 0.10
    oom_raise: float = 1.2
    ooms_seen: int = 0
    next_at: float | None = None
    samples: deque[tuple[float, float]] = field(default_factory=deque)

    def observe(self, now: float, usage_mib: float | None, ooms: int) -> Change | None:
        """Takes one usage sample (None: no process to sample) and the OOM kills so far; says whether the
        request changed and why."""
        if usage_mib is not None:
            self.samples.append((now, usage_mib))
        while self.samples and self.samples[0][0] <= now - self.window_s:
            self.samples.popleft()
        if self.next_at is None:
            self.next_at = now + self.every_s
        raised = ooms > self.ooms_seen
        if raised:
            self.ooms_seen = ooms
            self.request_mib *= self.oom_raise
        if now >= self.next_at and self.samples:
            self.next_at = now + self.every_s
            ordered = sorted(usage for _, usage in self.samples)
            target = ordered[min(len(ordered) - 1, int(self.percentile * len(ordered)))] * self.margin
            if abs(target - self.request_mib) / self.request_mib > self.threshold:
                self.request_mib = target
                return Change.RECOMMENDATION
        return Change.OOM if raised else None
