"""The sizing policy: worked examples, platform rules as fixed points, hysteresis with injected time."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from autoscaler.core.outcome import Outcome
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis, SizeDecision, decide_size, initial
from autoscaler.core.sizing import (
    AUTOPILOT,
    AUTOPILOT_BURSTING,
    FITTED,
    PLATFORMS,
    PROTOTYPE,
    STANDARD,
    Load,
    Profile,
    Sizing,
    SizingError,
    detected_platform,
    explain,
    size,
)
from inventory.core.counts import ObjectCounts

# Requests of a git RootSync's other containers on Autopilot (DESIGN.md 2.4): git-sync + otel-agent.
AUTOPILOT_OTHERS = {"others_cpu_m": 20 + 10, "others_memory_mib": 32 + 64}


@pytest.mark.parametrize(
    ("objects", "memory", "cpu"),
    [(0, 128, 125), (1000, 352, 344), (3000, 736, 719), (4000, 928, 907)],
    ids=["empty", "1000", "3000", "4000"],
)
def test_prototype_worked_examples(objects: int, memory: int, cpu: int) -> None:
    assert size(Load(objects), Profile(PROTOTYPE, STANDARD)) == Resources(cpu, memory, cpu, memory)


@pytest.mark.parametrize(
    ("name", "profile", "objects", "expected"),
    [
        ("standard-small", Profile(PROTOTYPE, STANDARD), 10, Resources(157, 160, 157, 160)),
        # 0 objects: pod 155m/224Mi is raised to Autopilot's 250m/512Mi minimum; the reconciler gets it.
        (
            "autopilot-minimum",
            Profile(PROTOTYPE, AUTOPILOT, **AUTOPILOT_OTHERS),
            0,
            Resources(220, 416, 220, 416),
        ),
        # 1000 objects: pod 374m/448Mi -> 512Mi minimum, CPU rounded to 500m (1:1 ratio holds at 512Mi).
        (
            "autopilot-1000",
            Profile(PROTOTYPE, AUTOPILOT, **AUTOPILOT_OTHERS),
            1000,
            Resources(470, 416, 470, 416),
        ),
        # 4000 objects: pod 937m/1024Mi -> CPU rounded to 1000m.
        (
            "autopilot-4000",
            Profile(PROTOTYPE, AUTOPILOT, **AUTOPILOT_OTHERS),
            4000,
            Resources(970, 928, 970, 928),
        ),
        # Bursting: 50m/52Mi minimum, no 250m rounding: the prototype's size stands.
        (
            "bursting-1000",
            Profile(PROTOTYPE, AUTOPILOT_BURSTING, **AUTOPILOT_OTHERS),
            1000,
            Resources(344, 352, 344, 352),
        ),
        # Memory-heavy preset on Autopilot: 6.5 GiB per vCPU at most, so CPU is raised.
        (
            "autopilot-ratio",
            Profile(Sizing("lean-cpu", cpu_m_per_mib=Fraction(1, 10), cpu_min_m=10), AUTOPILOT),
            20000,
            Resources(750, 4128, 750, 4128),
        ),
        (
            "standard-max",
            Profile(Sizing("capped", max_mib=1000), STANDARD),
            100000,
            Resources(969, 992, 969, 992),
        ),
        (
            "memory-limit-factor",
            Profile(Sizing("burst", memory_limit_factor=Fraction(3, 2), cpu_limit_factor=None), STANDARD),
            1000,
            Resources(344, 352, None, 544),
        ),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_size_table(name: str, profile: Profile, objects: int, expected: Resources) -> None:
    assert size(Load(objects), profile) == expected


def sized(objects: int, profile: Profile) -> Resources:
    """size(), with cases beyond the platform's pod maximum left out (those are tested separately)."""
    try:
        return size(Load(objects), profile)
    except SizingError:
        assume(False)
        raise


