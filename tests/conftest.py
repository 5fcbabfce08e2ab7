"""Shared pytest configuration: markers by folder and a polling helper (tests never sleep a fixed time)."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(TESTS).parts[0]
        if folder in ("integration", "e2e"):
            item.add_marker(getattr(pytest.mark, folder))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.helpers import FIGURES, RECOVERIES  # noqa: PLC0415 - the lists filled by this run's tests

    for what, seconds, bound in RECOVERIES:
        terminalreporter.write_line(f"{what}: {seconds:.1f} s (bound {bound:.0f} s)")
    for what, seconds in FIGURES:
        terminalreporter.write_line(f"{what}: {seconds:.2f} s")
