"""The pure parts of the side-by-side run on the real reconciler, worked out by hand."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from inventory.core.ids import RSyncKey
from profiles.policies_real import (
    AUTOPILOT_POLICIES,
    POLICIES,
    OwnSample,
    Sample,
    clairvoyant_mib_hours,
    component_of,
    default_phases,
    in_place_resizes,
    integral_mib_hours,
    new_pods,
    override_of,
    own_cost_of,
    own_costs,
    peak_above_request,
    resize_episodes,
    resize_state,
    restarts_and_kills,
    save_logs,
)
from profiles.real_runs import own_table, vpa_object


def sample(
    t: float,
    pod: str = "p1",
    container: str = "c1",
    *,
    working_set: float | None = 100.0,
    request: float | None = 200.0,
    limit: float | None = 200.0,
    restarts: int = 0,
    kills: int = 0,
    resize: str = "",
) -> Sample:
    return Sample(t, pod, container, working_set, request, limit, restarts, kills, resize)


def test_memory_reserved_is_the_limit_else_the_request_held_until_the_next_sample() -> None:
    # 200 MiB for 1,800 s, then 400 MiB (request only, no limit) for 1,800 s: 100 + 200 MiB-h reserved;
    # requested: 100 + 200 too; the last sample holds nothing (no time after it).
    samples = [sample(0), sample(1800, request=400, limit=None), sample(3600, request=None, limit=None)]
    assert integral_mib_hours(samples, lambda s: s.reserved_mib) == pytest.approx(300.0)
    assert integral_mib_hours(samples, lambda s: s.request_mib or 0.0) == pytest.approx(300.0)
    assert integral_mib_hours(samples[:1], lambda s: s.reserved_mib) == 0.0


def test_restarts_and_kills_are_counted_per_pod_and_new_pods_after_the_first() -> None:
    samples = [
        sample(0),
        sample(1, restarts=1, kills=1),  # an OOM kill, restarted in place
        sample(2, restarts=1, kills=1),
        sample(3, "", ""),  # no Pod during the rollout
        sample(4, "p2", "c2"),  # a rollout: a new Pod
        sample(5, "p2", "c3", restarts=2, kills=2),
    ]
    assert restarts_and_kills(samples) == (1 + 2, 1 + 2)
    assert new_pods(samples) == 1
    assert restarts_and_kills([]) == (0, 0)
    assert new_pods([sample(0, "", "")]) == 0


def test_an_in_place_resize_is_a_change_of_the_applied_size_of_one_running_container() -> None:
    samples = [
        sample(0),
        sample(1, request=300, limit=300),  # resized in place: 1
        sample(2, request=300, limit=300, resize="InProgress"),
        sample(3, "p1", "", working_set=None, request=None, limit=None),  # not running: not a resize
        sample(4, "p1", "c2", request=400, limit=400),  # a new container (a restart): not in place
        sample(5, "p2", "c3", request=500, limit=500),  # a new Pod: not in place
        sample(6, "p2", "c3", request=500, limit=None),  # the limit dropped in place: 2
    ]
    assert in_place_resizes(samples) == 2


def test_resize_episodes_count_entries_into_a_state() -> None:
    states = ["", "Deferred", "Deferred", "", "Deferred", "Infeasible", ""]
    samples = [sample(t, resize=state) for t, state in enumerate(states)]
    assert resize_episodes(samples, "Deferred") == 2
    assert resize_episodes(samples, "Infeasible") == 1


def test_the_kubelets_resize_conditions_are_read_as_it_writes_them() -> None:
    def pod(*conditions: dict[str, str]) -> dict[str, object]:
        return {"status": {"conditions": list(conditions)}}

    assert resize_state(pod({"type": "Ready", "status": "True"})) == ""
    assert (
        resize_state(pod({"type": "PodResizePending", "status": "True", "reason": "Deferred"})) == "Deferred"
    )
    assert (
        resize_state(pod({"type": "PodResizePending", "status": "True", "reason": "Infeasible"}))
        == "Infeasible"
    )
    assert resize_state(pod({"type": "PodResizeInProgress", "status": "True"})) == "InProgress"
    assert resize_state(pod({"type": "PodResizeInProgress", "status": "False"})) == ""
    assert resize_state({}) == ""


def test_the_peak_above_the_request_is_zero_when_never_above() -> None:
    assert peak_above_request([sample(0, working_set=150, request=200), sample(1, working_set=None)]) == 0.0
    assert peak_above_request([sample(0, working_set=250, request=200, limit=None)]) == 50.0


def test_components_are_known_by_their_pods_and_ours_in_the_reconciler_pod_by_its_container() -> None:
    assert component_of("root-reconciler-sbs-ours-sidecar-5d9f-abcde", "objcount-autoscaler") == (
        "objcount sidecar"
    )
    assert component_of("root-reconciler-sbs-vpa-5d9f-abcde", "reconciler") is None
    assert component_of("objcount-webhook-cluster-7c4-xyz", "webhook") == "objcount-webhook-cluster"
    assert component_of("objcount-webhook-7c4-xyz", "webhook") == "objcount-webhook"
    assert component_of("objcount-autoscaler-6b8-xyz", "autoscaler") == "objcount-autoscaler"
    assert component_of("vpa-recommender-tuned-6b8-xyz", "recommender") == "vpa-recommender-tuned"
    assert component_of("vpa-recommender-6b8-xyz", "recommender") == "vpa-recommender"
    assert component_of("metrics-server-6b8-xyz", "metrics-server") is None


def test_own_costs_integrate_each_pod_and_shared_components_count_whole_for_each_policy_they_serve() -> None:
    # The updater: 100 MiB requested, 50 used, for 1,800 s: 50 and 25 MiB-h; the tuned recommender
    # 200 / 100 MiB for 3,600 s: 200 and 100 MiB-h; two webhook Pods of 64 / 32 MiB for 3,600 s each.
    samples = [
        OwnSample(0, "vpa-updater", "vpa-updater-1", 50, 100),
        OwnSample(1800, "vpa-updater", "vpa-updater-1", 50, 100),
        OwnSample(0, "vpa-recommender-tuned", "vpa-recommender-tuned-1", 100, 200),
        OwnSample(3600, "vpa-recommender-tuned", "vpa-recommender-tuned-1", 100, 200),
        OwnSample(0, "objcount-webhook", "objcount-webhook-a", 32, 64),
        OwnSample(3600, "objcount-webhook", "objcount-webhook-a", 32, 64),
        OwnSample(0, "objcount-webhook", "objcount-webhook-b", 32, 64),
        OwnSample(3600, "objcount-webhook", "objcount-webhook-b", 32, 64),
    ]
    costs = own_costs(samples)
    assert costs == {
        "vpa-updater": pytest.approx((50.0, 25.0)),
        "vpa-recommender-tuned": pytest.approx((200.0, 100.0)),
        "objcount-webhook": pytest.approx((128.0, 64.0)),
    }
    assert own_cost_of("VPA tuned", costs) == pytest.approx((250.0, 125.0))
    assert own_cost_of("VPA as deployed", costs) == pytest.approx((50.0, 25.0))
    assert own_cost_of("ours, sidecar", costs) == pytest.approx((128.0, 64.0))
    assert own_cost_of("static Standard", costs) == (0.0, 0.0)


def test_the_table_of_our_components_says_each_ones_pods_cost_largest_working_set_and_cpu_time() -> None:
    """The controller's two Pods: 100 MiB requested and 40 MiB used for 1,800 s each (50 and 20 MiB-h each;
    60 MiB at one's last sample, held no longer); CPU 10 -> 40 s in one, 5 -> 8 s then a restarted
    container at 2 s in the other (30 + 3 + 2 = 35 s). The webhook's CPU was not read."""
    samples = [
        OwnSample(0, "objcount-autoscaler", "controller-a", 40, 100, 10.0),
        OwnSample(1800, "objcount-autoscaler", "controller-a", 60, 100, 40.0),
        OwnSample(0, "objcount-autoscaler", "controller-b", 40, 100, 5.0),
        OwnSample(900, "objcount-autoscaler", "controller-b", 40, 100, 8.0),
        OwnSample(1800, "objcount-autoscaler", "controller-b", 40, 100, 2.0),
        OwnSample(0, "objcount-webhook", "webhook-a", 32, 64),
        OwnSample(3600, "objcount-webhook", "webhook-a", 32, 64),
    ]
    assert own_table(samples).splitlines() == [
        "| component | Pods | requested / working set (MiB-h) | largest working set (MiB) | CPU (s) |",
        "|---|---|---|---|---|",
        "| objcount-autoscaler | 2 | 100.00 / 40.00 | 60 | 35.0 |",
        "| objcount-webhook | 1 | 64.00 / 32.00 | 32 | - |",
    ]


