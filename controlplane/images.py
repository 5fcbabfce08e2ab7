"""Every container image the local real node runs, built here: nothing is ever pulled.

No container registry is reachable from these machines, and none may be tried. So each image a Pod asks
for is built on this machine and imported into the node's containerd under the exact name its manifest
uses (`Image.name`), with `imagePullPolicy: IfNotPresent` (a tag that is not `latest`).

- `objcount-autoscaler:0.1.0`, ours: built from the checkout's `Dockerfile` every time the suite starts
  (never a stale image) by buildah (Debian's package; no daemon), with `--build-arg BASE=` a stand-in for
  `python:3.11-slim`, which cannot be pulled here: Debian bookworm's Python 3.11 (the release
  `python:3.11-slim` is built on), pip, setuptools and wheel, made with mmdebstrap (PLAYED BY US: the base
  image). pip inside the build reads a wheelhouse made on the host (`pip download` of the pinned
  requirements), mounted with a `pip.conf` that names it, since the build cannot reach the index.
- Config Sync's `reconciler` and `reconciler-manager`, its binaries from the pinned source on a stand-in
  for `gcr.io/distroless/static:nonroot` (an `/etc/passwd` with `nonroot`, uid 65532, and `/tmp`), under
  the names its release gives them.
- `metrics-server` (`registry.k8s.io/metrics-server/metrics-server:v0.8.0`, the name upstream's release
  gives it): the real binary built from its Go module (`controlplane/build_metrics_server.sh`) on the same
  distroless stand-in, `USER 65534` and `/metrics-server` as its entrypoint, like upstream's Dockerfile.
  Only tests that ask for it run it (`controlplane.metrics_server`).
- `git-sync` (`registry.k8s.io/git-sync/git-sync:v4.4.2`): the release every pinned Config Sync version
  runs, built from its source archive with its vendor/ (`controlplane/build_gitsync.sh`; the module proxy
  refuses k8s.io/git-sync), on Debian with `git` as upstream's image is made.
- `otelcontribcol` (`localhost/objcount/otelcontribcol:v0.118.0`): the OpenTelemetry Collector v0.118.0
  (the release Config Sync v1.24.3's image is built from; v1.25.0 names v0.152.0 and runs the same
  configurations) built from its Go modules with the components
  Config Sync's configurations name (`controlplane/build_otelcol.sh`); it runs Config Sync's `otel-agent`
  and `otel-collector` with their ConfigMaps unchanged.
- the Pod sandbox (`pause`): `build/pause/linux/pause.c` of the pinned `k8s.io/kubernetes` module.

Each image is written once as a docker-archive under the cache, keyed by what it is built from, and
imported into each node's containerd in well under a second (`ctr images import`).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from controlplane import kubernetes_build
from controlplane.configsync_build import ConfigSyncBuild, build_configsync, build_git_sync, build_otelcol

REPO_ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
CACHE = Path(
    os.environ.get("OBJCOUNT_IMAGE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "objcount-autoscaler" / "images"
)
OBJCOUNT_IMAGE = "objcount-autoscaler:0.1.0"  # the name the shipped manifests use
# Built from the default Kubernetes release's pause.c; every pinned release's node runs it.
PAUSE_IMAGE = f"localhost/objcount/pause:{kubernetes_build.DEFAULT_VERSION}"
BASE_IMAGE = "localhost/objcount-standin/python:3.11-slim-bookworm"
DISTROLESS_UID = 65532
CONFIGSYNC_REGISTRY = "gcr.io/config-management-release"
# Upstream's name for the release's image: its manifests ask for exactly this.
METRICS_SERVER_IMAGE = "registry.k8s.io/metrics-server/metrics-server:v0.8.0"
# Upstream's name for the release's image (Config Sync names its own rebuild, v4.4.2-gke.N, of the same tag).
GIT_SYNC_IMAGE = "registry.k8s.io/git-sync/git-sync:v4.4.2"
# Config Sync v1.24.3 names Google's rebuild, otelcontribcol:v0.118.0-gke.10; this one is built here from
# the same upstream release's modules, so it carries a name of ours.
OTEL_IMAGE = "localhost/objcount/otelcontribcol:v0.118.0"
# pip, setuptools and wheel as the base image ships them (python:3.11-slim has all three).
BASE_PIP = ("pip==24.0", "setuptools==79.0.1", "wheel==0.45.1")
DEBIAN_SUITE = "bookworm"


class ImageError(RuntimeError):
    """An image could not be built (a missing tool, a failed build step)."""


@dataclass(frozen=True)
class Image:
    """A built image: its name (as a Pod asks for it) and its docker-archive."""

    name: str
    archive: Path
    build_seconds: float


def _require(*tools: str) -> None:
    missing = [t for t in tools if shutil.which(t) is None]
    if missing:
        raise ImageError(
            f"building the node's images needs {', '.join(missing)}"
            " (installed by `make`: controlplane/node-packages.sh)"
        )


def _run(argv: Sequence[str], **kwargs: object) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise ImageError(
            f"{' '.join(argv[:4])} ... failed (exit {result.returncode}):\n{result.stderr[-4000:]}"
        )
    out: str = result.stdout
    return out


def _key(*parts: bytes | str | Path) -> str:
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            digest.update(part.read_bytes())
        else:
            digest.update(part.encode() if isinstance(part, str) else part)
    return digest.hexdigest()[:12]


def _buildah(*args: str) -> list[str]:
    storage = CACHE / "buildah"
    return [
        "buildah",
        f"--root={storage / 'root'}",
        f"--runroot={storage / 'run'}",
        "--storage-driver=overlay",
        *args,
    ]


@contextlib.contextmanager
def _cached(name: str, key: str) -> Iterator[tuple[Path, bool]]:
    """The archive for `name` at `key`, and whether it must be built; a build that fails leaves nothing.
    Held under a lock of its own, so test workers starting stacks at once build it once."""
    safe = name.replace("/", "_").replace(":", "_")
    archive = CACHE / f"{safe}-{key}.tar"
    if archive.exists():
        yield archive, False
        return
    with _exclusive(safe):
        if archive.exists():
            yield archive, False
            return
        try:
            yield archive, True
        except BaseException:
            archive.unlink(missing_ok=True)
            raise


@contextlib.contextmanager
def _exclusive(name: str) -> Iterator[None]:
    """One process at a time builds `name` (an advisory lock beside the cache, freed when its owner dies)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / f"{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _push(reference: str, name: str, archive: Path) -> None:
    partial = archive.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    _run(_buildah("push", "--quiet", reference, f"docker-archive:{partial}:{name}"))
    partial.rename(archive)