def _pod(resources: Resources, profile: Profile) -> tuple[int, int]:
    return (
        resources.cpu_request_m + profile.others_cpu_m,
        resources.memory_request_mib + profile.others_memory_mib,
    )


profiles = st.builds(
    Profile,
    sizing=st.builds(
        Sizing,
        name=st.just("generated"),
        base_mib=st.integers(0, 512).map(Fraction),
        mib_per_object=st.fractions(Fraction(1, 100), Fraction(2), max_denominator=100),
        step_mib=st.sampled_from([1, 16, 32, 64, 128]),
        min_mib=st.integers(0, 512),
        cpu_m_per_mib=st.fractions(Fraction(1, 20), Fraction(4), max_denominator=64),
        cpu_min_m=st.integers(1, 500),
        cpu_step_m=st.sampled_from([1, 5, 10, 50]),
    ),
    platform=st.sampled_from(list(PLATFORMS.values())),
    others_cpu_m=st.integers(0, 800),
    others_memory_mib=st.integers(0, 1024),
)
counts = st.integers(0, 60_000)


@settings(max_examples=300, deadline=None)
@given(profiles, counts, counts)
def test_monotone_in_the_count(profile: Profile, a: int, b: int) -> None:
    low, high = sorted((a, b))
    assert sized(high, profile).covers(sized(low, profile))


@settings(max_examples=300, deadline=None)
@given(profiles, counts)
def test_platform_rules_hold_and_are_a_fixed_point(profile: Profile, objects: int) -> None:
    result = sized(objects, profile)
    platform, sizing = profile.platform, profile.sizing
    cpu, memory = _pod(result, profile)
    assert platform.adjust(cpu, memory) == (cpu, memory), "Autopilot would still change this pod"
    assert cpu >= platform.pod_min_cpu_m
    assert memory >= platform.pod_min_memory_mib
    assert cpu % platform.pod_cpu_step_m == 0
    assert result.memory_request_mib % sizing.step_mib == 0
    assert result.memory_request_mib >= sizing.memory_mib(Load(objects))
    if platform.min_gib_per_vcpu is not None and platform.max_gib_per_vcpu is not None:
        gib_per_vcpu = Fraction(memory, 1024) / Fraction(cpu, 1000)
        assert platform.min_gib_per_vcpu <= gib_per_vcpu <= platform.max_gib_per_vcpu
    if platform.limits_equal_requests:
        assert (result.cpu_limit_m, result.memory_limit_mib) == (
            result.cpu_request_m,
            result.memory_request_mib,
        )
    if platform is STANDARD:
        assert result.cpu_request_m % sizing.cpu_step_m == 0 or result.cpu_request_m == sizing.cpu_min_m


resources = st.builds(
    Resources,
    st.integers(1, 8000),
    st.integers(1, 16000),
    st.one_of(st.none(), st.integers(1, 8000)),
    st.one_of(st.none(), st.integers(1, 16000)),
).filter(
    lambda r: (
        (r.cpu_limit_m is None or r.cpu_limit_m >= r.cpu_request_m)
        and (r.memory_limit_mib is None or r.memory_limit_mib >= r.memory_request_mib)
    )
)


@settings(max_examples=300, deadline=None)
@given(profiles, counts, resources)
def test_a_scale_up_from_any_current_size_is_valid_and_never_lowers_a_request(
    profile: Profile, objects: int, current: Resources
) -> None:
    sized(objects, profile)
    decision = decide_size(ObjectCounts(objects, objects), profile, initial(current), now=0)
    result = decision.resources
    assert result is not None
    for request, limit in (
        (result.cpu_request_m, result.cpu_limit_m),
        (result.memory_request_mib, result.memory_limit_mib),
    ):
        assert limit is None or limit >= request, "the API server refuses a limit below its request"
    if decision.outcome == Outcome.SCALED_UP:
        assert result.cpu_request_m >= current.cpu_request_m
        assert result.memory_request_mib >= current.memory_request_mib


