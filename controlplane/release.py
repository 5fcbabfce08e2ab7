"""`make release VERSION=... IMAGE=...`: one manifest per install mode, our image named by digest.

Builds our image as `make image` does (the checkout's Dockerfile), writes it as an OCI archive named
`IMAGE:VERSION` (`dist/objcount-autoscaler-VERSION.oci.tar`), and renders with the real kustomize
(`kubectl kustomize`, the pinned kubectl the control plane is built with) each install into one file
whose every container of ours runs `IMAGE@sha256:DIGEST`, the digest of that archive's manifest:

- `objcount-cluster.yaml`: `manifests/cluster`, and `objcount-sidecar.yaml`: `manifests/sidecar` (their
  webhook's certificate by `objcount-certificate.sh`, copied beside them, for clusters without
  cert-manager);
- `objcount-cluster-cert-manager.yaml` and `objcount-sidecar-cert-manager.yaml`: the same with the
  certificate by cert-manager (`manifests/cluster/cert-manager`, `manifests/sidecar/cert-manager`);
- the wheel of the CLI (`object_count_autoscaler-<pyproject's version>-py3-none-any.whl`: `objcount status`,
  `recommend`, `grant-reposync`, `clean`), built as the image builds it (the service's packages only) from
  the image's wheelhouse, offline: `pip install` it where the README's commands are run.

kustomize's `images:` rewrites the Deployments' containers; the sidecar's container is text inside the
ConfigMap `objcount-sidecar-template`, so its `image:` is set here. Copy the archive to the registry as it
is (`skopeo copy oci-archive:dist/objcount-autoscaler-VERSION.oci.tar docker://IMAGE:VERSION`: the
manifest, and so the digest, are kept); a copy that rewrites the image (`docker load` then `docker push`)
changes the digest, and the release files would name an image the registry does not have.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from controlplane import images
from controlplane.autoscaler_install import (
    CERTIFICATE_SCRIPT,
    CLUSTER_MANIFESTS,
    SIDECAR_CONTAINER,
    SIDECAR_MANIFESTS,
    SIDECAR_TEMPLATE,
    kubectl_kustomize,
)
from controlplane.seed import JSON, REPO_ROOT

SHIPPED_IMAGE = "objcount-autoscaler"  # the name every shipped manifest gives our image (no registry)
# What each release file renders: its name, the install it is made from.
FILES = {
    "objcount-cluster.yaml": CLUSTER_MANIFESTS,
    "objcount-cluster-cert-manager.yaml": CLUSTER_MANIFESTS / "cert-manager",
    "objcount-sidecar.yaml": SIDECAR_MANIFESTS,
    "objcount-sidecar-cert-manager.yaml": SIDECAR_MANIFESTS / "cert-manager",
}
CERTIFICATE_SCRIPT_FILE = "objcount-certificate.sh"
# A repository without a tag or digest: the release adds both.
REPOSITORY = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._/-][a-z0-9]+)*)*$")
VERSION = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")  # a valid image tag


class ReleaseError(ValueError):
    """A release that cannot be made as asked (an invalid version or image name)."""


@dataclass(frozen=True)
class Release:
    """What `make release` wrote: the files, the image they name (`IMAGE@sha256:...`), and the archive
    holding that image under the name `tagged` (`IMAGE:VERSION`)."""

    image: str
    tagged: str
    archive: Path
    files: dict[str, Path]
    wheel: Path


def image_reference(repository: str, digest: str) -> str:
    return f"{repository}@{digest}"


def validate(version: str, repository: str) -> None:
    if not VERSION.fullmatch(version):
        raise ReleaseError(f"VERSION={version!r} is not a valid image tag (letters, digits, '.', '_', '-')")
    if not REPOSITORY.fullmatch(repository):
        raise ReleaseError(
            f"IMAGE={repository!r} must be a repository without tag or digest, "
            "for example registry.example/team/objcount-autoscaler"
        )


def kustomize(directory: Path, image: str) -> list[JSON]:
    """`kubectl kustomize` of `directory` with our image set to `image` (kustomize's `images:`)."""
    repository, digest = image.split("@", 1)
    with tempfile.TemporaryDirectory(prefix="objcount-release-") as tmp:
        # kustomize takes a base by a relative path only.
        base = os.path.relpath(directory, tmp)
        entry = {"name": SHIPPED_IMAGE, "newName": repository, "digest": digest}
        Path(tmp, "kustomization.yaml").write_text(
            yaml.safe_dump({"resources": [base], "images": [entry]}, sort_keys=False)
        )
        return kubectl_kustomize(Path(tmp))


def with_sidecar_image(objects: list[JSON], image: str) -> list[JSON]:
    """The sidecar template's container set to run `image` (kustomize does not look inside ConfigMaps)."""
    for item in objects:
        if item["kind"] == "ConfigMap" and item["metadata"]["name"] == SIDECAR_TEMPLATE:
            template = yaml.safe_load(item["data"]["sidecar.yaml"])
            assert template["container"]["name"] == SIDECAR_CONTAINER
            template["container"]["image"] = image
            item["data"]["sidecar.yaml"] = yaml.safe_dump(template, sort_keys=False)
    return objects


def render(directory: Path, image: str) -> list[JSON]:
    return with_sidecar_image(kustomize(directory, image), image)


class _BlockDumper(yaml.SafeDumper):
    """Writes multi-line strings (the sidecar template, the guard's expressions) as `|` blocks, as the
    manifests have them, not as one quoted line."""


def _block_strings(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = "|" if "\n" in text else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_BlockDumper.add_representer(str, _block_strings)


def release_text(name: str, version: str, image: str, objects: list[JSON]) -> str:
    header = (
        f"# objcount-autoscaler {version}: {name}, rendered by `make release` from "
        f"{FILES[name].relative_to(REPO_ROOT)} at {source_revision()}.\n"
        f"# Our image: {image}. Install: kubectl apply -f {name} (docs/install.md).\n"
    )
    return header + yaml.dump_all(objects, Dumper=_BlockDumper, sort_keys=False, width=120)


def source_revision() -> str:
    """The checkout's commit, `-dirty` when its files differ from it; `unknown` outside git."""
    try:
        commit = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(REPO_ROOT),
                "status",
                "--porcelain",
                "--",
                "manifests",
                "autoscaler",
                "inventory",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def make_release(version: str, repository: str, out: Path) -> Release:
    """Build our image, write its OCI archive and the release files into `out`."""
    validate(version, repository)
    built = images.objcount_image(images.base_image())
    archive, tagged = out / f"objcount-autoscaler-{version}.oci.tar", f"{repository}:{version}"
    image = image_reference(repository, images.oci_archive(built, archive, tagged))
    files = {}
    for name, directory in FILES.items():
        path = out / name
        path.write_text(release_text(name, version, image, render(directory, image)))
        files[name] = path
    script = out / CERTIFICATE_SCRIPT_FILE
    shutil.copyfile(CERTIFICATE_SCRIPT, script)
    files[CERTIFICATE_SCRIPT_FILE] = script
    return Release(image, tagged, archive, files, build_wheel(out))


# What the wheel is built from: the service's packages, as the Dockerfile copies them.
WHEEL_SOURCES = ("pyproject.toml", "README.md", "autoscaler", "inventory")


def build_wheel(out: Path) -> Path:
    """The CLI's wheel in `out`, built from a copy of the service's sources (concurrent builds share no
    build directory) with the build backend and nothing else from the image's wheelhouse (no index)."""
    with tempfile.TemporaryDirectory(prefix="objcount-wheel-") as tmp:
        source = Path(tmp) / "source"
        source.mkdir()
        for name in WHEEL_SOURCES:
            path = REPO_ROOT / name
            if path.is_dir():
                shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copyfile(path, source / name)
        built = Path(tmp) / "wheel"
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "--quiet",
                "--no-deps",
                "--no-index",
                f"--find-links={images.wheelhouse()}",
                f"--wheel-dir={built}",
                str(source),
            ],
            check=True,
            timeout=600,
        )
        (wheel,) = built.glob("*.whl")
        return Path(shutil.copy(wheel, out / wheel.name))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m controlplane.release", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--version", required=True, help="the release's version, the image's tag")
    parser.add_argument("--image", required=True, help="the repository to push to, e.g. reg.example/objcount")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "dist", help="where to write (default dist/)")
    args = parser.parse_args()
    try:
        release = make_release(args.version, args.image, args.out)
    except ReleaseError as error:
        parser.exit(2, f"make release: {error}\n")
    print(
        f"image {release.image}\n  push: skopeo copy oci-archive:{release.archive} docker://{args.image}:{args.version}"
    )
    for path in release.files.values():
        print(path)
    print(f"{release.wheel}\n  the CLI: pip install {release.wheel}")


if __name__ == "__main__":
    main()
