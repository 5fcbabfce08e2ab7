"""Our own cost counted in the comparison with Config Sync's static default (profiles.own_cost)."""

from __future__ import annotations

from autoscaler.core.sizing import AUTOPILOT, STANDARD
from profiles.own_cost import OwnCost, ours_pod_mib, shipped, static_pod_mib


def test_our_requests_are_read_from_the_shipped_manifests() -> None:
    # manifests/: the sidecar 64Mi in each Pod; two webhook replicas of 64Mi (both installs); two
    # controllers of 128Mi.
    assert shipped() == {
        "sidecar": OwnCost("sidecar", 64, 128),
        "cluster": OwnCost("cluster", 0, 256 + 128),
    }
    # On Autopilot without bursting the sidecar asks its autopilotResources: 128Mi.
    assert shipped("autopilot")["sidecar"] == OwnCost("sidecar", 128, 128)


def test_the_shared_part_is_split_between_the_rsyncs() -> None:
    assert OwnCost("sidecar", 64, 128).per_rsync(10) == 64 + 12.8
    assert OwnCost("cluster", 0, 256).per_rsync(1) == 256


def test_config_sync_s_default_pod() -> None:
    # Standard: 200Mi beside git-sync and otel-agent (16 + 100). Autopilot: 512 + 32 + 64 = 608 MiB and
    # 700m + 30m, rounded to 750m, which needs at least 1 GiB per vCPU: 768 MiB.
    assert static_pod_mib(STANDARD) == 316
    assert static_pod_mib(AUTOPILOT) == 768


def test_our_sidecar_is_in_the_pod_it_sizes() -> None:
    sidecar = OwnCost("sidecar", 64, 128)
    # 100 ConfigMaps of 12 KiB: 96 + 0.053 x 100 + 0.0082 x 12 = 101.4 MiB, on the 32 MiB grid 128;
    # the Pod: 128 + 116 (git-sync, otel-agent) + 64 (ours).
    assert ours_pod_mib(STANDARD, sidecar, 100, 12, (("ConfigMap", 100),)) == 128 + 116 + 64
    # On Autopilot 128 + 96 + 64 = 288 is raised to the Pod minimum, 512 MiB (the reconciler gets 352, on
    # the grid; its CPU, 344m + 30m, rounds to 500m, for which 512 MiB is enough).
    assert ours_pod_mib(AUTOPILOT, sidecar, 100, 12, (("ConfigMap", 100),)) == 512
