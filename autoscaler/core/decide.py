"""One reconcile of one RSync, decided by one pure function. No I/O, no clock.

    needs(view, state, config)                  # what the loop must read (autoscaler.core.step)
    decision = decide(observation, state, config, target)
    # the loop writes decision.plan.apply and decision.plan.publish, once
    result = decision.after(written, now)       # the state to keep after that write, and what to say

A `Decision` holds what to write (its `plan`), what to say before the write (`said`, `shown`), and, for
each result the write can have (written, with or without a restart; failed, for a reason), the state to
keep and what to say then (`after`). The sizing itself is in functions `decide` reaches by name: the
model (`autoscaler.core.sizing`), the hysteresis (`autoscaler.core.size_decision`), the OOM floor
(`autoscaler.core.oom`) and calibration (`autoscaler.core.calibration`), all called from
`autoscaler.core.step`; `autoscaler.core.said` only renders a plan and a result into log lines, Events and
metrics. The loop that carries a Decision out is `autoscaler.service.executor`.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.observation import Observation
from autoscaler.core.outcome import Outcome
from autoscaler.core.reasons import WriteError
from autoscaler.core.said import Gauged, Said, of_plan, of_written, shown_of_plan, shown_of_sizes
from autoscaler.core.step import Plan, RSyncState, StepConfig, after_write, step
from autoscaler.core.written import Written


@dataclass(frozen=True)
class Result:
    """What became of a Decision once its write was tried: how the reconcile ends, the state to keep,
    what to say and show, and when to look again (None: on the next event)."""

    outcome: Outcome
    state: RSyncState
    said: tuple[Said, ...]
    shown: tuple[Gauged, ...]
    recheck_after: float | None


@dataclass(frozen=True)
class Decision:
    """One reconcile decided: what to write, what to say before the write, and the state to keep and what
    to say after each result of that write."""

    plan: Plan
    before: RSyncState  # the state the decision was made from (kept in part when its write fails)
    target: str  # the target's name, said with every write
    said: tuple[Said, ...]  # before the write: what holds a size, a new OOM floor, a calibration
    shown: tuple[Gauged, ...]  # before the write: the counts used, a wait for room, the calibration

    def after(self, written: Written | WriteError, now: float) -> Result:
        """The result of the write: its state settled (a restart it caused counted, an RSync generation it
        wrote remembered) or failed (the decision made again next time, the failure said once)."""
        state = after_write(self.before, self.plan, written, now)
        said = tuple(of_written(self.before, self.plan, written, self.target))
        if isinstance(written, WriteError):
            return Result(Outcome.FAILED, state, said, (), None)
        return Result(
            self.plan.outcome, state, said, tuple(shown_of_sizes(self.plan)), self.plan.recheck_after
        )


def decide(seen: Observation, state: RSyncState, config: StepConfig, target: str) -> Decision:
    """The decision of one reconcile, from one observation and what is remembered of the RSync; `target`
    names the target in what is said (the `target` label of the counters)."""
    plan = step(seen, state, config)
    said = of_plan(plan, target, config.hysteresis, seen.reading.unread)
    shown = shown_of_plan(plan, reads_source=config.reads_source)
    return Decision(plan, state, target, tuple(said), tuple(shown))
