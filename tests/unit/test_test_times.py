"""The table of where the suite's time goes, from pytest's --durations lines (profiles/test_times.py)."""

from __future__ import annotations

from profiles.test_times import by_module, durations, tables

LOG = """\
tests/unit/test_a.py ....
============================= slowest durations ==============================
120.50s setup    tests/integration/test_node.py::test_first[v1.24.3]
30.30s call     tests/integration/test_node.py::test_first[v1.24.3]
9.00s call     tests/integration/test_node.py::test_second
2.00s teardown tests/integration/test_node.py::test_second
1.25s call     tests/unit/test_a.py::test_one@unit/test_a.py
(12 durations < 0.005s hidden.  Use -vv to show these durations.)
1 passed, 1 failed in 3.00s
"""


def test_every_durations_line_is_read_and_nothing_else() -> None:
    rows = durations(LOG)
    assert len(rows) == 5
    assert rows[0] == (120.5, "setup", "tests/integration/test_node.py::test_first[v1.24.3]")
    # A group suffix of pytest-xdist's is not part of the test's id.
    assert rows[-1] == (1.25, "call", "tests/unit/test_a.py::test_one")


def test_modules_add_up_their_phases() -> None:
    node = by_module(durations(LOG))["tests/integration/test_node.py"]
    assert {k: round(v, 2) for k, v in node.seconds.items()} == {
        "setup": 120.5,
        "call": 39.3,
        "teardown": 2.0,
    }
    assert round(node.total, 2) == 161.8
    assert len(node.tests) == 2


def test_the_table_lists_modules_longest_first_and_the_longest_phases() -> None:
    text = tables(durations(LOG), top=2)
    assert text.splitlines()[0] == "Work in all: 163 s over 3 tests."
    module_rows = [line for line in text.splitlines() if line.startswith("| `")]
    assert module_rows[0].startswith("| `tests/integration/test_node.py` | 2 | 120 | 39 | 2 | 162 | 99.2 % |")
    assert "| 120.5 | setup | `tests/integration/test_node.py::test_first[v1.24.3]` |" in text
    assert "| 30.3 | call |" in text
    assert "test_second" not in text.split("longest phases")[1]


def test_a_parametrized_id_with_spaces_is_read_whole() -> None:
    log = "79.23s call     tests/integration/test_api_faults.py::test_fault[504 Timeout]\n"
    assert durations(log) == [
        (79.23, "call", "tests/integration/test_api_faults.py::test_fault[504 Timeout]")
    ]