@settings(max_examples=200, deadline=None)
@given(profiles, counts, st.integers(0, 60_000), st.floats(0, 1e6))
def test_decide_is_idempotent(profile: Profile, source: int, sync: int, now: float) -> None:
    sized(max(source, sync), profile)
    first = decide_size(ObjectCounts(source, sync), profile, initial(None), now=now)
    again = decide_size(ObjectCounts(source, sync), profile, first, now=now)
    assert again.outcome == Outcome.UNCHANGED
    assert again.resources == first.resources


# ----- hysteresis, with an injected clock -------------------------------------------------------------------
P = Profile(PROTOTYPE, STANDARD)
H = Hysteresis(scale_down_delay_s=600, max_restarts_per_hour=3)


# The prototype's size by hand: memory 128 MiB + 0.2 MiB per object, up to the next 32 MiB step; CPU
# 1000m per GiB of it, rounded up; limits = requests. 100 objects: 148 -> 160Mi, 156.25 -> 157m;
# 2,000: 528 -> 544Mi, 531.25 -> 532m; 3,000: 728 -> 736Mi, 718.75 -> 719m; 5,000: 1128 -> 1152Mi,
# 1125m; 8,000: 1728Mi, 1687.5 -> 1688m.
AT = {
    n: Resources(cpu, memory, cpu, memory)
    for n, cpu, memory in (
        (100, 157, 160),
        (2000, 532, 544),
        (3000, 719, 736),
        (5000, 1125, 1152),
        (8000, 1688, 1728),
    )
}


def step(counts: ObjectCounts, last: SizeDecision, now: float, **kwargs: object) -> SizeDecision:
    return decide_size(counts, P, last, now=now, hysteresis=H, **kwargs)  # type: ignore[arg-type]


def test_scales_up_at_once() -> None:
    d = step(ObjectCounts(100, 100), initial(AT[100]), 0)
    assert d.outcome == Outcome.UNCHANGED
    d = step(ObjectCounts(5000, 100), d, 1)
    assert (d.outcome, d.resources) == (Outcome.SCALED_UP, AT[5000])


def test_a_scale_up_that_keeps_more_cpu_than_needed_names_what_it_writes() -> None:
    """The reconciler runs 1000m/160Mi; 2,000 objects need 532m/544Mi. The scale-up keeps its 1000m, and
    the reason (the log line and the Event) names the resources written, not only the need."""
    d = step(ObjectCounts(2000, 2000), initial(Resources(1000, 160, 1000, 160)), 0)
    assert (d.outcome, d.resources) == (Outcome.SCALED_UP, Resources(1000, 544, 1000, 544))
    assert d.reason == (
        "2000 objects need requests 532m/544Mi, limits 532m/544Mi; "
        "it keeps what it has above that: requests 1000m/544Mi, limits 1000m/544Mi"
    )


def test_scales_down_only_after_the_delay_and_to_the_largest_target_seen() -> None:
    d = initial(AT[5000])
    d = step(ObjectCounts(100, 100), d, 0)
    assert (d.outcome, d.resources) == (Outcome.POSTPONED, AT[5000])
    # A commit of 2,000 objects fetched, then replaced before the reconciler applied it: the inventory
    # stays at 100 entries, so the delay keeps counting from 0, and the 2,000 seen bound the way down.
    d = step(ObjectCounts(2000, 100), d, 300)
    assert d.outcome == Outcome.POSTPONED
    d = step(ObjectCounts(100, 100), d, 599)
    assert (d.outcome, d.resources) == (Outcome.POSTPONED, AT[5000])
    d = step(ObjectCounts(100, 100), d, 600)
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, AT[2000])
    d = step(ObjectCounts(100, 100), d, 601)
    assert d.outcome == Outcome.POSTPONED  # a new window starts for the rest of the way down
    d = step(ObjectCounts(100, 100), d, 1201)
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, AT[100])


