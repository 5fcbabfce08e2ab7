"""`make release`'s checks and the sidecar template's image (the rendering itself runs the real kustomize:
tests/integration/test_gitops_node.py and the README's installs)."""

from __future__ import annotations

import pytest
import yaml

from controlplane.autoscaler_install import SIDECAR_MANIFESTS
from controlplane.release import ReleaseError, validate, with_sidecar_image
from controlplane.seed import manifests_in

IMAGE = "registry.example/team/objcount-autoscaler@sha256:" + "ab" * 32


@pytest.mark.parametrize(
    "repository",
    ["registry.example/team/objcount-autoscaler", "localhost:5000/objcount", "objcount-autoscaler"],
)
def test_a_repository_without_tag_or_digest_is_accepted(repository: str) -> None:
    validate("0.1.0", repository)


@pytest.mark.parametrize(
    ("version", "repository", "says"),
    [
        ("0.1.0", "registry.example/objcount:0.1.0", "without tag or digest"),
        ("0.1.0", f"registry.example/objcount@sha256:{'ab' * 32}", "without tag or digest"),
        ("0.1.0", "Registry.example/Objcount", "without tag or digest"),
        ("", "registry.example/objcount", "not a valid image tag"),
        ("0.1.0/../x", "registry.example/objcount", "not a valid image tag"),
        (".hidden", "registry.example/objcount", "not a valid image tag"),
    ],
)
def test_an_invalid_version_or_image_is_refused_with_the_reason(
    version: str, repository: str, says: str
) -> None:
    with pytest.raises(ReleaseError, match=says):
        validate(version, repository)


def test_the_sidecar_templates_image_is_set_and_nothing_else_of_it_changes() -> None:
    (shipped,) = manifests_in(SIDECAR_MANIFESTS / "base" / "sidecar-template.yaml")
    before = yaml.safe_load(shipped["data"]["sidecar.yaml"])
    (after_object,) = with_sidecar_image([shipped], IMAGE)
    after = yaml.safe_load(after_object["data"]["sidecar.yaml"])
    assert before["container"]["image"] == "objcount-autoscaler:0.1.0"
    assert after["container"]["image"] == IMAGE
    assert {**after["container"], "image": None} == {**before["container"], "image": None}
    assert after["volumes"] == before["volumes"]
