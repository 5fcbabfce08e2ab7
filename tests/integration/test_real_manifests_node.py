"""Real manifests on the real node, our sidecar installed as the README says (in place), Config Sync: a commit
Config Sync rejects changes no size and says why; a commit holding a public CRD whose schema has a bare
`=` (the monitoring operator's AlertmanagerConfig, from the manifest corpus) is counted and sized before
the reconciler has synced it. Every container of Config Sync's Pods is the real component (see controlplane.images)."""

from __future__ import annotations

from typing import cast

import orjson

from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.seed import configmaps_yaml
from controlplane.sources import corpus_directory
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import Sampler, wait_for
from tests.integration.on_node import (
    JSON,
    applied,
    counts,
    finished,
    generation,
    numbers,
    quantity_bytes,
    reconciler_resources,
    rsync_of,
    running_size,
)
from tests.integration.test_node_faults import containers_of, live, sized_rootsync

SYNC_TIMEOUT = 300.0
EQUALS_CRD = (
    "prometheus-operator-example/prometheus-operator-crd/monitoring.coreos.com_alertmanagerconfigs.yaml"
)
NAMELESS = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  namespace: {ns}\ndata: {{key: value}}\n"


def source_errors(rsync: JSON) -> list[str]:
    """The error codes Config Sync itself reports for the RSync's source (its status, not our code)."""
    errors = ((rsync.get("status") or {}).get("source") or {}).get("errors") or []
    return [str(e.get("code")) for e in errors]


def memory_mib(size: JSON | None) -> int:
    """The memory request of a size recorded as applied (`objcount.dev/applied-resources`), MiB."""
    return quantity_bytes(str(((size or {}).get("requests") or {}).get("memory", "0Mi"))) >> 20


def applied_of(rsync: JSON) -> JSON | None:
    text = (rsync["metadata"].get("annotations") or {}).get("objcount.dev/applied-resources")
    return None if text is None else cast(JSON, orjson.loads(text))


def test_a_commit_with_a_file_only_config_sync_rejects_leaves_the_size_and_says_why(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    cs = config_sync_on_node
    api = cs.api
    key, apps, _ = sized_rootsync(cs, rsyncs, 30)
    sized, rolled = applied(api, key), generation(api, key)
    # 1,500 ConfigMaps would need a larger reconciler, but one file holds a ConfigMap without a name:
    # Config Sync rejects the commit (KNV2010) and syncs none of it.
    rejected = cs.commit(
        key,
        {"configmaps.yaml": configmaps_yaml(1500, namespace=apps), "nameless.yaml": NAMELESS.format(ns=apps)},
    )
    sampler = Sampler(lambda: applied(api, key), interval=0.5, tolerate=(kubeapi.ApiError,))
    try:
        wait_for(
            lambda: "2010" in source_errors(rsync_of(api, key)),
            timeout=SYNC_TIMEOUT,
            what="Config Sync's own KNV2010 for the commit",
        )
        why = wait_for(
            lambda: (rsync_of(api, key)["metadata"].get("annotations") or {}).get(
                "objcount.dev/source-rejected"
            ),
            timeout=120,
            what="our reason on the RSync",
        )
    finally:
        seen = sampler.stop()
    assert why == (
        f'Config Sync rejects commit {rejected[:12]}: KNV2010 config/nameless.yaml: missing field "metadata.name"'
    )
    assert seen
    assert all(entry == sized for entry in seen), "the size changed for a commit Config Sync rejects"
    assert (applied(api, key), generation(api, key)) == (sized, rolled)
    assert counts(api, key) == ("30", "31"), "the last good commit's count stands"
    events = orjson.loads(api.list_page(kubeapi.EVENT, NAMESPACE)).get("items") or []
    reasons = [e.get("reason") for e in events if (e.get("regarding") or {}).get("name") == key.name]
    assert "SourceRejected" in reasons

    # The file fixed: the rejection is gone, the 1,500 ConfigMaps are counted and sized.
    fixed = cs.commit(key, {"nameless.yaml": None})
    wait_for(
        lambda: finished(rsync_of(api, key), fixed), timeout=SYNC_TIMEOUT, what="the fixed commit synced"
    )
    wait_for(lambda: counts(api, key) == ("1500", "1501"), timeout=120, what="the new counts")
    assert "objcount.dev/source-rejected" not in (rsync_of(api, key)["metadata"].get("annotations") or {})
    wait_for(lambda: memory_mib(applied(api, key)) > memory_mib(sized), timeout=120, what="sized up")


def equals_crd() -> str:
    """The AlertmanagerConfig CRD of the corpus (an enum item is a bare `=`), as its project publishes it."""
    return (corpus_directory() / EQUALS_CRD).read_text()


def test_a_commit_with_the_equals_crd_is_counted_and_sized_before_the_reconciler_has_synced_it(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    cs = config_sync_on_node
    api = cs.api
    key, apps, pod = sized_rootsync(cs, rsyncs, 30)
    small = memory_mib(applied(api, key))
    crd = equals_crd()
    assert "- =\n" in crd, "the CRD still has its bare `=`"
    commit = cs.commit(key, {"crd.yaml": crd, "configmaps.yaml": configmaps_yaml(1500, namespace=apps)})
    sampler = Sampler(lambda: rsync_of(api, key), interval=0.2, tolerate=(kubeapi.ApiError,))
    try:
        wait_for(lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the commit synced")
    finally:
        seen = sampler.stop()
    annotations = [r["metadata"].get("annotations") or {} for r in seen]
    counted = [
        a
        for a, r in zip(annotations, seen, strict=True)
        if a.get("objcount.dev/source-object-count") == "1501"
    ]
    assert counted, "the commit's 1,500 ConfigMaps and the CRD were never counted"
    assert '"CustomResourceDefinition":1' in counted[0].get("objcount.dev/source-kinds", "")
    sized_early = [r for r in seen if memory_mib(applied_of(r)) > small and not finished(r, commit)]
    assert sized_early, "the size went up only once the reconciler had synced the commit"
    # The reconciler that synced the commit is the one that ran before it, resized in place (no
    # restart, no new Pod), and runs at the size recorded.
    assert containers_of(live(cs, key))["reconciler"] == containers_of(pod)["reconciler"]
    assert live(cs, key)["metadata"]["uid"] == pod["metadata"]["uid"]
    recorded = applied(api, key)
    assert recorded is not None
    assert numbers(reconciler_resources(live(cs, key)["spec"])) == numbers(recorded)
    wait_for(
        lambda: running_size(cs, key) == numbers(recorded),
        timeout=120,
        what="the kubelet reporting the resize",
    )
    assert "objcount.dev/source-rejected" not in (rsync_of(api, key)["metadata"].get("annotations") or {})
    assert source_errors(rsync_of(api, key)) == []
    assert counts(api, key) == ("1501", "1502")
