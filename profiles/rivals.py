"""The policies ours is compared with, as pure rules: one place for both comparisons, the simulator
(`profiles.simulate`, a usage model in 10-second ticks), the run against the real reconciler
(`profiles.policies_real`, wall-clock seconds) and our own cost (`profiles.own_cost`). No I/O.

- Config Sync's static defaults for the reconciler container (DESIGN.md 2.4): Standard requests
  200Mi and sets no memory limit; Autopilot sets request = limit = 512Mi.
- The prototype (DESIGN.md 2.5): 128 MiB + 0.2 MiB per object, request = limit, rewritten whenever the
  formula changes, on counts it does not persist: after a restart the synced count reads 0 until the
  reconciler reports a completed sync again, so a restart mid-prune sizes for the smaller source.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.sizing import PROTOTYPE, Load


@dataclass(frozen=True)
class Static:
    request_mib: int
    limit_mib: int | None


STATIC_STANDARD = Static(200, None)
STATIC_AUTOPILOT = Static(512, 512)


def prototype_memory_mib(source: int, synced: int, synced_since_restart: bool) -> int:
    """The prototype's size: its synced count is lost on a restart and reads 0 until the next sync ends."""
    return PROTOTYPE.memory_mib(Load(max(source, synced if synced_since_restart else 0)))
