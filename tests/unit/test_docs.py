"""The documentation cannot drift from the code: the settings and metrics tables (docs/), and a README a
newcomer finishes in five minutes that links every page of docs/."""

from __future__ import annotations

import ast
import importlib.util
import os
import re

import pytest
import yaml
from prometheus_client import REGISTRY

import autoscaler.service.main
import autoscaler.service.metrics
import autoscaler.service.webhook
from autoscaler.cli import COMMANDS
from autoscaler.core.outcome import Outcome
from autoscaler.core.reasons import Reason
from autoscaler.kube.report import COLUMNS
from autoscaler.service.settings import Settings, SettingsError, load_settings, markdown_table
from controlplane.seed import REPO_ROOT

README = (REPO_ROOT / "README.md").read_text()
DOCS = REPO_ROOT / "docs"
PAGES = {"settings-table": DOCS / "settings.md", "metrics-table": DOCS / "metrics.md"}


def _between(marker: str) -> str:
    text = PAGES[marker].read_text()
    match = re.search(rf"<!-- {marker}:.*?-->\n(.*?)<!-- /{marker} -->", text, re.S)
    assert match, f"{PAGES[marker].name} has no {marker} section"
    return match.group(1)


def test_settings_table_is_generated_from_the_settings_object() -> None:
    assert _between("settings-table") == markdown_table(), "run: python -m autoscaler.service.settings"


def test_the_sample_of_invalid_settings_is_what_the_service_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/settings.md shows `objcount run` refusing invalid settings: its variables give that message."""
    sample = re.search(
        r"```\n\$ ((?:OBJCOUNT_\w+=\S+ )+)objcount run\n(.*?)```", PAGES["settings-table"].read_text(), re.S
    )
    assert sample, "docs/settings.md has no sample of invalid settings"
    for name in [name for name in os.environ if name.startswith("OBJCOUNT_")]:
        monkeypatch.delenv(name)
    for assignment in sample.group(1).split():
        monkeypatch.setenv(*assignment.split("=", 1))
    with pytest.raises(SettingsError) as refused:
        load_settings()
    assert f"objcount run: {refused.value}\n" == sample.group(2)


def test_the_status_columns_the_docs_list_are_the_ones_it_prints() -> None:
    for page in [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for listed in re.findall(r"objcount status -A +# (.*)", page.read_text()):
            assert tuple(listed.split(", ")) == COLUMNS, page.name


# The webhook's metrics, registered by its process alone (autoscaler.service.main).
WEBHOOKS = {m.name for counter in autoscaler.service.metrics.WEBHOOK_ONLY for m in counter.collect()}


def test_every_metric_is_in_the_readme_table() -> None:
    _registered_on_import = autoscaler.service.metrics  # the one module declaring them
    documented = set(re.findall(r"^\| `(objcount_\w+)`", _between("metrics-table"), re.M))
    served = {m.name for m in REGISTRY.collect() if m.name.startswith("objcount_")} | WEBHOOKS
    # prometheus_client strips `_total` from counter family names.
    served = {name if name in documented else f"{name}_total" for name in served}
    assert served == documented


def test_the_readme_is_under_200_lines() -> None:
    assert len(README.splitlines()) < 200


def test_every_page_of_docs_is_linked_from_the_readme_and_every_link_resolves() -> None:
    linked = set(re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README))
    pages = {f"docs/{p.name}" for p in DOCS.glob("*.md")}
    assert pages <= linked, sorted(pages - linked)
    for target in linked:
        if not target.startswith("http"):
            assert (REPO_ROOT / target).exists(), target


def test_every_reason_is_raised_somewhere_and_documented_and_nothing_else_is() -> None:
    """One list of reasons: the enum, what the code raises or counts, and the metrics table agree."""
    row = re.search(
        r"^\| `objcount_apply_errors_total` \|[^|]*\| `target`, `reason` \(([^)]*)\)",
        _between("metrics-table"),
        re.M,
    )
    assert row, "the apply errors row names its reasons"
    documented = {name.strip() for name in row.group(1).split(",")}
    used: set[str] = set()
    for path in (REPO_ROOT / "autoscaler").rglob("*.py"):
        if path.name == "reasons.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "Reason"
            ):
                used.add(Reason[node.attr].value)
    assert documented == {reason.value for reason in Reason}, "documented as the enum says"
    assert used == {reason.value for reason in Reason}, (
        "every reason is raised or counted somewhere, and only those"
    )


def test_every_outcome_is_documented_and_nothing_else_is() -> None:
    row = re.search(
        r"^\| `objcount_decisions_total` \|[^|]*\| `outcome` \(([^)]*)\)", _between("metrics-table"), re.M
    )
    assert row, "the decisions row names its outcomes"
    assert {name.strip() for name in row.group(1).split(",")} == {outcome.value for outcome in Outcome}


def _events_said() -> set[str]:
    """Every Event reason said.py can give: the constants of its `event=` arguments and of `_HOLDS`."""
    said: set[str] = set()
    for node in ast.walk(ast.parse((REPO_ROOT / "autoscaler/core/said.py").read_text())):
        if isinstance(node, ast.keyword) and node.arg == "event":
            said |= _strings(node.value)
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_HOLDS" for t in node.targets):
            said |= {value for value in _strings(node.value) if value[:1].isupper()}
    return said


def _strings(node: ast.AST) -> set[str]:
    return {c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)}


def test_every_event_is_documented_and_nothing_else_is() -> None:
    text = (DOCS / "metrics.md").read_text()
    section = text[text.index("## Events") : text.index("## Metrics")]
    documented = set(re.findall(r"`([A-Z][A-Za-z]+)`", section))
    assert documented == _events_said()


def _code_spans() -> list[str]:
    """What README and docs/ quote as code: inline spans and fenced blocks."""
    spans: list[str] = []
    for page in [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        text = page.read_text()
        spans += re.findall(r"```[^\n]*\n(.*?)```", text, re.S)
        spans += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return spans


def _named(pattern: str) -> set[str]:
    return {name for span in _code_spans() for name in re.findall(pattern, span)}


def test_every_command_make_target_variable_metric_and_test_the_docs_name_exists() -> None:
    """What README and docs/ tell a reader to run or look for is there: `make` targets, `python -m`
    modules, `objcount` commands, `OBJCOUNT_*` variables, metrics, and the tests they cite."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    assert _named(r"\bmake ([a-z][\w-]*)") <= targets
    modules = _named(r"python -m ([\w.]+)")
    assert modules
    assert [module for module in modules if importlib.util.find_spec(module) is None] == []
    assert _named(r"\bobjcount ([a-z][\w-]*)") <= set(COMMANDS)
    code = "\n".join(
        path.read_text()
        for folder in ("autoscaler", "inventory", "controlplane", "profiles", "manifests", ".ci")
        for path in (REPO_ROOT / folder).rglob("*")
        if path.is_file() and path.suffix in {"", ".py", ".yaml", ".sh"}
    )
    variables = set(re.findall(r"OBJCOUNT_[A-Z_]+", code + makefile)) | {
        f"OBJCOUNT_{name.upper()}" for name in Settings.model_fields
    }
    unknown = {v for v in _named(r"\b(OBJCOUNT_[A-Z_]+)") if not any(k.startswith(v) for k in variables)}
    assert not unknown, unknown
    served = {m.name for m in REGISTRY.collect() if m.name.startswith("objcount_")} | WEBHOOKS
    served |= {f"{name}_total" for name in served}
    assert _named(r"\b(objcount_[a-z_]+)") <= served
    tests = {path.stem for path in (REPO_ROOT / "tests").rglob("test_*.py")}
    tests |= {
        m
        for path in (REPO_ROOT / "tests").rglob("*.py")
        for m in re.findall(r"def (test_\w+)", path.read_text())
    }
    cited = _named(r"\b(test_\w+)")
    assert {name for name in cited if not any(t.startswith(name) for t in tests)} == set()