def test_an_inventory_change_restarts_the_scale_down_delay_and_its_window() -> None:
    """Delay 600 s: the inventory goes from 1,000 to 400 entries at t=300, so the 400 have held for the
    delay at t=900, not at t=600; the 1,000 seen before the change no longer bound the way down.
    Prototype on Standard, by hand: 5,000 objects -> ceil(1,128 / 32) x 32 = 1,152 MiB, 1,125m;
    400 -> ceil(208 / 32) x 32 = 224 MiB, ceil(224,000 / 1,024) = 219m; limits = requests."""
    d = step(ObjectCounts(1000, 1000), initial(Resources(1125, 1152, 1125, 1152)), 0)
    assert (d.outcome, d.lower_since, d.lower_sync) == (Outcome.POSTPONED, 0, 1000)
    d = step(ObjectCounts(400, 400), d, 300)
    assert (d.outcome, d.lower_since, d.lower_sync) == (Outcome.POSTPONED, 300, 400)
    d = step(ObjectCounts(400, 400), d, 650)
    assert (d.outcome, d.resources) == (Outcome.POSTPONED, Resources(1125, 1152, 1125, 1152))
    d = step(ObjectCounts(400, 400), d, 899)
    assert d.outcome == Outcome.POSTPONED
    d = step(ObjectCounts(400, 400), d, 900)
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, Resources(219, 224, 219, 224))


def test_a_source_change_alone_does_not_restart_the_scale_down_delay() -> None:
    """The inventory holds 400 entries throughout; the source goes to 1,000 at t=300 and back (a commit
    replaced before it was applied): down at t=600, to the 1,000 seen (352 MiB, 344m, by hand)."""
    d = step(ObjectCounts(400, 400), initial(Resources(1125, 1152, 1125, 1152)), 0)
    d = step(ObjectCounts(1000, 400), d, 300)
    assert (d.outcome, d.lower_since) == (Outcome.POSTPONED, 0)
    d = step(ObjectCounts(400, 400), d, 600)
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, Resources(344, 352, 344, 352))


def test_a_scale_up_resets_the_scale_down_window() -> None:
    d = step(ObjectCounts(100, 100), initial(AT[3000]), 0)
    d = step(ObjectCounts(4000, 4000), d, 500)
    assert d.outcome == Outcome.SCALED_UP
    d = step(ObjectCounts(100, 100), d, 700)
    assert (d.outcome, d.lower_since) == (Outcome.POSTPONED, 700)


