"""The shipped alert rules against the real `promtool` (Debian 12's, from its pinned `prometheus` package,
fetched and cached by controlplane/build_promtool.sh: a build, so not among the unit tests): they pass
`promtool check rules` and their tests (tests/monitoring/rules-test.yaml), and a test that does not hold
fails."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from controlplane.builds import run_build_script
from controlplane.seed import REPO_ROOT
from tests.unit.test_monitoring import RULES, RULES_TEST


@pytest.fixture(scope="module")
def promtool() -> Path:
    """promtool from Debian's pinned package, fetched once and cached (controlplane/build_promtool.sh)."""
    return run_build_script(REPO_ROOT / "controlplane" / "build_promtool.sh", "promtool") / "promtool"


def run(promtool: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(promtool), *args], capture_output=True, text=True, check=False, timeout=120)


def test_the_rules_pass_promtool_check_and_their_tests(promtool: Path) -> None:
    checked = run(promtool, "check", "rules", str(RULES))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 9 rules found" in checked.stdout
    tested = run(promtool, "test", "rules", str(RULES_TEST))
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_fails_a_rule_test_that_does_not_hold(promtool: Path, tmp_path: Path) -> None:
    """The check above can fail: a test expecting the OOM alert where nothing was killed is refused."""
    wrong = yaml.safe_load(RULES_TEST.read_text())
    wrong["rule_files"] = [str(RULES)]
    wrong["tests"][0]["input_series"][0]["values"] = "0x30"
    path = tmp_path / "wrong.yaml"
    path.write_text(yaml.safe_dump(wrong))
    assert run(promtool, "test", "rules", str(path)).returncode != 0
