"""The shipped alert rules and dashboard, without a build: the PrometheusRule holds the same rules as the
rules file, every metric of ours the rules, their tests and the dashboard name is one the service exports,
and the Pod monitors scrape our Pods. The rules against the real promtool: tests/integration/test_alert_rules.py."""

from __future__ import annotations

import json
import re
from typing import cast

import pytest
import yaml
from prometheus_client import REGISTRY

import autoscaler.service.metrics
from controlplane.seed import REPO_ROOT

MONITORING = REPO_ROOT / "manifests" / "monitoring"
RULES = MONITORING / "rules.yaml"
RULES_TEST = REPO_ROOT / "tests" / "monitoring" / "rules-test.yaml"
DASHBOARD = MONITORING / "dashboard.json"
_REGISTERED_ON_IMPORT = autoscaler.service.metrics  # the one module declaring them


def test_the_prometheus_rule_holds_the_rules_file() -> None:
    (rule,) = list(yaml.safe_load_all((MONITORING / "prometheus-rule.yaml").read_text()))
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["spec"] == yaml.safe_load(RULES.read_text())


SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}


def exported() -> set[str]:
    """Every series name the service's registry exports, labelled or not yet (prometheus_client names a
    counter's family without its `_total`), the webhook's process's own among them."""
    webhook = [family for counter in autoscaler.service.metrics.WEBHOOK_ONLY for family in counter.collect()]
    return {
        family.name + suffix
        for family in [*REGISTRY.collect(), *webhook]
        if family.name.startswith("objcount_")
        for suffix in SUFFIXES.get(family.type, ("",))
    }


def names_in(text: str) -> set[str]:
    return set(re.findall(r"\bobjcount_[a-z_]+\b", text))


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    queries += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return queries


@pytest.mark.parametrize("source", ["rules", "rule tests", "dashboard"])
def test_every_metric_named_is_one_the_service_exports(source: str) -> None:
    text = {
        "rules": RULES.read_text(),
        "rule tests": "\n".join(
            s["series"] for t in yaml.safe_load(RULES_TEST.read_text())["tests"] for s in t["input_series"]
        ),
        "dashboard": "\n".join(dashboard_queries()),
    }[source]
    named = names_in(text)
    assert named, source
    assert named <= exported(), sorted(named - exported())


def test_the_dashboard_shows_counts_sizes_usage_decisions_and_errors() -> None:
    named = names_in("\n".join(dashboard_queries()))
    for wanted in (
        "objcount_objects",
        "objcount_recommended",
        "objcount_applied",
        "objcount_reconciler_working_set_mib",
        "objcount_decisions_total",
        "objcount_reconcile_errors_total",
        "objcount_apply_errors_total",
    ):
        assert wanted in named, wanted


def _pods_serving_metrics() -> list[tuple[dict[str, str], set[str]]]:
    """Each Pod of ours that serves /metrics: its labels and the names of its containers' ports (the
    sidecar as admitted into a reconciler Pod: Config Sync's labels, which the webhook selects on)."""
    manifests = REPO_ROOT / "manifests"
    pods = []
    for path in (manifests / "cluster/base/deployment.yaml", manifests / "webhook/webhook.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc["kind"] == "Deployment":
                template = doc["spec"]["template"]
                ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
                pods.append((template["metadata"]["labels"], ports))
    (template,) = yaml.safe_load_all((manifests / "sidecar/base/sidecar-template.yaml").read_text())
    sidecar = yaml.safe_load(template["data"]["sidecar.yaml"])["container"]
    reconciler = {"app": "reconciler", "configsync.gke.io/sync-kind": "RootSync"}
    pods.append((reconciler, {p["name"] for p in sidecar["ports"]}))
    return pods


def _selects(selector: dict[str, object], labels: dict[str, str]) -> bool:
    wanted = cast(dict[str, str], selector.get("matchLabels") or {})
    expressions = cast(list[dict[str, object]], selector.get("matchExpressions") or [])
    return all(labels.get(k) == v for k, v in wanted.items()) and all(
        e["operator"] == "In" and labels.get(cast(str, e["key"])) in cast(list[str], e["values"])
        for e in expressions
    )


@pytest.mark.parametrize("name", ["podmonitor.yaml", "podmonitoring.yaml"])
def test_the_pod_monitors_scrape_every_pod_of_ours_on_its_metrics_port(name: str) -> None:
    monitors = list(yaml.safe_load_all((MONITORING / name).read_text()))
    scraped = set()
    for labels, ports in _pods_serving_metrics():
        for monitor in monitors:
            spec = monitor["spec"]
            endpoints = spec.get("podMetricsEndpoints") or spec.get("endpoints")
            if _selects(spec["selector"], labels):
                assert {e["port"] for e in endpoints} <= ports, (monitor["metadata"]["name"], ports)
                assert all(e["path"] == "/metrics" for e in endpoints)
                scraped.add(labels.get("app.kubernetes.io/name", labels.get("app")))
    assert scraped == {"objcount-autoscaler", "objcount-webhook", "reconciler"}
