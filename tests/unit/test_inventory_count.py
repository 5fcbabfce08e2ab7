"""Sync count and kinds from raw ResourceGroup JSON: the fast path agrees with a full decode, malformed is
an error."""

from __future__ import annotations

from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from inventory.core.counts import kinds_of
from inventory.core.inventory_count import (
    InventoryCounter,
    count_entries_plainly,
    exact_entries_problem,
    quick_entries_check,
)


def rg(resources: Any = None, *, with_spec: bool = True, status: bool = True) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "kpt.dev/v1alpha1",
        "kind": "ResourceGroup",
        "metadata": {
            "name": "root-sync",
            "namespace": "config-management-system",
            "resourceVersion": "42",
            "labels": {"cli-utils.sigs.k8s.io/inventory-id": "config-management-system_root-sync"},
            "managedFields": [{"fieldsV1": {"f:spec": {"f:resources": {}}}, "manager": "reconciler"}],
        },
    }
    if with_spec:
        obj["spec"] = {} if resources is None else {"resources": resources}
    if status and isinstance(resources, list):
        obj["status"] = {"resourceStatuses": [{"kind": "X", "name": "y", "status": "Current"}] * 3}
    return obj


def entries(n: int) -> list[dict[str, str]]:
    return [{"group": "apps", "kind": "Deployment", "name": f"d-{i}", "namespace": "ns"} for i in range(n)]


def event(obj: dict[str, Any], kind: str = "MODIFIED") -> bytes:
    # The API server writes compact JSON with the keys of unstructured objects sorted.
    return orjson.dumps({"type": kind, "object": obj}, option=orjson.OPT_SORT_KEYS)


COUNTER = InventoryCounter()


@pytest.mark.parametrize("n", [0, 1, 2, 1000, 100_000])
def test_counts_entries_of_a_watch_event(n: int) -> None:
    summary = COUNTER.summarize_event(event(rg(entries(n))))[1]
    assert summary.count == n
    assert summary.valid
    assert (summary.namespace, summary.name, summary.resource_version) == (
        "config-management-system",
        "root-sync",
        "42",
    )
    assert summary.labels["cli-utils.sigs.k8s.io/inventory-id"] == "config-management-system_root-sync"


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        (rg(None), 0),
        (rg(None, with_spec=False), 0),
        (rg([]), 0),
    ],
    ids=["no-resources-key", "no-spec", "empty-list"],
)
def test_empty_inventories_count_zero(obj: dict[str, Any], expected: int) -> None:
    assert COUNTER.summarize(orjson.dumps(obj)).count == expected


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        ("not-a-list", "not a list"),
        ({"kind": "Deployment"}, "not a list"),
        ([{"group": "", "kind": "", "name": "x", "namespace": ""}], "spec.resources[0] has no kind"),
        ([*entries(2), {"group": "", "kind": "ConfigMap", "namespace": ""}], "spec.resources[2] has no name"),
        ([*entries(1), "just-a-string"], "spec.resources[1] is a str"),
        ([{"group": "", "kind": 5, "name": "x", "namespace": ""}], "spec.resources[0] has no kind"),
    ],
    ids=["string", "object", "empty-kind", "missing-name", "not-an-object", "kind-not-string"],
)
def test_malformed_inventories_are_errors_not_counts(resources: Any, message: str) -> None:
    summary = COUNTER.summarize_event(event(rg(resources, status=False)))[1]
    assert summary.count is None
    assert summary.error is not None
    assert message in summary.error


def test_nested_values_fall_back_to_the_exact_check_and_stay_valid() -> None:
    odd = [*entries(2), {"group": "", "kind": "ConfigMap", "name": "x", "namespace": "", "extra": {"a": 1}}]
    raw = event(rg(odd), "MODIFIED")
    assert quick_entries_check(raw, 3) is None
    assert COUNTER.summarize_event(raw)[1].count == 3


def test_kinds_are_counted_with_the_entries() -> None:
    mixed = [
        *entries(2),
        *({"group": "", "kind": "ConfigMap", "name": f"c-{i}", "namespace": "ns"} for i in range(3)),
        {"group": "", "kind": "Namespace", "name": "ns", "namespace": ""},
    ]
    summary = COUNTER.summarize_event(event(rg(mixed)))[1]
    assert summary.kinds == (("ConfigMap", 3), ("Deployment", 2), ("Namespace", 1))


def test_a_kind_the_quick_read_cannot_take_is_read_exactly() -> None:
    """A kind with an escaped character (no Kubernetes kind has one, the inventory is untrusted): the
    regular expression does not match it, so the exact check reads the kinds."""
    odd = [*entries(1), {"group": "x", "kind": 'Odd"Kind', "name": "o", "namespace": ""}]
    raw = event(rg(odd))
    assert quick_entries_check(raw, 2) is True
    assert COUNTER.summarize_event(raw)[1].kinds == (("Deployment", 1), ('Odd"Kind', 1))


def test_a_malformed_inventory_has_no_kinds() -> None:
    assert COUNTER.summarize_event(event(rg([*entries(1), "x"])))[1].kinds is None


def test_not_a_resourcegroup_is_an_error() -> None:
    assert COUNTER.summarize_event(b'{"type":"ADDED","object":{"spec":{}}}')[1].error is not None
    assert COUNTER.summarize(b"not json").error is not None


text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=8)
small_int = st.integers(-(2**40), 2**40)
entry = st.one_of(
    st.fixed_dictionaries({"group": text, "kind": text, "name": text, "namespace": text}),
    st.fixed_dictionaries({"kind": text}),
    st.fixed_dictionaries({"name": text, "kind": st.one_of(text, small_int, st.none())}),
    st.dictionaries(text, st.one_of(text, small_int, st.dictionaries(text, text, max_size=2)), max_size=4),
    text,
    small_int,
)


@settings(max_examples=400, deadline=None)
@given(st.lists(entry, max_size=12), st.booleans())
def test_fast_count_agrees_with_full_decode(resources: list[Any], sort_keys: bool) -> None:
    raw = orjson.dumps(
        {"type": "MODIFIED", "object": rg(resources)}, option=orjson.OPT_SORT_KEYS if sort_keys else 0
    )
    event_type, summary = COUNTER.summarize_event(raw)
    assert event_type == "MODIFIED"
    problem = exact_entries_problem(resources)
    if problem is None:
        assert summary.count == count_entries_plainly(raw) == len(resources)
        assert summary.kinds == kinds_of(Counter(entry["kind"] for entry in resources))
    else:
        assert summary.count is None
        assert summary.error == problem
    if quick_entries_check(raw, len(resources)):
        assert problem is None, "the quick check vouched for a malformed inventory"
