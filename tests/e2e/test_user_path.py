"""The path a user sees, end to end on the local real node: our sidecar installed, a commit of 1,000
objects through git, the size going up before the reconciler has applied them, a prune, the size coming
down once the prune is done and the scale-down delay has passed, then `objcount status -A` and `kubectl
describe` of the RSync. Every container of Config Sync's Pods is the real component (see
controlplane.images)."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import cast

from controlplane.autoscaler_install import uninstall_webhook
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.seed import configmaps_yaml
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import Sampler, wait_for
from tests.integration.on_node import JSON, counts, finished, rsync_of

DELAY = 20  # seconds: the sidecar's scale-down delay here (the shipped default is longer)
SYNC_TIMEOUT = 300.0


def memory(rsync: JSON) -> int | None:
    """The reconciler's memory request the sidecar recorded as applied in place (the shipped target), in
    MiB (None: none yet)."""
    text = (rsync["metadata"].get("annotations") or {}).get("objcount.dev/applied-resources")
    return None if text is None else int(str(json.loads(text)["requests"]["memory"]).removesuffix("Mi"))


def test_a_user_commits_1000_objects_prunes_and_reads_the_status(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    cs = config_sync_on_node
    api = cs.api
    cs.install_sidecar(tmp_path / "certs", {"OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": str(DELAY)})
    try:
        apps = f"apps-{uuid.uuid4().hex[:8]}"
        key = RSyncKey("RootSync", NAMESPACE, f"user-{uuid.uuid4().hex[:8]}")
        first = cs.commit(key, {"configmaps.yaml": configmaps_yaml(10, namespace=apps)})
        api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
        rsyncs.append(key)
        wait_for(lambda: finished(rsync_of(api, key), first), timeout=SYNC_TIMEOUT, what="the first sync")
        wait_for(lambda: counts(api, key) == ("10", "11"), timeout=120, what="the first counts")
        small = wait_for(lambda: memory(rsync_of(api, key)), timeout=120, what="the first size")

        # 1,000 objects: the sidecar reads them from the commit git-sync fetched, before the reconciler
        # has applied them, and sizes up; the reconciler (resized in place) finishes the apply.
        big_commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(1000, namespace=apps)})
        sampler = Sampler(lambda: rsync_of(api, key), interval=0.2, tolerate=(kubeapi.ApiError,))
        try:
            wait_for(
                lambda: finished(rsync_of(api, key), big_commit),
                timeout=SYNC_TIMEOUT,
                what="1,000 objects synced",
            )
        finally:
            seen = sampler.stop()
        up_before_applied = [r for r in seen if (memory(r) or 0) > small and not finished(r, big_commit)]
        assert up_before_applied, "the size went up only once the apply had completed"
        big = wait_for(
            lambda: (m := memory(rsync_of(api, key))) and m > small and m,
            timeout=60,
            what="the size for 1,000",
        )

        # The prune back to 100: the size holds until the prune is done, then for the delay, then comes down.
        pruned = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=apps)})
        sampler = Sampler(lambda: rsync_of(api, key), interval=0.2, tolerate=(kubeapi.ApiError,))
        try:
            wait_for(
                lambda: any((memory(r) or big) < big for r in list(sampler.values)),
                timeout=SYNC_TIMEOUT + DELAY,
                what="the size down after the prune",
            )
        finally:
            seen = sampler.stop()
        came_down = next(i for i, r in enumerate(seen) if (memory(r) or big) < big)
        assert any(finished(r, pruned) for r in seen[:came_down]), (
            "the size came down before the prune finished"
        )
        assert all(memory(r) == big for r in seen[:came_down] if not finished(r, pruned))

        final = cast(int, memory(rsync_of(api, key)))
        kubeconfig = str(cs.stack.plane.kubeconfig)
        status = subprocess.run(
            [
                sys.executable,
                "-m",
                "autoscaler.cli",
                "status",
                "-A",
                "-o",
                "json",
                "--kubeconfig",
                kubeconfig,
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        (record,) = [r for r in json.loads(status.stdout) if r["name"] == key.name]
        assert (record["source_count"], record["sync_count"], record["counts_stored_in"]) == (
            100,
            101,
            "annotations",
        )
        assert str(record["applied"]).endswith(f"/{final}Mi"), record
        described = cs.stack.kubectl("describe", "rootsync", "-n", NAMESPACE, key.name).stdout
        assert "objcount.dev/sync-object-count: 101" in described, described[-3000:]
        assert f"{final}Mi" in described, described[-3000:]
    finally:
        uninstall_webhook(api)
