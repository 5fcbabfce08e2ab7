"""The `vpa` target's pure side (autoscaler.core.vpa): which VerticalPodAutoscaler is ours to write to,
what its resourcePolicy lets through, the recommendation written. Expected objects written by hand from
VPA v1.8.1's types and capping rules (pkg/utils/vpa/capping.go), never computed by the code under test."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core import vpa
from autoscaler.core.reasons import ReadError, Reason
from autoscaler.core.resources import Resources

NOW = "2026-11-26T12:00:00Z"


def a_vpa(
    deployment: str = "root-reconciler",
    recommenders: list[dict[str, str]] | None = None,
    policies: list[dict[str, Any]] | None = None,
    status: dict[str, Any] | None = None,
    name: str = "mine",
) -> dict[str, Any]:
    spec: dict[str, Any] = {"targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment}}
    if recommenders is not None:
        spec["recommenders"] = recommenders
    if policies is not None:
        spec["resourcePolicy"] = {"containerPolicies": policies}
    return {
        "metadata": {"name": name, "namespace": "config-management-system"},
        "spec": spec,
        "status": status or {},
    }


OURS = [{"name": "objcount"}]


# ----- which VPA -------------------------------------------------------------------------------------------
def test_the_vpa_aimed_at_the_reconciler_naming_our_recommender_is_ours() -> None:
    mine = a_vpa(recommenders=OURS)
    others = [a_vpa("root-reconciler-other", name="x"), a_vpa("ns-reconciler-a", recommenders=OURS, name="y")]
    assert vpa.ours([*others, mine], "root-reconciler", "objcount") is mine


def test_no_vpa_aimed_at_the_reconciler_is_none() -> None:
    assert vpa.ours([a_vpa("ns-reconciler-a", recommenders=OURS)], "root-reconciler", "objcount") is None


def test_a_vpa_aimed_at_something_else_than_a_deployment_is_not_aimed_at_it() -> None:
    statefulset = a_vpa(recommenders=OURS)
    statefulset["spec"]["targetRef"]["kind"] = "StatefulSet"
    assert vpa.ours([statefulset], "root-reconciler", "objcount") is None


@pytest.mark.parametrize(
    ("recommenders", "named"), [(None, "'default'"), ([], "'default'"), ([{"name": "tuned"}], "'tuned'")]
)
def test_a_vpa_of_another_recommender_or_the_default_one_is_never_ours(
    recommenders: list[dict[str, str]] | None, named: str
) -> None:
    with pytest.raises(ReadError) as raised:
        vpa.ours([a_vpa(recommenders=recommenders)], "root-reconciler", "objcount")
    assert raised.value.reason == Reason.OWNED
    assert f"follows recommender {named}, not 'objcount'" in str(raised.value)


def test_two_vpas_aimed_at_one_reconciler_are_neither_written() -> None:
    with pytest.raises(ReadError) as raised:
        vpa.ours(
            [a_vpa(recommenders=OURS, name="a"), a_vpa(recommenders=OURS, name="b")],
            "root-reconciler",
            "objcount",
        )
    assert raised.value.reason == Reason.OWNED
    assert "2 VerticalPodAutoscalers aim at Deployment root-reconciler" in str(raised.value)


# ----- its policy ------------------------------------------------------------------------------------------
def test_the_containers_own_policy_comes_before_the_star_entry() -> None:
    policies = [
        {"containerName": "*", "mode": "Off"},
        {"containerName": "reconciler", "controlledResources": ["memory"], "maxAllowed": {"memory": "1Gi"}},
    ]
    policy = vpa.container_policy(a_vpa(policies=policies), "reconciler")
    assert policy.off is False
    assert policy.controlled == ("memory",)
    assert policy.max_allowed == {"memory": 1 << 30}
    assert vpa.container_policy(a_vpa(policies=policies), "git-sync").off is True


def test_without_a_policy_vpa_controls_cpu_and_memory_uncapped() -> None:
    assert vpa.container_policy(a_vpa(), "reconciler") == vpa.ContainerPolicy()


def test_an_unreadable_bound_is_an_error_not_no_bound() -> None:
    policies = [{"containerName": "reconciler", "maxAllowed": {"memory": "lots"}}]
    with pytest.raises(ReadError) as raised:
        vpa.container_policy(a_vpa(policies=policies), "reconciler")
    assert raised.value.reason == Reason.UNREADABLE


# ----- the recommendation ----------------------------------------------------------------------------------
def test_the_recommendation_puts_both_bounds_on_the_target_so_the_updater_acts_on_any_change() -> None:
    written = vpa.recommendation(a_vpa(recommenders=OURS), "reconciler", Resources(300, 512, None, 640), NOW)
    size = {"cpu": "300m", "memory": "512Mi"}
    assert written.patch == {
        "status": {
            "recommendation": {
                "containerRecommendations": [
                    {
                        "containerName": "reconciler",
                        "target": size,
                        "lowerBound": size,
                        "upperBound": size,
                        "uncappedTarget": size,
                    }
                ]
            },
            "conditions": [
                {
                    "type": "RecommendationProvided",
                    "status": "True",
                    "reason": "ObjectCount",
                    "message": "sized from the objects the reconciler syncs: requests 300m/512Mi, "
                    "limits none/640Mi",
                    "lastTransitionTime": NOW,
                }
            ],
        }
    }
    assert (written.cpu_m, written.memory_mib, written.caps) == (300, 512, ())


def test_max_allowed_caps_the_target_and_the_uncapped_target_keeps_our_ask() -> None:
    policies = [
        {"containerName": "reconciler", "maxAllowed": {"memory": "400Mi"}, "minAllowed": {"cpu": "0.5"}}
    ]
    written = vpa.recommendation(a_vpa(policies=policies), "reconciler", Resources(300, 512), NOW)
    (entry,) = written.patch["status"]["recommendation"]["containerRecommendations"]
    assert entry["target"] == entry["lowerBound"] == entry["upperBound"] == {"cpu": "500m", "memory": "400Mi"}
    assert entry["uncappedTarget"] == {"cpu": "300m", "memory": "512Mi"}
    assert written.caps == ("cpu raised to minAllowed", "memory lowered to maxAllowed")
    assert (written.cpu_m, written.memory_mib) == (500, 400)


def test_only_the_controlled_resources_are_recommended() -> None:
    policies = [{"containerName": "reconciler", "controlledResources": ["memory"]}]
    written = vpa.recommendation(a_vpa(policies=policies), "reconciler", Resources(300, 512), NOW)
    (entry,) = written.patch["status"]["recommendation"]["containerRecommendations"]
    assert entry["target"] == {"memory": "512Mi"}
    assert entry["uncappedTarget"] == {"cpu": "300m", "memory": "512Mi"}
    assert (written.cpu_m, written.memory_mib) == (None, 512)


def test_a_zero_max_allowed_is_no_maximum() -> None:
    policies = [{"containerName": "reconciler", "maxAllowed": {"memory": "0"}}]
    written = vpa.recommendation(a_vpa(policies=policies), "reconciler", Resources(300, 512), NOW)
    assert (written.memory_mib, written.caps) == (512, ())


def test_the_condition_keeps_its_transition_time_while_it_stays_true() -> None:
    earlier = "2026-11-26T11:00:00Z"
    condition = {"type": "RecommendationProvided", "status": "True", "lastTransitionTime": earlier}
    written = vpa.recommendation(
        a_vpa(status={"conditions": [condition]}), "reconciler", Resources(1, 1), NOW
    )
    assert written.patch["status"]["conditions"][0]["lastTransitionTime"] == earlier


# ----- read back -------------------------------------------------------------------------------------------
def recommended_status(target: dict[str, str], uncapped: dict[str, str]) -> dict[str, Any]:
    entry = {"containerName": "reconciler", "target": target, "uncappedTarget": uncapped}
    return {"recommendation": {"containerRecommendations": [entry]}}


def test_what_we_asked_is_read_back_from_the_uncapped_target() -> None:
    status = recommended_status({"memory": "400Mi"}, {"cpu": "300m", "memory": "0.5Gi"})
    assert vpa.recommended(a_vpa(status=status), "reconciler") == Resources(300, 512)
    assert vpa.recommended(a_vpa(), "reconciler") is None


def test_the_limits_of_our_last_decision_come_back_only_with_the_same_requests() -> None:
    last = Resources(300, 512, None, 640)
    assert vpa.with_limits_of(Resources(300, 512), last) == last
    assert vpa.with_limits_of(Resources(300, 600), last) == Resources(300, 600)
    assert vpa.with_limits_of(None, last) is None


def test_applied_compares_the_pods_requests_with_the_target_as_numbers() -> None:
    found = a_vpa(status=recommended_status({"memory": "512Mi"}, {"cpu": "300m", "memory": "512Mi"}))
    assert vpa.applied(found, "reconciler", {"cpu": "50m", "memory": "0.5Gi"}) is True
    assert vpa.applied(found, "reconciler", {"cpu": "50m", "memory": "200Mi"}) is False
    assert vpa.applied(a_vpa(), "reconciler", {"memory": "200Mi"}) is None


def test_the_vpa_we_make_names_us_belongs_to_the_deployment_and_leaves_other_containers_alone() -> None:
    made = vpa.vpa_for("config-management-system", "root-reconciler", "uid-1", "reconciler", "objcount")
    assert made["spec"]["recommenders"] == [{"name": "objcount"}]
    assert made["spec"]["targetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "root-reconciler",
    }
    assert made["metadata"]["ownerReferences"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "root-reconciler", "uid": "uid-1"}
    ]
    assert made["spec"]["updatePolicy"] == {"updateMode": "InPlaceOrRecreate", "minReplicas": 1}
    assert made["spec"]["resourcePolicy"]["containerPolicies"][1] == {"containerName": "*", "mode": "Off"}
    assert vpa.ours([made], "root-reconciler", "objcount") is made


@pytest.mark.parametrize(
    ("update_policy", "in_place"),
    [
        ({"updateMode": "InPlaceOrRecreate"}, True),
        ({"updateMode": "Recreate"}, False),
        ({"updateMode": "Auto"}, False),
        ({"updateMode": "Initial"}, False),
        ({}, False),  # VPA's default (Auto: recreate)
        ("InPlaceOrRecreate", False),  # not an object: malformed, nothing assumed
    ],
)
def test_only_an_in_place_update_mode_resizes_the_running_reconciler(
    update_policy: object, in_place: bool
) -> None:
    assert vpa.resizes_in_place({"spec": {"updatePolicy": update_policy}}) is in_place