@pytest.mark.parametrize(
    ("name", "counts", "reason"),
    [
        ("prune-pending", ObjectCounts(source=100, sync=5000), "prune pending"),
        ("source-unknown", ObjectCounts(source=None, sync=100), "unknown"),
        ("sync-unknown", ObjectCounts(source=100, sync=None), "unknown"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_never_scales_down_during_a_prune_or_with_an_unknown_count(
    name: str, counts: ObjectCounts, reason: str
) -> None:
    d = initial(AT[8000])
    for now in (0, 10_000, 100_000):
        d = step(counts, d, now)
        assert d.outcome == Outcome.POSTPONED
        assert d.resources == AT[8000]
        assert reason in d.reason


def test_unknown_counts_still_allow_a_scale_up() -> None:
    d = step(ObjectCounts(source=None, sync=5000), initial(AT[100]), 0)
    assert (d.outcome, d.resources) == (Outcome.SCALED_UP, AT[5000])
    assert step(ObjectCounts(), initial(AT[100]), 0).outcome == Outcome.POSTPONED


def restarted(d: SizeDecision, now: float) -> SizeDecision:
    """The decision after its apply restarted the reconciler (as `autoscaler.core.decide.settled` records)."""
    return replace(d, restarts=(*d.restarts, now))


def test_restart_cap_holds_scale_downs_but_not_scale_ups() -> None:
    d = initial(AT[100])
    now = 0.0
    for objects in (1000, 2000, 3000, 4000):  # four restarts within the hour
        now += 60
        d = step(ObjectCounts(objects, objects), d, now)
        assert d.outcome == Outcome.SCALED_UP
        d = restarted(d, now)
    d = step(ObjectCounts(100, 100), d, now + 1)
    d = step(ObjectCounts(100, 100), d, now + 700)
    assert d.outcome == Outcome.POSTPONED
    assert "restart cap" in d.reason
    d = step(ObjectCounts(100, 100), d, 120 + 3600)  # two of the four restarts have left the hour
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, AT[100])


def test_restart_cap_ignores_changes_that_do_not_restart() -> None:
    d = initial(AT[100])
    for i, objects in enumerate((1000, 2000, 3000, 4000)):
        d = step(ObjectCounts(objects, objects), d, i)  # resized in place: nothing restarted
        assert d.outcome == Outcome.SCALED_UP
    d = step(ObjectCounts(100, 100), d, 10)
    d = step(ObjectCounts(100, 100), d, 700)
    assert d.outcome == Outcome.SCALED_DOWN


def test_sizing_error_is_an_error_outcome() -> None:
    d = decide_size(
        ObjectCounts(10_000_000, 0),
        Profile(Sizing("huge", max_mib=10**7), AUTOPILOT),
        initial(AT[100]),
        now=0,
    )
    assert d.outcome == Outcome.ERROR
    assert d.resources == AT[100]
    assert "over the autopilot pod maximum" in d.reason


# ----- size-aware sizing --------------------------------------------------------------------------------
SIZE_AWARE = Sizing(
    "size-aware",
    base_mib=Fraction(100),
    mib_per_object=Fraction(1, 20),
    mib_per_kib=Fraction(1, 10),
    assumed_kib_per_object=Fraction(2),
    min_mib=64,
)


@pytest.mark.parametrize(
    ("objects", "kib", "memory"),
    [
        # 100 + 0.05 x 1000 + 0.1 x 500 = 200 -> 224 on the 32 MiB grid
        (1000, 500, 224),
        # bytes unknown: 2 KiB per object assumed, 100 + 50 + 0.1 x 2000 = 350 -> 352
        (1000, None, 352),
        # large objects: 100 + 50 + 0.1 x 20,000 = 2150 -> 2176
        (1000, 20_000, 2176),
        (0, 0, 128),
    ],
)
def test_size_aware_memory(objects: int, kib: int | None, memory: int) -> None:
    assert size(Load(objects, kib), Profile(SIZE_AWARE)).memory_request_mib == memory


def test_count_only_presets_ignore_the_bytes() -> None:
    assert size(Load(1000, 50_000), Profile(FITTED)) == size(Load(1000), Profile(FITTED))


def test_the_size_aware_explanation_shows_the_bytes_term() -> None:
    text = explain(Load(1000, 500), Profile(SIZE_AWARE))
    assert "1000 objects, 500 KiB of manifests" in text
    assert (
        "memory = ceil((100 + 0.05 x 1000 + 0.1 x 500 KiB) / 32) x 32 = ceil(200 / 32) x 32 -> 224Mi" in text
    )
    assert "0.1 x 2 x 1000 assumed KiB" in explain(Load(1000), Profile(SIZE_AWARE))


def test_decide_sizes_from_the_source_kib_scaled_to_the_inventory() -> None:
    # source 1000 objects in 500 KiB; the inventory holds 1200: 600 KiB at the source's mean size.
    # 100 + 0.05 x 1200 + 0.1 x 600 = 220 -> 224
    decision = decide_size(ObjectCounts(1000, 1200, 500), Profile(SIZE_AWARE), initial(None), now=0.0)
    assert decision.recommended is not None
    assert decision.recommended.memory_request_mib == 224


@pytest.mark.parametrize(
    ("counts", "kib"),
    [
        (ObjectCounts(1000, 1200, 500), 600),
        (ObjectCounts(1000, 800, 500), 500),
        (ObjectCounts(1000, None, 501), 501),
        (ObjectCounts(3, 10, 1), 4),  # rounded up, never down
        (ObjectCounts(0, 0, 0), 0),
        (ObjectCounts(0, 5, 0), None),  # no object to take a mean size from
        (ObjectCounts(None, 5, None), None),
        (ObjectCounts(1000, 1200, None), None),
    ],
)
def test_target_kib(counts: ObjectCounts, kib: int | None) -> None:
    assert counts.target_kib == kib


def test_the_source_kib_and_kinds_are_merged_with_its_count() -> None:
    stored = ObjectCounts(10, 20, 5, (("ConfigMap", 10),))
    assert ObjectCounts(None, 30, None).over(stored) == ObjectCounts(10, 30, 5, (("ConfigMap", 10),))
    assert ObjectCounts(40, None, 9, (("Secret", 40),)).over(stored) == ObjectCounts(
        40, 20, 9, (("Secret", 40),)
    )
    assert ObjectCounts(10, 20, 6).differs_where_known(stored)
    assert not ObjectCounts(10, 20, None).differs_where_known(stored)


SURFACE_AWARE = Sizing(
    "surface",
    base_mib=Fraction(100),
    mib_per_object=Fraction(0),
    mib_per_api_resource=Fraction(1, 10),
    fit_api_resources=73,
    assumed_api_resources=500,
    min_mib=64,
)


@pytest.mark.parametrize(
    ("api_resources", "memory"),
    [
        (73, 128),  # the surface it was measured on: 100 -> 128
        (40, 128),  # a smaller one never lowers the base
        (373, 160),  # 300 more: 100 + 30 = 130 -> 160
        (None, 160),  # not read: 500 assumed, 100 + 42.7 -> 160
        (1073, 224),  # 1000 more: 200 -> 224
    ],
)
def test_the_api_surface_term(api_resources: int | None, memory: int) -> None:
    load, profile = Load(0, api_resources=api_resources), Profile(SURFACE_AWARE)
    assert size(load, profile).memory_request_mib == memory
    if api_resources == 373:
        assert "0.1 x 300 API resources beyond 73 (served)" in explain(load, profile)


BY_KIND = Sizing(
    "by-kind",
    base_mib=Fraction(100),
    mib_per_object=Fraction(1, 5),
    mib_per_object_of_kind=(("ConfigMap", Fraction(1, 20)), ("Deployment", Fraction(1, 10))),
    min_mib=64,
)


@pytest.mark.parametrize(
    ("objects", "kinds", "memory"),
    [
        # 100 + 0.05 x 1000 = 150 -> 160
        (1000, (("ConfigMap", 1000),), 160),
        # 100 + 0.05 x 1000 + 0.1 x 1000 = 250 -> 256
        (2000, (("ConfigMap", 1000), ("Deployment", 1000)), 256),
        # an unmeasured kind costs the preset's per-object cost: 100 + 0.2 x 1000 = 300 -> 320
        (1000, (("Widget", 1000),), 320),
        # kinds not known: every object at 0.2 -> 320
        (1000, None, 320),
        # the inventory holds 500 more than the source names (a prune to come): those at 0.2,
        # 100 + 0.05 x 1000 + 0.2 x 500 = 250 -> 256
        (1500, (("ConfigMap", 1000),), 256),
    ],
)
def test_per_kind_costs(objects: int, kinds: tuple[tuple[str, int], ...] | None, memory: int) -> None:
    assert size(Load(objects, kinds=kinds), Profile(BY_KIND)).memory_request_mib == memory


BY_KIND_WITH_OTHERS = replace(BY_KIND, mib_per_object_of_other_kind=Fraction(1, 20))


@pytest.mark.parametrize(
    ("objects", "kinds", "memory"),
    [
        # a kind the source names without a cost of its own costs 0.05: 100 + 0.05 x 1000 = 150 -> 160
        (1000, (("Widget", 1000),), 160),
        # the named kinds at their costs, the other named kind at 0.05:
        # 100 + 0.1 x 1000 + 0.05 x 1000 = 250 -> 256
        (2000, (("Deployment", 1000), ("Widget", 1000)), 256),
        # kinds not known: still 0.2 each, 100 + 0.2 x 1000 = 300 -> 320
        (1000, None, 320),
        # objects beyond the source's (implicit Namespaces, a prune to come): of no known kind, at 0.2:
        # 100 + 0.05 x 1000 + 0.2 x 500 = 250 -> 256
        (1500, (("Widget", 1000),), 256),
    ],
)
def test_kinds_without_a_cost_of_their_own(
    objects: int, kinds: tuple[tuple[str, int], ...] | None, memory: int
) -> None:
    assert size(Load(objects, kinds=kinds), Profile(BY_KIND_WITH_OTHERS)).memory_request_mib == memory


def test_the_inventory_alone_prices_each_object_by_its_kind() -> None:
    """Cluster mode reads no source: the inventory's kinds price its objects (100 + 0.05 x 1000 + 0.1 x
    500 = 200 -> 224, where every object at the dearest 0.2 gave 400); where the source was read its
    kinds (the commit to come) are the ones priced."""
    inventory = ObjectCounts(sync=1500, sync_kinds=(("ConfigMap", 1000), ("Deployment", 500)))
    load = Load.of(inventory)
    assert load is not None
    assert load.kinds == (("ConfigMap", 1000), ("Deployment", 500))
    assert size(load, Profile(BY_KIND)).memory_request_mib == 224
    both = replace(inventory, source=1500, source_kinds=(("Deployment", 1500),))
    assert Load.of(both) == Load(1500, kinds=(("Deployment", 1500),))


def test_the_inventorys_kinds_go_with_its_count() -> None:
    stored = ObjectCounts(sync=20, sync_kinds=(("ConfigMap", 20),))
    assert ObjectCounts(source=5).over(stored).sync_kinds == (("ConfigMap", 20),)
    newer = ObjectCounts(sync=30, sync_kinds=(("Secret", 30),))
    assert newer.over(stored).sync_kinds == (("Secret", 30),)


def test_the_explanation_names_each_kind() -> None:
    text = explain(Load(1500, kinds=(("ConfigMap", 1000),)), Profile(BY_KIND))
    assert "memory = ceil((100 + 0.05 x 1000 ConfigMap + 0.2 x 500 of no known kind) / 32) x 32" in text
    text = explain(Load(1600, kinds=(("ConfigMap", 1000), ("Widget", 500))), Profile(BY_KIND_WITH_OTHERS))
    assert "100 + 0.05 x 1000 ConfigMap + 0.05 x 500 of other kinds + 0.2 x 100 of no known kind" in text


@pytest.mark.parametrize(
    ("autopilot", "version", "platform"),
    [
        (False, "v1.30.5-gke.1014001", "standard"),
        (False, "v1.34.4", "standard"),
        (True, "v1.30.2-gke.1394000", "autopilot-bursting"),  # the first version that bursts
        (True, "v1.33.5-gke.1201000", "autopilot-bursting"),
        (True, "v1.30.2-gke.1393999", "autopilot"),
        (True, "v1.29.9-gke.1541000", "autopilot"),
        (True, "v1.34.4", "autopilot"),  # no GKE build number: the stricter rules, which hold on both
        (True, "", "autopilot"),
    ],
)
def test_the_platform_is_detected_as_config_sync_tells_autopilot(
    autopilot: bool, version: str, platform: str
) -> None:
    assert detected_platform(autopilot, version) == platform


def test_a_limit_found_on_the_reconciler_is_kept_raised_with_its_request_and_never_lowered() -> None:
    """A preset that sets no limits, and a reconciler that has one (an older install's 1.5 x, or a hand's):
    a resize in place that leaves it out keeps it, so it stays, scaled with the request (its ratio kept),
    never lowered, and a size once written is not written again. Prototype on Standard without limits, by
    hand: 400 objects -> 224 MiB, 219m; 5,000 -> 1,152 MiB, 1,125m; the limit 336 x 1,152 / 224 = 1,728
    MiB (on the grid)."""
    unlimited = Profile(replace(PROTOTYPE, memory_limit_factor=None, cpu_limit_factor=None), STANDARD)

    def unlimited_step(counts: ObjectCounts, last: SizeDecision, now: float) -> SizeDecision:
        return decide_size(counts, unlimited, last, now=now, hysteresis=H)

    d = unlimited_step(ObjectCounts(5000, 400), initial(Resources(219, 224, None, 336)), 0)
    assert (d.outcome, d.resources) == (Outcome.SCALED_UP, Resources(1125, 1152, None, 1728))
    d = unlimited_step(ObjectCounts(5000, 5000), d, 1)
    assert (d.outcome, d.resources) == (Outcome.UNCHANGED, Resources(1125, 1152, None, 1728))
    d = unlimited_step(ObjectCounts(400, 400), d, 2)
    d = unlimited_step(ObjectCounts(400, 400), d, 602)
    assert (d.outcome, d.resources) == (Outcome.SCALED_DOWN, Resources(219, 224, None, 1728))
    d = unlimited_step(ObjectCounts(400, 400), d, 603)
    assert (d.outcome, d.resources) == (Outcome.UNCHANGED, Resources(219, 224, None, 1728))
    # Without a limit found, none is set.
    d = unlimited_step(ObjectCounts(5000, 400), initial(Resources(219, 224)), 0)
    assert (d.outcome, d.resources) == (Outcome.SCALED_UP, Resources(1125, 1152))


BY_TEMPLATE = replace(
    BY_KIND,
    mib_per_workload_path_step=Fraction(1, 1000),
    assumed_workload_path_steps_per_object=Fraction(400),
)


@pytest.mark.parametrize(
    ("load", "memory"),
    [
        # the source's Pod templates counted: 100 + 0.1 x 1000 + 0.001 x 50,000 = 250 -> 256
        (Load(1000, kinds=(("Deployment", 1000),), workload_path_steps=50_000), 256),
        # no source read (cluster mode): 400 steps assumed each, 100 + 0.1 x 1000 + 0.001 x 400,000 = 600
        # -> 608
        (Load(1000, kinds=(("Deployment", 1000),)), 608),
        # no Pod template, none assumed for the named kinds: 100 + 0.05 x 1000 = 150 -> 160
        (Load(1000, kinds=(("ConfigMap", 1000),)), 160),
        # 500 objects beyond the source's, of no known kind: 0.2 and 400 steps each,
        # 100 + 0.05 x 1000 + 0.2 x 500 + 0.001 x 200,000 = 450 -> 480
        (Load(1500, kinds=(("ConfigMap", 1000),), workload_path_steps=0), 480),
    ],
)
def test_pod_templates_are_priced_by_their_path_steps(load: Load, memory: int) -> None:
    assert size(load, Profile(BY_TEMPLATE)).memory_request_mib == memory


def test_the_source_s_pod_template_steps_go_with_its_count_and_cover_the_last_synced_commit() -> None:
    source = ObjectCounts(1000, source_kinds=(("Deployment", 1000),), source_workload_path_steps=50_000)
    synced = ObjectCounts(800, source_kinds=(("Deployment", 800),), source_workload_path_steps=80_000)
    assert Load.of(source.covering(synced)) == Load(1000, None, (("Deployment", 1000),), None, None, 80_000)
    assert ObjectCounts(sync=3).over(source).source_workload_path_steps == 50_000