def _from_rootfs(name: str, rootfs_tar: Path, *config: str) -> None:
    """Commit `rootfs_tar` as the image `name` (in buildah's store) with `buildah config` arguments."""
    container = _run(_buildah("from", "--quiet", "scratch")).strip()
    try:
        _run(_buildah("add", "--quiet", container, str(rootfs_tar), "/"))
        if config:
            _run(_buildah("config", *config, container))
        _run(_buildah("commit", "--quiet", "--format=docker", container, name))
    finally:
        subprocess.run(_buildah("rm", container), capture_output=True, check=False)


# ----- the Pod sandbox ------------------------------------------------------------------------------------
def kubernetes_module_dir() -> Path:
    """The default release's k8s.io/kubernetes module in Go's module cache (its build fetched it)."""
    version = kubernetes_build.DEFAULT_VERSION
    cache = _run(["go", "env", "GOMODCACHE"]).strip()
    path = Path(cache) / f"k8s.io/kubernetes@{version}"
    if not path.is_dir():
        _run(["go", "mod", "download", f"k8s.io/kubernetes@{version}"], cwd=str(HERE / "go" / version))
    return path


def pause_image() -> Image:
    source = kubernetes_module_dir() / "build" / "pause" / "linux" / "pause.c"
    began = time.monotonic()
    with _cached(PAUSE_IMAGE, _key(source, "pause-1")) as (archive, build):
        if build:
            _require("gcc", "buildah")
            with tempfile.TemporaryDirectory(prefix="objcount-pause-") as tmp:
                binary = Path(tmp) / "pause"
                version = f"-DVERSION={kubernetes_build.DEFAULT_VERSION}"
                _run(["gcc", "-Os", "-static", version, "-o", str(binary), str(source)])
                tar = Path(tmp) / "rootfs.tar"
                _run(["tar", "-C", tmp, "-cf", str(tar), "pause"])
                _from_rootfs(PAUSE_IMAGE, tar, "--entrypoint", '["/pause"]', "--user", "65535:65535")
            _push(PAUSE_IMAGE, PAUSE_IMAGE, archive)
    return Image(PAUSE_IMAGE, archive, time.monotonic() - began)


