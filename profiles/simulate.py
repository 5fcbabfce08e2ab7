"""Policy simulator: replay object-count timelines through a usage model and compare sizing policies.

    python -m profiles.simulate [--out profiles/out] [--plot]

The reconciler model, in 10-second ticks: a commit sets the source count; the reconciler applies at
`APPLY_RATE` objects per second, so the inventory follows; a prune happens when a sync that removes
objects completes. While it works it holds both the parsed source and the inventory, so its memory is
`usage(max(source, inventory))`; idle, `usage(inventory)`. `usage` is the line fitted to the reference
data (`profiles/data/reconciler-memory-by-object-count.csv`, 146 MiB + 0.158 MiB per object) plus 10 %
while a sync runs. Usage above the limit is an OOM kill. Every restart (OOM kill, eviction, a template
or override change) takes the reconciler down for `RESTART_SECONDS`, after which it parses everything
again.

Policies: ours (the service's decision, `autoscaler.core.decide.decide`, with the count-only `fitted`
preset on the counts it persists, per platform: the hysteresis, the restart cap and the OOM floor as the
service runs them);
static Config Sync defaults (Autopilot 512Mi request = limit; Standard 200Mi request, no limit); the
prototype formula without count persistence (after a restart it reports the inventory as 0 until its
first sync completes: the OOM loop of DESIGN.md 2.5); and an addon-resizer-like poller (every 10 s,
the fitted line on the inventory count only, restart on any change). VPA is not modelled: a rule of
ours standing in for it was removed when the real VPA was measured beside ours (BENCHMARKS.md,
"Policies side by side on the real reconciler"), since a model can only be trusted as far as it was
checked against the real thing.
"""

from __future__ import annotations

import argparse
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.core.decide import decide
from autoscaler.core.observation import Observation, Reading, RSyncView
from autoscaler.core.oom import OomKill
from autoscaler.core.plan import DecideConfig, RSyncState
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import FITTED, Load, size
from autoscaler.core.written import Applied, Written
from autoscaler.service.settings import Settings
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from profiles.fit import least_squares, read_points
from profiles.own_cost import RSYNCS, shipped
from profiles.rivals import STATIC_AUTOPILOT, STATIC_STANDARD, Static, prototype_memory_mib

TICK = 10.0
APPLY_RATE = 50.0  # objects per second
RESTART_SECONDS = 30.0
SYNC_OVERHEAD = 1.10
DATA = Path(__file__).resolve().parent / "data" / "reconciler-memory-by-object-count.csv"


@dataclass(frozen=True)
class UsageModel:
    base_mib: float
    mib_per_object: float

    @classmethod
    def fitted(cls) -> UsageModel:
        return cls(*least_squares(read_points(DATA)))

    def usage(self, objects: float, syncing: bool) -> float:
        return (self.base_mib + self.mib_per_object * objects) * (SYNC_OVERHEAD if syncing else 1.0)


@dataclass
class Reconciler:
    source: int = 0
    inventory: int = 0
    down_until: float = -1.0
    restarts: int = 0
    ooms: int = 0
    synced_since_restart: bool = False

    def up(self, now: float) -> bool:
        return now >= self.down_until

    def syncing(self) -> bool:
        return self.inventory != self.source or not self.synced_since_restart

    def working_set(self) -> int:
        return max(self.source, self.inventory) if self.syncing() else self.inventory

    def step(self, now: float) -> None:
        """Apply (or prune, once the source shrank) at APPLY_RATE; a sync completes when both agree."""
        if not self.up(now):
            return
        if self.source > self.inventory:
            self.inventory = min(self.source, self.inventory + int(APPLY_RATE * TICK))
        elif self.source < self.inventory:
            self.inventory = max(self.source, self.inventory - int(APPLY_RATE * TICK))
        if self.inventory == self.source:
            self.synced_since_restart = True

    def restart(self, now: float, oom: bool) -> None:
        self.restarts += 0 if oom else 1
        self.ooms += 1 if oom else 0
        self.down_until = now + RESTART_SECONDS
        self.synced_since_restart = False


