"""The rivals' rules the simulator uses (`profiles.rivals`), worked out by hand."""

from __future__ import annotations

from profiles.rivals import prototype_memory_mib


def test_the_prototype_loses_its_synced_count_when_it_restarts() -> None:
    # 128 + 0.2 x 5000 = 1128 -> 1152 MiB; after a restart mid-prune it sees only the source's 500:
    # 128 + 100 = 228 -> 256 MiB.
    assert prototype_memory_mib(500, 5000, synced_since_restart=True) == 1152
    assert prototype_memory_mib(500, 5000, synced_since_restart=False) == 256
