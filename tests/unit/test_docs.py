"""The documentation cannot drift from the code: the settings and metrics tables (docs/), and a README a
newcomer finishes in five minutes that links every page of docs/."""

from __future__ import annotations

import re

from prometheus_client import REGISTRY

import autoscaler.metrics
import autoscaler.service
import autoscaler.webhook
import inventory.metrics
from autoscaler.settings import markdown_table
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
    assert _between("settings-table") == markdown_table(), "run: python -m autoscaler.settings"


def test_every_metric_is_in_the_readme_table() -> None:
    _registered_on_import = (autoscaler.metrics, autoscaler.service, autoscaler.webhook, inventory.metrics)
    documented = set(re.findall(r"^\| `(objcount_\w+)`", _between("metrics-table"), re.M))
    served = {m.name for m in REGISTRY.collect() if m.name.startswith("objcount_")}
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