# A policy sees the reconciler each tick and returns (request MiB, limit MiB or None, restart now?).
Policy = Callable[[float, Reconciler, float], tuple[float, float | None, bool]]


SIMULATED = RSyncKey("RootSync", "config-management-system", "simulated")
# The RSync as the service sees it in the simulation: no status (the reconciler's own report of its sync
# is not modelled, so a prune is told by an inventory larger than the source) and nothing recorded.
SIMULATED_VIEW = RSyncView.of({"metadata": {"name": SIMULATED.name, "namespace": SIMULATED.namespace}})


def ours(platform_name: str) -> Callable[[], Policy]:
    """The service's own decision (`autoscaler.core.decide`, what a reconcile runs) on a platform, with the
    count-only preset fitted to the reference data the usage model is fitted to: the default, size-aware,
    needs kinds, KiB and the API surface, which this model does not have (`profiles.policies_real` runs the
    default against the real reconciler). Each change is applied as a rollout (a restart), as the
    rsync-override target does; an OOM kill reaches the step as the reconciler's Pod would report it."""
    profile = Settings(mode="cluster", platform=platform_name, preset="fitted").profile()
    config = DecideConfig(profile, Hysteresis(600, 6), target="simulated")

    def make() -> Policy:
        state = [RSyncState()]
        kills: list[tuple[int, OomKill | None]] = [(0, None)]

        def policy(now: float, reconciler: Reconciler, usage: float) -> tuple[float, float | None, bool]:
            last = state[0].decision
            if reconciler.ooms > kills[0][0] and last is not None and last.resources is not None:
                limit = last.resources.memory_limit_mib or last.resources.memory_request_mib
                kills[0] = (reconciler.ooms, OomKill(_rfc3339(now), limit))
            # Counts persist in the RSync status: a restart loses nothing.
            counts = ObjectCounts(reconciler.source, reconciler.inventory)
            reading = Reading(current=size(Load(0), profile), oom_kill=kills[0][1])
            decision = decide(
                Observation(SIMULATED, SIMULATED_VIEW, reading, counts, now, wall=now),
                state[0],
                config,
            )
            plan = decision.plan
            # Every size written restarts the simulated reconciler (a rollout).
            applied = None if plan.apply is None else Applied(plan.apply, restarted=True)
            state[0] = decision.after(Written(applied), now).state
            sized = state[0].decision
            assert sized is not None
            assert sized.resources is not None
            return sized.resources.memory_request_mib, sized.resources.memory_limit_mib, applied is not None

        return policy

    return make


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def static(rule: Static) -> Callable[[], Policy]:
    def make() -> Policy:
        return lambda now, reconciler, usage: (rule.request_mib, rule.limit_mib, False)

    return make


def prototype_without_persistence() -> Policy:
    last = [0.0]

    def policy(now: float, reconciler: Reconciler, usage: float) -> tuple[float, float | None, bool]:
        memory = float(
            prototype_memory_mib(reconciler.source, reconciler.inventory, reconciler.synced_since_restart)
        )
        changed = memory != last[0]
        last[0] = memory
        return memory, memory, changed and now > 0

    return policy


def addon_resizer_like() -> Policy:
    """Linear in what exists (the inventory), calibrated like ours, but it only sees objects once applied."""
    state = {"memory": 0.0, "next": 0.0}

    def policy(now: float, reconciler: Reconciler, usage: float) -> tuple[float, float | None, bool]:
        restart = False
        if now >= state["next"]:
            state["next"] = now + 10
            target = float(FITTED.base_mib + FITTED.mib_per_object * reconciler.inventory)
            restart = target != state["memory"] and now > 0
            state["memory"] = target
        return state["memory"], state["memory"], restart

    return policy


POLICIES: dict[str, Callable[[], Policy]] = {
    "ours (standard)": ours("standard"),
    "ours (autopilot)": ours("autopilot"),
    "static Autopilot 512Mi": static(STATIC_AUTOPILOT),
    "static Standard 200Mi": static(STATIC_STANDARD),
    "prototype, no persistence": prototype_without_persistence,
    "addon-resizer-like": addon_resizer_like,
}


