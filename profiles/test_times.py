"""Where the test suite's time goes: the per-module and per-test tables of a run, from pytest's
`--durations=0` lines in its log (BENCHMARKS.md, "CI time").

    CI=true PYTEST_ADDOPTS=--durations=0 bash .ci/run >ci.log 2>&1
    python -m profiles.test_times ci.log

Each line pytest prints there is one phase of one test: `setup` holds the fixtures that test was the
first to need (a module's stack, a session's Config Sync stack), `call` the test itself, `teardown`
what stopped after it. With the suite spread over workers the phases overlap in time: their sum is the
work, not the wall clock (the log's last line gives that).
"""

from __future__ import annotations

import argparse
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

# A parametrized id may hold spaces ("test_x[504 Timeout]"): the id runs to the end of the line.
_DURATION = re.compile(r"^(\d+\.\d+)s (setup|call|teardown) +(.+?)(?:@\S+)?$")


@dataclass
class Phases:
    """Seconds by phase of one test or one module."""

    seconds: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    tests: set[str] = field(default_factory=set)

    @property
    def total(self) -> float:
        return sum(self.seconds.values())


def durations(log: str) -> list[tuple[float, str, str]]:
    """(seconds, phase, test id) of every `--durations` line in the log."""
    found = []
    for line in log.splitlines():
        match = _DURATION.match(line.strip())
        if match:
            found.append((float(match.group(1)), match.group(2), match.group(3)))
    return found


def by_module(rows: list[tuple[float, str, str]]) -> dict[str, Phases]:
    modules: dict[str, Phases] = defaultdict(Phases)
    for seconds, phase, test in rows:
        module = modules[test.split("::", 1)[0]]
        module.seconds[phase] += seconds
        module.tests.add(test)
    return modules


def tables(rows: list[tuple[float, str, str]], top: int) -> str:
    modules = sorted(by_module(rows).items(), key=lambda item: -item[1].total)
    work = sum(seconds for seconds, _, _ in rows)
    lines = [
        f"Work in all: {work:.0f} s over {len({t for _, _, t in rows})} tests.",
        "",
        "| module | tests | setup s | call s | teardown s | total s | share |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, phases in modules:
        s = phases.seconds
        lines.append(
            f"| `{name}` | {len(phases.tests)} | {s['setup']:.0f} | {s['call']:.0f} | {s['teardown']:.0f}"
            f" | {phases.total:.0f} | {100 * phases.total / work:.1f} % |"
        )
    lines += ["", f"The {top} longest phases:", "", "| s | phase | test |", "|---:|---|---|"]
    for seconds, phase, test in sorted(rows, reverse=True)[:top]:
        lines.append(f"| {seconds:.1f} | {phase} | `{test}` |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("log", type=Path, help="a test run's output, with pytest's --durations=0")
    parser.add_argument("--top", type=int, default=25, help="how many of the longest phases to list")
    args = parser.parse_args()
    rows = durations(args.log.read_text(errors="replace"))
    if not rows:
        parser.error(f"{args.log} has no --durations lines (run pytest with --durations=0)")
    print(tables(rows, args.top))


if __name__ == "__main__":
    main()