def test_the_clairvoyant_reserves_the_next_five_minutes_peak_on_the_grid() -> None:
    # At 0 s the next 300 s hold 10 and 40 MiB: 64 MiB for 100 s; at 100 s they hold 40 and 70 (at 400 s):
    # 96 MiB for 300 s; at 400 s, 70 and 0: 96 MiB for 300 s. (6,400 + 28,800 + 28,800) / 3,600 MiB-h.
    samples = [sample(0, working_set=10), sample(100, working_set=40), sample(400, working_set=70)]
    samples.append(sample(700, working_set=None))
    assert clairvoyant_mib_hours(samples) == pytest.approx(64_000 / 3600)
    assert clairvoyant_mib_hours(samples[:1]) == 0.0


def test_each_log_is_kept_under_a_name_of_its_own(tmp_path: Path) -> None:
    """The sidecar's container is named as the cluster-mode controller is (objcount-autoscaler): runs 4 to
    7 kept the sidecar's log over the controller's. Every log now has a file of its own."""

    class Stack:
        def kubectl(self, *args: str, check: bool) -> SimpleNamespace:
            if "-l" in args:
                return SimpleNamespace(stdout=f"log of {args[args.index('-l') + 1]}\n", stderr="")
            return SimpleNamespace(stdout=f"{' '.join(args)}\n", stderr="")

    save_logs(SimpleNamespace(stack=Stack()), tmp_path)  # type: ignore[arg-type]
    logs = {path.name: path.read_text() for path in (tmp_path / "logs").iterdir()}
    assert logs["objcount-autoscaler.log"] == "log of app.kubernetes.io/name=objcount-autoscaler\n"
    assert "deployment-name=root-reconciler-sbs-ours-sidecar" in logs["objcount-sidecar.log"]
    assert logs["scheduling.txt"].startswith("get events -A --field-selector=reason=FailedScheduling")
    assert logs["node.txt"] == "describe nodes\n"
    assert len(set(logs.values())) == len(logs)


