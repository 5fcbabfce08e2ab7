"""The real-reconciler benchmark's shapes: the platform repository's mix and layout, objects spread over
namespaces, and a cluster-scoped kind."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import yaml

from profiles.reconciler_memory import manifests


def objects(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_a_platform_repository_has_the_mix_counted_in_config_sync_s_test_data() -> None:
    docs = objects(manifests("platform", 200, "p"))
    # Two units of platform-mix.md's table: 38, 5, 15, 21, 9, 8, 4 per 100.
    assert Counter(d["kind"] for d in docs) == {
        "Namespace": 76,
        "ServiceAccount": 10,
        "RoleBinding": 30,
        "ConfigMap": 42,
        "Deployment": 18,
        "Service": 16,
        "NetworkPolicy": 8,
    }


def test_every_namespace_a_platform_object_names_is_declared_before_it() -> None:
    declared: set[str] = set()
    for doc in objects(manifests("platform", 250, "p")):
        if doc["kind"] == "Namespace":
            declared.add(doc["metadata"]["name"])
        else:
            assert doc["metadata"]["namespace"] in declared, doc["metadata"]
    assert len(declared) == 38 + 38 + 19  # two whole units, and half a unit's share of 38 %


def test_any_start_of_a_platform_repository_holds_the_kinds_in_proportion() -> None:
    shares = {"Namespace": 38, "ServiceAccount": 5, "RoleBinding": 15, "ConfigMap": 21, "Deployment": 9}
    shares |= {"Service": 8, "NetworkPolicy": 4}
    kinds = [d["kind"] for d in objects(manifests("platform", 100, "p"))]
    assert kinds[0] == "Namespace"
    for n in range(1, 101):
        for kind, per_hundred in shares.items():
            assert abs(kinds[:n].count(kind) - n * per_hundred / 100) <= 1, (n, kind)


def test_a_platform_repository_s_services_are_headless() -> None:
    services = [d for d in objects(manifests("platform", 100, "p")) if d["kind"] == "Service"]
    assert {s["spec"]["clusterIP"] for s in services} == {"None"}


def test_objects_spread_round_robin_over_namespaces() -> None:
    docs = objects(manifests("configmaps", 10, "p", namespaces=3))
    assert Counter(d["metadata"]["namespace"] for d in docs) == {"p-0": 4, "p-1": 3, "p-2": 3}
    assert {d["metadata"]["namespace"] for d in objects(manifests("configmaps", 5, "p"))} == {"p"}


def test_a_shape_with_its_own_layout_is_not_spread() -> None:
    for shape in ("platform", "clusterroles"):
        with pytest.raises(ValueError, match="cannot be spread"):
            manifests(shape, 10, "p", namespaces=10)


def test_cluster_roles_are_cluster_scoped_and_named_apart_per_point() -> None:
    docs = objects(manifests("clusterroles", 3, "mem-clusterroles-3-0"))
    assert [d["metadata"] for d in docs] == [{"name": f"mem-clusterroles-3-0-{i}"} for i in range(3)]


def test_a_medium_custom_resource_carries_a_few_kib() -> None:
    (doc,) = objects(manifests("medium-crs", 1, "p"))
    assert 3000 <= len(doc["spec"]["payload"]) <= 3 * 1024


@pytest.mark.parametrize(
    ("shape", "kind"),
    [
        ("services", "Service"),
        ("serviceaccounts", "ServiceAccount"),
        ("boutique-deployments", "Deployment"),
        ("operator-deployments", "Deployment"),
    ],
)
def test_the_many_namespace_kinds_shapes_are_that_kind_alone_each_named_once(shape: str, kind: str) -> None:
    docs = objects(manifests(shape, 30, "p"))
    assert {d["kind"] for d in docs} == {kind}
    assert len({d["metadata"]["name"] for d in docs}) == 30


def test_boutique_deployments_are_online_boutique_s_twelve_with_nothing_scheduled() -> None:
    docs = objects(manifests("boutique-deployments", 24, "p"))
    assert {d["spec"]["replicas"] for d in docs} == {0}
    # The release's first Deployment is its frontend, with 10 environment variables (SOURCE.md's file).
    frontend = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert (docs[0]["metadata"]["name"], len(frontend["env"])) == ("frontend-0", 10)
    assert docs[12]["metadata"]["name"] == "frontend-12"
    # Each selects only its own Pods.
    assert all(
        d["spec"]["selector"]["matchLabels"]
        == d["spec"]["template"]["metadata"]["labels"]
        == {"app": d["metadata"]["name"]}
        for d in docs
    )


def test_operator_deployments_are_the_prometheus_operator_s_example_with_nothing_scheduled() -> None:
    docs = objects(manifests("operator-deployments", 3, "p"))
    assert [(d["metadata"]["name"], d["spec"]["replicas"]) for d in docs] == [
        ("prometheus-operator-0", 0),
        ("prometheus-operator-1", 0),
        ("prometheus-operator-2", 0),
    ]
    # As published (SOURCE.md's file): its one container's two arguments and its non-root user.
    template = docs[1]["spec"]["template"]
    assert len(template["spec"]["containers"][0]["args"]) == 2
    assert template["spec"]["securityContext"] == {"runAsNonRoot": True, "runAsUser": 65534}
    assert (
        docs[1]["spec"]["selector"]["matchLabels"]
        == template["metadata"]["labels"]
        == {"app": "prometheus-operator-1"}
    )
