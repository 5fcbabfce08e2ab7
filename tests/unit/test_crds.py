"""The shipped CRDs define what the design needs, and the pruning fixture is derived from them."""

from __future__ import annotations

from controlplane import pruning_variant
from controlplane.seed import CRD_DIR, PRUNING_CRD_DIR, manifests_in


def _status_props(crd: dict) -> dict:  # type: ignore[type-arg]
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]


def test_rsync_crds_define_integer_object_counts() -> None:
    crds = list(manifests_in(CRD_DIR / "configsync.gke.io_rsyncs.yaml"))
    assert [c["spec"]["names"]["kind"] for c in crds] == ["RootSync", "RepoSync"]
    for crd in crds:
        status = _status_props(crd)
        for block in ("source", "sync"):
            assert status[block]["properties"]["objectCount"]["type"] == "integer"
        assert "objectCount" not in status["rendering"]["properties"]
        assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}
        override = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
            "properties"
        ]["override"]
        entry = override["properties"]["resources"]["items"]["properties"]
        assert set(entry) == {"containerName", "cpuRequest", "cpuLimit", "memoryRequest", "memoryLimit"}


def test_pruning_fixture_is_the_shipped_crds_without_object_count() -> None:
    committed = (PRUNING_CRD_DIR / "configsync.gke.io_rsyncs.yaml").read_text()
    assert committed == pruning_variant.render(), "run: python -m controlplane.pruning_variant"
    for crd in manifests_in(PRUNING_CRD_DIR):
        status = _status_props(crd)
        assert "objectCount" not in status["source"]["properties"]
        assert "objectCount" not in status["sync"]["properties"]