def test_on_autopilot_config_syncs_defaults_give_the_memory_and_the_pods_ours_does_not_size_250m_of_cpu() -> (
    None
):
    cpu_only = {"resources": [{"containerName": "reconciler", "cpuRequest": "250m", "cpuLimit": "250m"}]}
    assert override_of("static Autopilot", "autopilot") == cpu_only
    assert override_of("VPA tuned", "autopilot") == cpu_only
    assert override_of("ours, sidecar", "autopilot") is None
    assert override_of("ours, cluster mode", "autopilot") is None
    # On Standard each policy keeps its own: Autopilot's memory stood in by an override, none for the rest.
    memory = {
        "resources": [{"containerName": "reconciler", "memoryRequest": "512Mi", "memoryLimit": "512Mi"}]
    }
    assert override_of("static Autopilot", "standard") == memory
    assert override_of("VPA tuned", "standard") is None
    assert set(AUTOPILOT_POLICIES) <= set(POLICIES)


def test_on_autopilot_the_default_timeline_leaves_out_only_the_busy_node() -> None:
    standard = [p.name for p in default_phases("standard")]
    assert standard == ["grow 1", "grow 2", "big commit", "prune", "busy node"]
    assert [p.name for p in default_phases("autopilot")] == ["grow 1", "grow 2", "big commit", "prune"]


def test_vpa_controls_the_reconcilers_limit_with_its_request() -> None:
    made = vpa_object(
        POLICIES["VPA tuned"], RSyncKey("RootSync", "config-management-system", "sbs-vpa-tuned")
    )
    reconciler, others = made["spec"]["resourcePolicy"]["containerPolicies"]
    assert reconciler == {
        "containerName": "reconciler",
        "controlledResources": ["cpu", "memory"],
        "controlledValues": "RequestsAndLimits",
    }
    assert others == {"containerName": "*", "mode": "Off"}
    assert made["spec"]["recommenders"] == [{"name": "tuned"}]
    assert made["spec"]["targetRef"]["name"] == "root-reconciler-sbs-vpa-tuned"