# ----- scenarios: (time in seconds, new source count) and reconciler restarts -------------------------
@dataclass(frozen=True)
class Scenario:
    name: str
    commits: list[tuple[float, int]]
    duration: float
    node_restarts: list[float] = field(default_factory=list)


def _ramp(start: float, counts: list[int], every: float) -> list[tuple[float, int]]:
    return [(start + i * every, n) for i, n in enumerate(counts)]


SCENARIOS = [
    Scenario("ramp up and down", _ramp(0, [*range(500, 5001, 500), *range(4500, 0, -500)], 600), 14 * 3600),
    Scenario("big prune", [(0, 5000), (3600, 500)], 4 * 3600),
    Scenario("restart mid-sync", [(0, 1000), (1800, 4000)], 3 * 3600, node_restarts=[1830]),
    # The prototype's failure: a restart during a prune (5,000 -> 500 takes 90 s to delete).
    Scenario("restart mid-prune", [(0, 5000), (3600, 500)], 3 * 3600, node_restarts=[3640]),
]
MANY_RSYNCS = [
    Scenario(f"rsync {i}", _ramp(i * 60, [100 * (i + 1), 400 * (i + 1), 50 * (i + 1)], 3600), 4 * 3600)
    for i in range(10)
]


@dataclass
class Result:
    ooms: int = 0
    restarts: int = 0
    under_seconds: float = 0.0
    over_mib_hours: float = 0.0
    # What the policy itself requests (ours: per RSync, in sidecar mode and in cluster mode; the rivals' own
    # components are not counted).
    own_mib_hours: dict[str, float] = field(default_factory=dict)
    trace: list[tuple[float, float, float, float | None]] = field(default_factory=list)

    def add(self, other: Result) -> None:
        self.ooms += other.ooms
        self.restarts += other.restarts
        self.under_seconds += other.under_seconds
        self.over_mib_hours += other.over_mib_hours
        for mode, mib_hours in other.own_mib_hours.items():
            self.own_mib_hours[mode] = self.own_mib_hours.get(mode, 0.0) + mib_hours


def simulate(
    scenario: Scenario, policy: Policy, model: UsageModel, own_mib: dict[str, float] | None = None
) -> Result:
    """`own_mib`: what the policy itself requests for this RSync all along, by mode."""
    hours = scenario.duration / 3600
    own = {mode: mib * hours for mode, mib in (own_mib or {}).items()}
    reconciler, result = Reconciler(), Result(own_mib_hours=own)
    commits = deque(sorted(scenario.commits))
    restarts = deque(sorted(scenario.node_restarts))
    for tick in range(math.ceil(scenario.duration / TICK)):
        now = tick * TICK
        while commits and commits[0][0] <= now:
            reconciler.source = commits.popleft()[1]
        while restarts and restarts[0] <= now:
            restarts.popleft()
            reconciler.restart(now, oom=False)
            reconciler.restarts -= 1  # a node drain is not the policy's restart
        up = reconciler.up(now)
        usage = model.usage(reconciler.working_set(), reconciler.syncing()) if up else 0.0
        request, limit, restart = policy(now, reconciler, usage)
        result.trace.append((now, usage, request, limit))
        if restart:
            reconciler.restart(now, oom=False)
        elif up and limit is not None and usage > limit:
            reconciler.restart(now, oom=True)
        else:
            reconciler.step(now)
        if up and usage > request:
            result.under_seconds += TICK
        result.over_mib_hours += max(0.0, request - usage) * TICK / 3600 if up else 0.0
    result.ooms, result.restarts = reconciler.ooms, reconciler.restarts
    return result


def own_mib(policy: str) -> dict[str, float]:
    """Ours per RSync as `manifests/` ships it, by mode (`profiles.own_cost`): in sidecar mode the sidecar's
    request in each reconciler Pod and the webhook's shared by `RSYNCS` RSyncs, in cluster mode the
    controller's shared by them. The rivals: nothing counted (addon-resizer's own Pods are not)."""
    if not policy.startswith("ours"):
        return {}
    return {mode: cost.per_rsync(RSYNCS) for mode, cost in shipped().items()}


