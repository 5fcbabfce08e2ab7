"""The README's settings and metrics tables cannot drift from the code."""

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


def _between(marker: str) -> str:
    match = re.search(rf"<!-- {marker}:.*?-->\n(.*?)<!-- /{marker} -->", README, re.S)
    assert match, f"README has no {marker} section"
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