# ----- Debian-based images --------------------------------------------------------------------------------
def _mmdebstrap(target: Path, packages: Sequence[str], *hooks: str) -> None:
    _require("mmdebstrap")
    argv = [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        f"--include={','.join(packages)}",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        *(f"--customize-hook={hook}" for hook in hooks),
        '--customize-hook=rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*',
        DEBIAN_SUITE,
        str(target),
    ]
    _run(argv)


def base_image() -> Image:
    """The stand-in for `python:3.11-slim` (PLAYED BY US): Debian bookworm's Python 3.11 with pip,
    setuptools and wheel in /usr/local as the release image has them, no EXTERNALLY-MANAGED marker."""
    began = time.monotonic()
    with _cached(BASE_IMAGE, _key(Path(__file__), *BASE_PIP)) as (archive, build):
        if build:
            _require("buildah", "mmdebstrap")
            with tempfile.TemporaryDirectory(prefix="objcount-base-") as tmp:
                wheels = Path(tmp) / "wheels"
                _run(
                    [
                        "pip",
                        "download",
                        "--quiet",
                        "--only-binary=:all:",
                        "--no-deps",
                        "-d",
                        str(wheels),
                        *BASE_PIP,
                    ]
                )
                pip_wheel = next(wheels.glob("pip-*.whl"))
                inside = " ".join(f"/tmp/wheels/{w.name}" for w in sorted(wheels.glob("*.whl")))
                tar = Path(tmp) / "rootfs.tar"
                _mmdebstrap(
                    tar,
                    ["python3", "python-is-python3", "passwd", "ca-certificates", "netbase"],
                    f'mkdir -p "$1/tmp/wheels" && cp {wheels}/*.whl "$1/tmp/wheels/"',
                    f'chroot "$1" python3 /tmp/wheels/{pip_wheel.name}/pip install --quiet --no-index'
                    f" --no-compile --root-user-action=ignore --break-system-packages {inside}",
                    'rm -rf "$1/tmp/wheels" "$1/usr/lib/python3.11/EXTERNALLY-MANAGED"',
                )
                _from_rootfs(
                    BASE_IMAGE,
                    tar,
                    "--env",
                    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "--env",
                    "LANG=C.UTF-8",
                    "--cmd",
                    '["python3"]',
                )
            _push(BASE_IMAGE, BASE_IMAGE, archive)
    return Image(BASE_IMAGE, archive, time.monotonic() - began)


def git_sync_image(bin_dir: Path) -> Image:
    """git-sync as its release image is made (upstream's `Dockerfile.in`): Debian with bash, coreutils,
    git, openssh-client and ca-certificates, the user git-sync (65533) with HOME=/tmp, `/git` as its root,
    and the static binary (`bin_dir/git-sync`, built from the pinned source) as `/git-sync`."""
    binary = bin_dir / "git-sync"
    began = time.monotonic()
    with _cached(GIT_SYNC_IMAGE, _key(Path(__file__), binary)) as (archive, build):
        if build:
            _require("buildah", "mmdebstrap")
            with tempfile.TemporaryDirectory(prefix="objcount-gitsync-") as tmp:
                tar = Path(tmp) / "rootfs.tar"
                _mmdebstrap(
                    tar,
                    ["bash", "coreutils", "git", "openssh-client", "ca-certificates"],
                    f'install -m 0755 {binary} "$1/git-sync"',
                    'echo "git-sync:x:65533:65533::/tmp:/sbin/nologin" >> "$1/etc/passwd"',
                    'echo "git-sync:x:65533:git-sync" >> "$1/etc/group"',
                    'mkdir -m 02775 "$1/git" && chown 65533:65533 "$1/git"',
                    'chmod 1777 "$1/tmp"',
                )
                _from_rootfs(
                    GIT_SYNC_IMAGE,
                    tar,
                    "--entrypoint",
                    '["/git-sync"]',
                    "--user",
                    "65533:65533",
                    "--env",
                    "HOME=/tmp",
                    "--env",
                    "GITSYNC_ROOT=/git",
                    "--workingdir",
                    "/tmp",
                )
            _push(GIT_SYNC_IMAGE, GIT_SYNC_IMAGE, archive)
    return Image(GIT_SYNC_IMAGE, archive, time.monotonic() - began)


