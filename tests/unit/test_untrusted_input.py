"""Parsers of what other people write (count annotations, quantities, container resources, override
entries, our own published annotations): each returns a value or our own error, never anything else,
and an odd current size never leads to a lower one. Literal expectations are worked out by hand."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autoscaler.core import quantity
from autoscaler.core.annotations import (
    SOURCE_ANNOTATION,
    SOURCE_KIB_ANNOTATION,
    SYNC_ANNOTATION,
    annotation_counts,
    count_annotations,
    kinds_annotation,
    parse_kinds,
    parse_resources_annotation,
    parse_synced_source,
    synced_source_annotation,
)
from autoscaler.core.outcome import Outcome
from autoscaler.core.reasons import ReadError
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis, decide_size, initial
from autoscaler.core.size_fields import reconciler_override, resources_of
from autoscaler.core.sizing import FITTED, STANDARD, Profile
from inventory.core.counts import ObjectCounts, kinds_of
from inventory.core.ids import RSyncKey, key_from_inventory_labels
from inventory.core.inventory_count import InventoryCounter

MiB = 2**20

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
QUANTITY_LIKE = st.from_regex(r"\A[+-]?[0-9.eE²]{0,8}(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei|x)?\Z") | st.text(
    max_size=12
)


# ----- quantities -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Ei", Fraction(2**60)),
        ("2Pi", Fraction(2 * 2**50)),
        ("3E", Fraction(3 * 10**18)),
        ("4P", Fraction(4 * 10**15)),
        ("1.5Gi", Fraction(1536 * MiB)),
        ("100m", Fraction(1, 10)),
        ("129790866n", Fraction(129790866, 10**9)),  # CPU usage as metrics-server v0.8.0 reports it
        ("250u", Fraction(250, 10**6)),
        (".5", Fraction(1, 2)),
        ("5.", Fraction(5)),
        ("1e3", Fraction(1000)),
        ("+512Mi", Fraction(512 * MiB)),
        (" 1Gi ", Fraction(1024 * MiB)),
        (7, Fraction(7)),
    ],
)
def test_quantities_kubernetes_writes_are_read(text: str | int, expected: Fraction) -> None:
    assert quantity.parse(text) == expected


@pytest.mark.parametrize(
    "text",
    ["1.2.3", ".", "²", "-1Gi", "nan", "inf", "1x", "", " ", "1e999", "9Ei" * 40, True, None, [], 1.5e400],
)
def test_what_is_not_a_quantity_is_our_error(text: Any) -> None:
    with pytest.raises(quantity.QuantityError):
        quantity.parse(text)


@given(QUANTITY_LIKE)
def test_a_quantity_parses_to_a_non_negative_value_or_our_error(text: str) -> None:
    try:
        value = quantity.parse(text)
    except quantity.QuantityError:
        return
    assert 0 <= value <= 2**63 - 1


# ----- count annotations --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0", 0),
        ("1001", 1001),
        ("²", None),
        ("٣", None),
        ("-1", None),
        ("1e3", None),
        (" 7", None),
        ("9" * 13, None),
    ],
)
def test_count_annotations(text: str, expected: int | None) -> None:
    rsync = {
        "metadata": {
            "annotations": {SOURCE_ANNOTATION: text, SYNC_ANNOTATION: text, SOURCE_KIB_ANNOTATION: text}
        }
    }
    assert annotation_counts(rsync) == ObjectCounts(expected, expected, expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"ConfigMap": 3, "Deployment": "2"}', (("ConfigMap", 3), ("Deployment", 2))),
        ("{}", ()),
        ('{"ConfigMap": -1}', None),
        ('{"ConfigMap": true}', None),
        ('{"": 1}', None),
        ('{"' + "K" * 254 + '": 1}', None),
        ('["ConfigMap"]', None),
        ("{", None),
        (7, None),
        ("{" + ", ".join(f'"K{i}": 1' for i in range(51)) + "}", None),  # more kinds than we ever write
    ],
)
def test_kinds_annotation(text: object, expected: tuple[tuple[str, int], ...] | None) -> None:
    assert parse_kinds(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            '{"objects": 800, "kib": 90, "kinds": {"ConfigMap": 800}}',
            ObjectCounts(800, None, 90, (("ConfigMap", 800),)),
        ),
        ('{"objects": "800", "kib": null, "kinds": null}', ObjectCounts(800)),
        ('{"objects": 800, "kib": -1, "kinds": {"": 3}}', ObjectCounts(800)),  # unreadable parts: unknown
        ('{"objects": -800}', None),
        ('{"objects": 1e3}', None),
        ('{"kib": 90}', None),
        ("[800]", None),
        ("{", None),
        (None, None),
    ],
)
def test_synced_source_annotation(text: object, expected: ObjectCounts | None) -> None:
    assert parse_synced_source(text) == expected


def test_the_synced_source_annotation_reads_back() -> None:
    counts = ObjectCounts(800, None, 90, (("ConfigMap", 700), ("Secret", 100)))
    text = synced_source_annotation(counts)
    assert text == '{"objects":800,"kib":90,"kinds":{"ConfigMap":700,"Secret":100}}'
    assert parse_synced_source(text) == counts


def test_the_synced_source_s_path_steps_read_back() -> None:
    counts = ObjectCounts(800, source_crd_path_steps=5, source_workload_path_steps=7)
    text = synced_source_annotation(counts)
    assert text == '{"objects":800,"kib":null,"kinds":null,"crd_path_steps":5,"workload_path_steps":7}'
    assert parse_synced_source(text) == counts
    annotations = count_annotations(counts)
    assert annotations["objcount.dev/source-workload-path-steps"] == "7"
    assert annotation_counts({"metadata": {"annotations": annotations}}) == counts


def test_the_kinds_annotation_is_bounded_and_reads_back() -> None:
    kinds = (*((f"Kind{i:03d}", i) for i in range(1, 200)), ("X" * 5000, 10**6))
    text = kinds_annotation(kinds)
    assert len(text) < 2048
    kept = parse_kinds(text)
    assert kept is not None
    assert len(kept) == 50, "the 50 most common real kinds"
    assert min(n for _, n in kept) == 150


def test_recorded_kinds_read_back_as_what_was_observed() -> None:
    # Otherwise a source of more than 50 kinds would be written again at every reconcile.
    observed = kinds_of({**{f"Kind{i:03d}": i for i in range(1, 200)}, "X" * 5000: 10**6})
    assert len(observed) == 50
    assert parse_kinds(kinds_annotation(observed)) == observed
    assert not ObjectCounts(1, 1, 1, observed).differs_where_known(
        annotation_counts({"metadata": {"annotations": count_annotations(ObjectCounts(1, 1, 1, observed))}})
    )


@given(JSON_VALUES, JSON_VALUES)
def test_count_annotations_are_a_count_or_unknown(source: Any, sync: Any) -> None:
    counts = annotation_counts(
        {"metadata": {"annotations": {SOURCE_ANNOTATION: source, SYNC_ANNOTATION: sync}}}
    )
    for value in (counts.source, counts.sync):
        assert value is None or (isinstance(value, int) and value >= 0)


# ----- container resources and override entries -------------------------------------------------------
@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({"requests": {"cpu": "100m", "memory": "256Mi"}}, Resources(100, 256)),
        ({"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}, Resources(0, 1024, None, 1024)),
        ({"limits": {"memory": "2Gi"}}, Resources(0, 0, None, 2048)),
        ({"requests": {"cpu": "1", "memory": "1Pi"}}, Resources(1000, 2**30)),
        ({}, None),
        (None, None),
    ],
)
def test_resources_blocks(block: Any, expected: Resources | None) -> None:
    assert resources_of(block) == expected


@pytest.mark.parametrize(
    "block",
    [
        [],
        "1Gi",
        {"requests": []},
        {"requests": {"memory": "1.2.3"}},
        {"limits": {"cpu": "."}},
        {"requests": {"cpu": None}},
    ],
)
def test_unreadable_resources_are_our_error_not_unset(block: Any) -> None:
    with pytest.raises(quantity.QuantityError):
        resources_of(block)


@given(JSON_VALUES)
def test_a_resources_block_is_resources_none_or_our_error(block: Any) -> None:
    try:
        result = resources_of(block)
    except quantity.QuantityError:
        return
    assert result is None or (isinstance(result, Resources) and result.memory_request_mib >= 0)


@given(JSON_VALUES)
def test_an_override_is_resources_none_or_our_error(resources: Any) -> None:
    rsync = {"spec": {"override": {"resources": resources}}}
    outcome: object
    try:
        outcome = reconciler_override(rsync)
    except ReadError as error:
        outcome = error.reason
    assert outcome is None or outcome == "unreadable" or isinstance(outcome, Resources)


@pytest.mark.parametrize(
    ("entry", "read"),
    [
        (
            {"cpuRequest": "100m", "memoryLimit": "300Mi", "cpuLimit": "0", "memoryRequest": "0"},
            Resources(100, 0, None, 300),
        ),
        ({"cpuRequest": 0, "memoryRequest": "0Mi", "cpuLimit": "0.0", "memoryLimit": "0"}, None),
        ({"memoryRequest": "256Mi", "cpuLimit": "-1"}, "unreadable"),
    ],
    ids=["written-back-with-zeros", "all-zero", "a-negative-one-unreadable"],
)
def test_a_zero_quantity_in_an_override_is_not_set(entry: dict[str, Any], read: object) -> None:
    """As Config Sync reads it: its reconciler-manager takes the template's default for a zero quantity,
    and its typed updates of an RSync write each unset one back as "0"."""
    rsync = {"spec": {"override": {"resources": [{"containerName": "reconciler", **entry}]}}}
    try:
        outcome: object = reconciler_override(rsync)
    except ReadError as error:
        outcome = error.reason
    assert outcome == read


@pytest.mark.parametrize(
    "text",
    ["[1, 2]", '"x"', "{", "null", '{"requests": {"memory": "1.2.3"}}', '{"requests": []}', "", "1e999"],
)
def test_an_unreadable_published_annotation_is_none(text: str) -> None:
    assert parse_resources_annotation(text) is None


@given(st.text(max_size=40) | JSON_VALUES.map(str))
def test_a_published_annotation_is_resources_or_none(text: str) -> None:
    result = parse_resources_annotation(text)
    assert result is None or isinstance(result, Resources)


# ----- an odd current size never leads to a lower one ----------------------------------------------------
PROFILE = Profile(FITTED, STANDARD, 20, 116)


@given(
    memory=st.integers(1, 4096),
    unit=st.sampled_from(["Mi", "Gi", "Pi", "Ei"]),
    objects=st.integers(0, 20_000),
)
@settings(max_examples=200)
def test_a_memory_only_size_is_never_lowered(memory: int, unit: str, objects: int) -> None:
    assume(memory * {"Mi": 2**20, "Gi": 2**30, "Pi": 2**50, "Ei": 2**60}[unit] <= 2**63 - 1)
    current = resources_of(
        {"limits": {"memory": f"{memory}{unit}"}, "requests": {"memory": f"{memory}{unit}"}}
    )
    assert current is not None
    decision = decide_size(
        ObjectCounts(objects, objects), PROFILE, initial(current), now=0.0, hysteresis=Hysteresis(600, 6)
    )
    if decision.outcome in (Outcome.SCALED_UP, Outcome.SCALED_DOWN):
        assert decision.resources is not None
        assert decision.resources.memory_request_mib >= current.memory_request_mib
        assert decision.resources.memory_limit_mib is not None
        assert current.memory_limit_mib is not None
        assert decision.resources.memory_limit_mib >= current.memory_limit_mib


def test_a_memory_only_request_of_1ei_is_kept_not_replaced_by_a_scale_up() -> None:
    # 1Ei = 2^40 MiB: far above what 100 objects need, so nothing may be lowered (before the fix the
    # unreadable size counted as unknown and 224Mi was applied as a "scale-up").
    current = resources_of({"requests": {"memory": "1Ei"}, "limits": {"memory": "1Ei"}})
    assert current == Resources(0, 2**40, None, 2**40)
    decision = decide_size(ObjectCounts(100, 100), PROFILE, initial(current), now=0.0)
    assert decision.resources is not None
    assert decision.resources.memory_limit_mib == 2**40
    assert decision.resources.memory_request_mib == 2**40


# ----- inventories (ResourceGroups) -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("body", "count", "error"),
    [
        ({"metadata": {"name": "a", "namespace": "n"}, "spec": {"resources": None}}, 0, None),
        ({"metadata": {"name": "a", "namespace": "n"}}, 0, None),
        ({"metadata": {"name": "a", "namespace": "n"}, "spec": []}, None, "spec is a"),
        ({"metadata": {"name": "a", "namespace": "n"}, "spec": "x"}, None, "spec is a"),
        ({"metadata": {"name": "a", "namespace": "n"}, "spec": {"resources": {}}}, None, "not a list"),
        ({"metadata": None, "spec": {}}, None, "not a ResourceGroup object"),
        ({"metadata": {"name": "a", "labels": [1]}, "spec": {}}, None, "not a ResourceGroup object"),
        ({"metadata": {"name": "a", "labels": None}, "spec": {}}, 0, None),
    ],
)
def test_odd_inventories_are_counted_or_refused(body: Any, count: int | None, error: str | None) -> None:
    summary = InventoryCounter().summarize(orjson.dumps(body))
    assert summary.count == count
    assert (summary.error is None) if error is None else (error in (summary.error or ""))


@given(st.dictionaries(st.sampled_from(["metadata", "spec", "kind"]), JSON_VALUES, max_size=3))
def test_an_inventory_is_a_count_or_an_error_never_a_crash(body: dict[str, Any]) -> None:
    summary = InventoryCounter().summarize(orjson.dumps(body))
    assert (summary.count is None) != (summary.error is None)
    assert summary.count is None or summary.count >= 0


def test_an_inventory_without_labels_belongs_to_the_rsync_of_its_name() -> None:
    assert key_from_inventory_labels({}, "config-management-system", "root-sync") == RSyncKey(
        "RootSync", "config-management-system", "root-sync"
    )
    assert key_from_inventory_labels({}, "team-a", "repo-sync") == RSyncKey("RepoSync", "team-a", "repo-sync")
