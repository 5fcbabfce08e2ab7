"""`make images`: every image the suite's real nodes run, built before the first test starts.

Each image is cached (controlplane.images), so on a warm machine this only rebuilds ours from the checkout
(seconds). On a cold one it takes minutes, and it used to happen inside the first tests' fixtures, in
every worker at once, while other workers' tests waited on real components with their own deadlines: a
test could time out on the load of a build it did not ask for (BENCHMARKS, "CI time"). Built here, the
time counts as build time and the tests start on a machine that only runs them.
"""

from __future__ import annotations

from controlplane import images
from controlplane.certmanager import certmanager_images
from controlplane.configsync_build import TESTED, build_configsync
from controlplane.metrics_server import metrics_server_image
from controlplane.stack import node_images
from controlplane.vpa import vpa_images


def every_image() -> list[images.Image]:
    """Ours (with the sandbox's and the base), every tested Config Sync release's with git-sync and the
    collector, VPA's, cert-manager's and metrics-server's; each built unless cached."""
    configsync = [
        image for version in TESTED for image in images.configsync_node_images(build_configsync(version))
    ]
    return [*node_images(), *configsync, *vpa_images(), *certmanager_images(), metrics_server_image()]


def main() -> None:
    """Build every image; print each one's name, build time and archive size (an image two releases share
    is listed for each, built once)."""
    for image in every_image():
        size = image.archive.stat().st_size / (1 << 20)
        print(f"{image.name}\t{image.build_seconds:.1f} s\t{size:.1f} MiB\t{image.archive}")


if __name__ == "__main__":
    main()
