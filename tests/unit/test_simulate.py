"""The simulator's comparison holds: our default profile never OOMs, restarts the reconciler less than
the addon-resizer-like baseline, and over-provisions less than the static 512Mi default."""

from __future__ import annotations

import pytest

from profiles.simulate import POLICIES, SCENARIOS, Reconciler, Result, Scenario, UsageModel, run_all, simulate

MODEL = UsageModel.fitted()


@pytest.fixture(scope="module")
def table() -> dict[str, dict[str, Result]]:
    return run_all(MODEL)


def total(results: dict[str, Result]) -> Result:
    summed = Result()
    for result in results.values():
        summed.add(result)
    return summed


@pytest.mark.parametrize("policy", ["ours (standard)", "ours (autopilot)"])
def test_our_default_profile_has_no_oom_kill_in_any_scenario(
    table: dict[str, dict[str, Result]], policy: str
) -> None:
    assert {scenario: r.ooms for scenario, r in table[policy].items()} == dict.fromkeys(table[policy], 0)
    assert total(table[policy]).under_seconds == 0


def test_fewer_restarts_than_the_addon_resizer_baseline(table: dict[str, dict[str, Result]]) -> None:
    ours = total(table["ours (standard)"])
    theirs = total(table["addon-resizer-like"])
    # An OOM kill restarts the reconciler too: compare every restart.
    assert ours.restarts + ours.ooms < theirs.restarts + theirs.ooms


def test_less_over_provisioned_memory_than_the_static_autopilot_default(
    table: dict[str, dict[str, Result]],
) -> None:
    for policy in ("ours (standard)", "ours (autopilot)"):
        assert total(table[policy]).over_mib_hours < total(table["static Autopilot 512Mi"]).over_mib_hours


def test_our_own_requests_are_counted_for_ours_alone(table: dict[str, dict[str, Result]]) -> None:
    """By hand, from manifests/: sidecar mode 64 MiB in each Pod + 128 MiB of webhook shared by 10 RSyncs =
    76.8 MiB per RSync; cluster mode 256 MiB of controller + 128 MiB of webhook shared by 10 = 38.4. The
    scenarios last 14 + 4 + 3 + 3 + 10 x 4 = 64 RSync-hours: 4,915.2 and 2,457.6 MiB-h."""
    for policy in ("ours (standard)", "ours (autopilot)"):
        own = total(table[policy]).own_mib_hours
        assert own == pytest.approx({"sidecar": 4915.2, "cluster": 2457.6})
    assert total(table["addon-resizer-like"]).own_mib_hours == {}


def test_the_prototype_without_persistence_reproduces_the_oom_loop(
    table: dict[str, dict[str, Result]],
) -> None:
    assert table["prototype, no persistence"]["restart mid-prune"].ooms > 10


def test_the_usage_model_is_the_reference_fit() -> None:
    assert MODEL.base_mib == pytest.approx(146, abs=1)
    assert MODEL.mib_per_object == pytest.approx(0.158, abs=0.001)


def test_a_reconciler_applies_then_prunes_at_the_apply_rate() -> None:
    scenario = Scenario("tiny", [(0, 1000), (100, 0)], 200)
    result = simulate(scenario, POLICIES["static Standard 200Mi"](), MODEL)
    usage_by_time = {t: usage for t, usage, _, _ in result.trace}
    assert usage_by_time[0] == pytest.approx(MODEL.usage(1000, syncing=True))
    assert usage_by_time[190] == pytest.approx(MODEL.usage(0, syncing=False))
    reconciler = Reconciler(source=100, inventory=0)
    reconciler.step(0)
    assert (reconciler.inventory, reconciler.synced_since_restart) == (100, True)
    assert len(SCENARIOS) >= 4