# ----- Config Sync's ----------------------------------------------------------------------------------------
def _distroless_rootfs(directory: Path) -> None:
    """What Config Sync's binaries use of `gcr.io/distroless/static:nonroot`: its users and /tmp."""
    (directory / "etc").mkdir(parents=True)
    (directory / "etc" / "passwd").write_text(
        f"root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{DISTROLESS_UID}:{DISTROLESS_UID}:nonroot:/home/nonroot:/sbin/nologin\n"
    )
    (directory / "etc" / "group").write_text(f"root:x:0:\nnonroot:x:{DISTROLESS_UID}:\n")
    (directory / "tmp").mkdir(mode=0o1777)
    (directory / "tmp").chmod(0o1777)
    (directory / "home" / "nonroot").mkdir(parents=True)
    os.chown(directory / "home" / "nonroot", DISTROLESS_UID, DISTROLESS_UID)


def static_binary_image(name: str, binary: Path, user: str) -> Image:
    """A static binary as `/<its name>`, the entrypoint, on the distroless stand-in, run as `user`."""
    began = time.monotonic()
    with _cached(name, _key(binary, Path(__file__))) as (archive, build):
        if build:
            _require("buildah")
            with tempfile.TemporaryDirectory(prefix="objcount-static-") as tmp:
                root = Path(tmp) / "root"
                _distroless_rootfs(root)
                shutil.copy2(binary, root / binary.name)
                tar = Path(tmp) / "rootfs.tar"
                _run(["tar", "-C", str(root), "-cf", str(tar), "."])
                _from_rootfs(name, tar, "--entrypoint", f'["/{binary.name}"]', "--user", user)
            _push(name, name, archive)
    return Image(name, archive, time.monotonic() - began)


def configsync_images(bin_dir: Path, version: str) -> list[Image]:
    """`reconciler` and `reconciler-manager` from the built binaries, named as the release names them."""
    user = f"{DISTROLESS_UID}:{DISTROLESS_UID}"
    return [
        static_binary_image(f"{CONFIGSYNC_REGISTRY}/{binary}:{version}", bin_dir / binary, user)
        for binary in ("reconciler", "reconciler-manager")
    ]


# ----- metrics-server ---------------------------------------------------------------------------------------
def metrics_server_image(bin_dir: Path) -> Image:
    """metrics-server as its release image is made (distroless/static, `USER 65534`, the static binary as
    `/metrics-server`), with the binary built here (`bin_dir/metrics-server`) on the distroless stand-in."""
    return static_binary_image(METRICS_SERVER_IMAGE, bin_dir / "metrics-server", "65534")


def otel_image(bin_dir: Path) -> Image:
    """The OpenTelemetry Collector that runs as Config Sync's `otel-agent` (in each reconciler Pod) and
    `otel-collector` (in config-management-monitoring): `bin_dir/otelcontribcol`, built from the collector's
    Go modules with the components Config Sync's configurations name (`controlplane/build_otelcol.sh`), as
    `/otelcontribcol` (the command Config Sync's manifests run), user 10001 as upstream's contrib image."""
    return static_binary_image(OTEL_IMAGE, bin_dir / "otelcontribcol", "10001")