def run_all(model: UsageModel) -> dict[str, dict[str, Result]]:
    table: dict[str, dict[str, Result]] = {}
    for name, make in POLICIES.items():
        own = own_mib(name)
        table[name] = {s.name: simulate(s, make(), model, own) for s in SCENARIOS}
        many = Result()
        for scenario in MANY_RSYNCS:
            many.add(simulate(scenario, make(), model, own))
        table[name]["10 RSyncs"] = many
    return table


def markdown(table: dict[str, dict[str, Result]]) -> str:
    scenarios = [*[s.name for s in SCENARIOS], "10 RSyncs"]
    lines = [
        "| policy | OOM kills | restarts caused | all restarts | time under-provisioned | over-provisioned | "
        "our own, sidecar / cluster mode | over-provisioned + our own, sidecar / cluster mode |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, results in table.items():
        total = Result()
        for scenario in scenarios:
            total.add(results[scenario])
        lines.append(
            f"| {name} | {total.ooms} | {total.restarts} | {total.ooms + total.restarts} | "
            f"{total.under_seconds / 3600:.2f} h | {total.over_mib_hours:,.0f} MiB-h | "
            f"{_own_cells(total, 0.0)} | {_own_cells(total, total.over_mib_hours)} |"
        )
    lines.append("")
    lines.append("| policy | " + " | ".join(f"{s}: OOM / restarts" for s in scenarios) + " |")
    lines.append("|---|" + "---|" * len(scenarios))
    for name, results in table.items():
        cells = " | ".join(f"{results[s].ooms} / {results[s].restarts}" for s in scenarios)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines) + "\n"


def _own_cells(result: Result, plus: float) -> str:
    """`plus` + our own MiB-h in sidecar mode / in cluster mode; one figure where nothing is ours."""
    if not result.own_mib_hours:
        return f"{plus:,.0f} MiB-h"
    sidecar, cluster = (plus + result.own_mib_hours[mode] for mode in ("sidecar", "cluster"))
    return f"{sidecar:,.0f} / {cluster:,.0f} MiB-h"


def plot(table: dict[str, dict[str, Result]], path: Path, scenario: str = "big prune") -> None:
    import matplotlib  # noqa: PLC0415 - only the plot needs it, and it is slow to import

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    names = list(table)
    figure, axes = plt.subplots(len(names), 1, figsize=(9, 2.1 * len(names)), sharex=True)
    for axis, name in zip(axes, names, strict=True):
        trace = table[name][scenario].trace
        hours = [t / 3600 for t, *_ in trace]
        axis.plot(hours, [u for _, u, _, _ in trace], label="usage", color="tab:blue")
        axis.plot(hours, [r for _, _, r, _ in trace], label="request", color="tab:green")
        axis.plot(
            hours,
            [lim if lim is not None else float("nan") for *_, lim in trace],
            label="limit",
            color="tab:red",
            linestyle="--",
        )
        result = table[name][scenario]
        axis.set_title(f"{name}: {result.ooms} OOM kills, {result.restarts} restarts", fontsize=9)
        axis.set_ylabel("MiB")
    axes[0].legend(loc="upper right", fontsize=8)
    axes[-1].set_xlabel(f"hours ({scenario}: 5,000 objects, pruned to 500 at 1 h)")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("profiles/out"))
    args = parser.parse_args()
    model = UsageModel.fitted()
    table = run_all(model)
    args.out.mkdir(parents=True, exist_ok=True)
    text = markdown(table)
    (args.out / "simulation.md").write_text(text)
    plot(table, args.out / "simulation.png")
    print(f"usage model: {model.base_mib:.1f} MiB + {model.mib_per_object:.4f} MiB/object, +10 % syncing")
    print(text)
    print(f"plot: {args.out / 'simulation.png'}")


if __name__ == "__main__":
    main()
