"""How often our service wrote an RSync's reconciler the size it had just written (issue 63, item 3): read
from the JSON log lines of a run's saved logs (`logs/*.log` of `profiles.policies_real` and
`profiles.many_rsyncs`), one line per size written ("<rsync>: <outcome> via <target>...: ... requests X,
limits Y"). A write is a repeat when the same RSync's last write, less than `--within` seconds before, was
the same size.

    python -m profiles.repeated_writes profiles/data/many-rsyncs-*/*/logs/*.log
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import orjson

# The log line of a size written (autoscaler.core.said.of_write): the outcome, the target, then the reason
# ending with the size.
WRITTEN = re.compile(r"^(\S+): (scaled_up|scaled_down) via [^:]+: .*(requests \S+, limits \S+)$")


@dataclass(frozen=True)
class Repeats:
    writes: int
    repeats: int
    first_repeats: tuple[str, ...]  # up to three, as "time rsync size"


def entries(lines: Iterable[str]) -> Iterable[dict[str, object]]:
    """The JSON log entries of a saved log (each line may carry a `[pod/...]` prefix)."""
    for line in lines:
        start = line.find("{")
        if start < 0:
            continue
        try:
            entry = orjson.loads(line[start:])
        except orjson.JSONDecodeError:
            continue
        if isinstance(entry, dict):
            yield entry


def tally(lines: Iterable[str], within_s: float) -> Repeats:
    last: dict[str, tuple[float, str]] = {}
    writes, repeats = 0, 0
    examples: list[str] = []
    for entry in entries(lines):
        written = WRITTEN.match(str(entry.get("message", "")))
        if written is None:
            continue
        rsync, size = written.group(1), written.group(3)
        at = datetime.fromisoformat(str(entry["time"])).timestamp()
        writes += 1
        before = last.get(rsync)
        if before is not None and before[1] == size and at - before[0] < within_s:
            repeats += 1
            if len(examples) < 3:
                examples.append(f"{entry['time']} {rsync} {size}")
        last[rsync] = (at, size)
    return Repeats(writes, repeats, tuple(examples))


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m profiles.repeated_writes", description=__doc__)
    parser.add_argument("logs", nargs="+", type=Path)
    parser.add_argument("--within", type=float, default=5.0, help="seconds (default 5)")
    args = parser.parse_args()
    print(f"| log | sizes written | the same size again within {args.within:g} s | first repeats |")
    print("|---|---|---|---|")
    for path in args.logs:
        counted = tally(path.read_text(errors="replace").splitlines(), args.within)
        if counted.writes == 0:  # a log of another component (the webhook, the app): nothing sized
            continue
        print(f"| {path} | {counted.writes} | {counted.repeats} | {'; '.join(counted.first_repeats)} |")


if __name__ == "__main__":
    main()
