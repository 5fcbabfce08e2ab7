"""The resources of one container (or a pod total), and the rounding every size goes through."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from autoscaler.core.quantity import format_cpu, format_memory


def ceil_to(value: Fraction | int, step: int) -> int:
    return math.ceil(Fraction(value) / step) * step


@dataclass(frozen=True, order=True)
class Resources:
    """Requests and limits of one container (or a pod total): CPU in millicores, memory in MiB."""

    cpu_request_m: int
    memory_request_mib: int
    cpu_limit_m: int | None = None
    memory_limit_mib: int | None = None

    def covers(self, other: Resources) -> bool:
        """Every request and limit here is at least the other's (a missing limit is unbounded)."""
        return (
            self.cpu_request_m >= other.cpu_request_m
            and self.memory_request_mib >= other.memory_request_mib
            and _limit_at_least(self.cpu_limit_m, other.cpu_limit_m)
            and _limit_at_least(self.memory_limit_mib, other.memory_limit_mib)
        )

    def at_least(self, other: Resources) -> Resources:
        """The component-wise maximum of the two; a limit set on either side stays set, and is never
        below its request (the API server refuses that)."""
        cpu = max(self.cpu_request_m, other.cpu_request_m)
        memory = max(self.memory_request_mib, other.memory_request_mib)
        cpu_limit = _max_limit(self.cpu_limit_m, other.cpu_limit_m)
        memory_limit = _max_limit(self.memory_limit_mib, other.memory_limit_mib)
        return Resources(
            cpu,
            memory,
            None if cpu_limit is None else max(cpu_limit, cpu),
            None if memory_limit is None else max(memory_limit, memory),
        )

    def keeping_limits_of(self, current: Resources | None, memory_step: int) -> Resources:
        """These resources, with a limit wherever `current` has one and these set none: that limit rises
        with its request (its ratio to the request kept) and is never lowered. A resize in place that
        leaves a limit out keeps it (a strategic merge), so it must stay above the request; and a limit
        found on the reconciler (set by hand, or by an older install of ours) is not ours to take away."""
        if current is None:
            return self
        return Resources(
            self.cpu_request_m,
            self.memory_request_mib,
            _kept(self.cpu_limit_m, current.cpu_limit_m, self.cpu_request_m, current.cpu_request_m, 1),
            _kept(
                self.memory_limit_mib,
                current.memory_limit_mib,
                self.memory_request_mib,
                current.memory_request_mib,
                memory_step,
            ),
        )

    def __str__(self) -> str:
        cpu_limit = "none" if self.cpu_limit_m is None else format_cpu(self.cpu_limit_m)
        memory_limit = "none" if self.memory_limit_mib is None else format_memory(self.memory_limit_mib)
        return f"requests {self.requests_text}, limits {cpu_limit}/{memory_limit}"

    @property
    def requests_text(self) -> str:
        """`<cpu>m/<memory>Mi`: the requests, as `objcount status` shows them."""
        return f"{format_cpu(self.cpu_request_m)}/{format_memory(self.memory_request_mib)}"


def _limit_at_least(mine: int | None, theirs: int | None) -> bool:
    return mine is None or (theirs is not None and mine >= theirs)


def _max_limit(a: int | None, b: int | None) -> int | None:
    values = [v for v in (a, b) if v is not None]
    return max(values) if values else None


def _kept(wanted: int | None, found: int | None, request: int, found_request: int, step: int) -> int | None:
    if wanted is not None or found is None:
        return wanted
    scaled = ceil_to(Fraction(request * found, found_request), step) if found_request > 0 else request
    return max(found, scaled, request)