def test_benchmarks_opens_with_todays_figures_each_with_its_command_and_date() -> None:
    text = (REPO_ROOT / "BENCHMARKS.md").read_text()
    assert re.findall(r"^## .*", text, re.M)[0] == "## Today's figures"
    today = text[text.index("## Today's figures") : text.index("\n# History")]
    areas = re.split(r"^### ", today, flags=re.M)[1:]
    assert len(areas) >= 8
    for area in areas:
        title = area.splitlines()[0]
        assert re.search(r"`(python -m |make |\.venv/bin/pytest|git clone)", area), f"{title}: no command"
        assert re.search(r"20\d\d-\d\d-\d\d", area), f"{title}: no date"


def test_every_measured_figure_in_the_readme_and_docs_is_in_benchmarks() -> None:
    """A decimal figure in README or docs/ (a MiB-h, a ratio, a time) quotes BENCHMARKS.md, so the pages
    cannot tell another story than the measurements. Worked arithmetic and constants are quoted as code;
    the settings table is generated."""
    benchmarks = (REPO_ROOT / "BENCHMARKS.md").read_text()
    unknown = {}
    for page in [REPO_ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        prose = re.sub(
            r"```.*?```|<!-- settings-table.*?<!-- /settings-table -->", "", page.read_text(), flags=re.S
        )
        prose = re.sub(r"`[^`\n]*`", "", prose)
        figures = set(re.findall(r"(?<![\w.])(\d+\.\d+)(?![\w.])", prose))
        missing = sorted(figure for figure in figures if figure not in benchmarks)
        if missing:
            unknown[page.name] = missing
    assert unknown == {}


def test_the_readmes_set_up_names_exactly_two_commands() -> None:
    """One runs the main job, one runs the whole test suite (DEVELOPERS' "two commands")."""
    section = README.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    block = section.split("```sh", 1)[1].split("```", 1)[0]
    commands = [
        line.split("#", 1)[0].strip() for line in block.splitlines() if not line.lstrip().startswith("#")
    ]
    assert [c for c in commands if c] == ["make run", "make test"]


def _shipped_roles() -> set[tuple[str, str]]:
    """Every ClusterRole and Role the manifests define, as (kind, name)."""
    shipped = set()
    for path in (REPO_ROOT / "manifests").rglob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if isinstance(document, dict) and document.get("kind") in ("ClusterRole", "Role"):
                shipped.add((document["kind"], document["metadata"]["name"]))
    return shipped


@pytest.mark.parametrize("page", ["docs/security.md", "SECURITY.md", "docs/install.md", "README.md"])
def test_every_clusterrole_and_role_the_docs_name_is_one_the_manifests_ship(page: str) -> None:
    text = (REPO_ROOT / page).read_text()
    shipped = _shipped_roles()
    named = {("ClusterRole", n) for n in re.findall(r"\bClusterRoles? `(objcount-[a-z0-9-]+)`", text)}
    named |= {("Role", n) for n in re.findall(r"(?<![A-Za-z])Roles? `(objcount-[a-z0-9-]+)`", text)}
    assert named <= shipped, sorted(named - shipped)


def test_security_names_every_clusterrole_and_role_the_manifests_ship() -> None:
    text = (DOCS / "security.md").read_text()
    assert {name for _, name in _shipped_roles()} <= set(re.findall(r"`(objcount-[a-z0-9-]+)`", text))
