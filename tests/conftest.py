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