# ----- Config Sync's Pods, all of it ------------------------------------------------------------------------
def configsync_node_images(build: ConfigSyncBuild) -> list[Image]:
    """Config Sync's images for the real node: its own from the pinned source, git-sync and the
    OpenTelemetry Collector each from its pinned release (built if missing)."""
    return [
        *configsync_images(build.root / "bin", build.version),
        git_sync_image(build_git_sync()),
        otel_image(build_otelcol()),
    ]


# ----- ours -------------------------------------------------------------------------------------------------
def wheelhouse() -> Path:
    """Wheels of the image's pinned requirements and build backend, for pip inside the build (offline)."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    house = CACHE / f"wheelhouse-{_key(*requirements)}"
    if not house.is_dir():
        partial = house.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        _run(
            [
                "pip",
                "download",
                "--quiet",
                "--only-binary=:all:",
                "--python-version=3.11",
                "--platform=manylinux2014_x86_64",
                "--platform=manylinux_2_17_x86_64",
                "--platform=manylinux_2_28_x86_64",
                "--platform=any",
                "-d",
                str(partial),
                *requirements,
            ]
        )
        partial.rename(house)
    return house


def objcount_image(base: Image) -> Image:
    """Our image, built from the checkout's Dockerfile (every time: never a stale image)."""
    _require("buildah")
    with _exclusive("objcount-autoscaler"):
        return _build_objcount_image(base)


def _build_objcount_image(base: Image) -> Image:
    began = time.monotonic()
    house = wheelhouse()
    pip_conf = CACHE / "pip-offline.conf"
    pip_conf.write_text("[global]\nno-index = true\nfind-links = /wheelhouse\n")
    with tempfile.TemporaryDirectory(prefix="objcount-image-") as tmp:
        iidfile = Path(tmp) / "iid"
        _run(
            _buildah(
                "bud",
                "--quiet",
                "--pull=never",
                "--isolation=chroot",
                "--layers",
                "--format=docker",
                f"--build-arg=BASE={base.name}",
                f"--volume={house}:/wheelhouse:ro",
                f"--volume={pip_conf}:/etc/pip.conf:ro",
                f"--iidfile={iidfile}",
                f"--tag={OBJCOUNT_IMAGE}",
                str(REPO_ROOT),
            )
        )
        image_id = iidfile.read_text().strip().removeprefix("sha256:")[:12]
    archive = CACHE / f"objcount-autoscaler-{image_id}.tar"
    if not archive.exists():
        _push(OBJCOUNT_IMAGE, OBJCOUNT_IMAGE, archive)
    return Image(OBJCOUNT_IMAGE, archive, time.monotonic() - began)


def oci_archive(image: Image, archive: Path, reference: str) -> str:
    """`image` written to `archive` as an OCI archive naming it `reference`; the digest of its manifest
    (`sha256:...`), which a registry keeps when the archive is copied there as it is (`skopeo copy
    oci-archive:ARCHIVE docker://REFERENCE`): the digest a release names its image by."""
    _require("buildah")
    archive.parent.mkdir(parents=True, exist_ok=True)
    archive.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="objcount-digest-") as tmp:
        digest_file = Path(tmp) / "digest"
        _run(
            _buildah(
                "push",
                "--quiet",
                "--format=oci",
                f"--digestfile={digest_file}",
                image.name,
                f"oci-archive:{archive}:{reference}",
            )
        )
        return digest_file.read_text().strip()


def main() -> None:
    """`make image`: our image from the checkout as the suite builds it; with `--all`, every image the real
    node runs (Config Sync's with their stand-ins): name, build time, size of its archive (BENCHMARKS.md).
    `OBJCOUNT_IMAGE_CACHE` set to an empty directory gives cold times."""
    parser = argparse.ArgumentParser(prog="python -m controlplane.images", description=main.__doc__)
    parser.add_argument("--all", action="store_true", help="every image of the real node, not only ours")
    pause, base = pause_image(), base_image()
    built = [objcount_image(base)]
    if parser.parse_args().all:
        built = [pause, base, *built, *configsync_node_images(build_configsync())]
    for image in built:
        size = image.archive.stat().st_size / (1 << 20)
        print(f"{image.name}\t{image.build_seconds:.1f} s\t{size:.1f} MiB\t{image.archive}")


if __name__ == "__main__":
    main()
