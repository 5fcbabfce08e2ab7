"""Measure the real reconciler on real repositories: the manifest corpus's directories that Config Sync
syncs as they are, and mixes of them, each point measured several times (a fresh RootSync and
reconciler each run: repeated points differ by up to a fifth).

    python -m profiles.real_repositories [--repositories cert-manager-crds,...] [--runs 3]
                                         [--out profiles/out/real-repositories] [--corpus DIR] [--resume]

The repositories are built from `../shared/data/manifest-corpus` (public manifests, byte for byte at
pinned commits; test input, never code of ours): a directory or file of one project's manifests as its
project publishes them, or several in one RootSync; `*-tenants-N` replicates an application (the
monitoring operator's example custom resources, Services and RBAC, its Deployments left out so no Pod
runs) into N tenant namespaces, each with its Namespace, beside the operator's CRDs: the one change made
to a manifest is its `metadata.namespace`. `guestbook-tenants-N` gives each tenant a public microservices
application instead (the guestbook: three Deployments and their Services, as published) and a
ResourceQuota of ours that admits no Pod (written here, not from the corpus: the Deployments are applied
and pruned as objects, and no Pod of theirs runs on the 2-core node); `platform-tenants-N` gives each
tenant both, beside the whole corpus platform and the monitoring operator's CRDs. `boutique-tenants-N`
gives each tenant the shape of issue 63's held-out platform: its Namespace, the quota, a RoleBinding of
ours (the tenant's group bound to the `edit` ClusterRole) and Online Boutique's 35 objects as released
(12 Deployments, 12 Services, 11 ServiceAccounts: `profiles/data/microservices-demo-v0.10.6/`, public
manifests kept byte for byte beside their source, not in the corpus); `boutique-monitoring-tenants-N`
adds the monitoring stack and its CRDs. Each repository is
checked first: every file as Config Sync's reader reads it (our counter, held to the reader by the
differential tests), no object declared twice.

On the local stack with a real node (Config Sync, v1.25.0 by default, its Pods run by the kubelet with
containerd; every container real since 2026-11-26; the runs recorded on 2026-11-26 before that had
git-sync and the otel-agent played by us, see BENCHMARKS.md), as `profiles.reconciler_memory`
measures a shape: the peak of the reconciler process (VmHWM) and of its container's memory cgroup (what
the kernel limits: page cache included) over the apply and over the prune down to one ConfigMap. The
Service range of the local stack holds 4,094 ClusterIPs (a /20), enough for every Service here.

Results: `<out>/real-repositories.csv` (the reconciler-memory columns, `shape` naming the repository)
and `.md`; `--resume` keeps the points the CSV has. `--recount CSV ...` measures nothing: it fills in
the counts a CSV's points lack (the Pod-template path steps, counted since 2026-12-04) from the same pinned
sources.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import orjson
import yaml

from controlplane.configsync_node import running_config_sync_on_node
from controlplane.sources import corpus_directory
from inventory.core.go_decoding import decode_yaml
from inventory.source.source_count import count_directory
from profiles.reconciler_memory import (
    BOUTIQUE,
    LocalStack,
    Point,
    Source,
    append,
    markdown,
    measure_source,
    read_points,
    write_points,
)

PROMETHEUS = "prometheus-operator-example"
MONITORING_CRDS = f"{PROMETHEUS}/prometheus-operator-crd"
# The monitoring operator's examples a tenant gets: custom resources of its CRDs, Services, RBAC.
TENANT_APP = (f"{PROMETHEUS}/user-guides/alerting", f"{PROMETHEUS}/user-guides/getting-started")
# A public microservices application: the guestbook's Deployments and Services, as published.
GUESTBOOK = tuple(
    f"kubernetes-examples/web/guestbook/{name}-{part}.yaml"
    for name in ("frontend", "redis-master", "redis-replica")
    for part in ("deployment", "service")
)
# Online Boutique's release manifests (profiles/data/microservices-demo-v0.10.6/SOURCE.md).
CLUSTER_SCOPED = {
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "Namespace",
    "StorageClass",
}
Files = dict[str, str]
# Tenants of the boutique mixes: 38 objects each, so about 1,000, 2,000, 4,000 and 6,000 objects, and the
# held-out platform's 76 (2,888 objects; it had 3,018).
BOUTIQUE_TENANTS = (26, 53, 76, 105, 158)


def tree(corpus: Path, *paths: str) -> Files:
    """Every manifest under these corpus paths (files or directories), named as in the corpus."""
    found: Files = {}
    for path in paths:
        root = corpus / path
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in (".yaml", ".yml", ".json"):
                found[str(file.relative_to(corpus))] = file.read_text()
    return found


def documents(text: str) -> list[dict[str, object]]:
    """The objects of a YAML file as Config Sync's reader decodes them (go-yaml's reading)."""
    pieces = ("\n" + text).split("\n---")
    return [d for d in (decode_yaml(p.encode()) for p in pieces if p.strip()) if isinstance(d, dict)]


def identity(document: Mapping[str, object]) -> tuple[object, object, object]:
    """(kind, namespace, name): a RootSync puts a namespaced object that names none in `default`."""
    metadata = document.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    kind = document.get("kind")
    namespace = metadata.get("namespace") or (None if kind in CLUSTER_SCOPED else "default")
    return kind, namespace, metadata.get("name")


def first_of_each(files: Files) -> Files:
    """The files in order, less any that declares an object an earlier one declares (the examples of
    one project are alternatives to each other: several declare the same Prometheus)."""
    kept: Files = {}
    seen: set[tuple[object, object, object]] = set()
    for path, text in files.items():
        declared = {identity(d) for d in documents(text)}
        if not declared & seen:
            kept[path] = text
            seen |= declared
    return kept


def without_crds(files: Files) -> Files:
    """The files less their CustomResourceDefinitions (the other documents as they are)."""
    kept: Files = {}
    for path, text in files.items():
        pieces = ("\n" + text).split("\n---")
        rest = [p for p in pieces if p.strip() and "\nkind: CustomResourceDefinition\n" not in p + "\n"]
        kept[path] = "\n---".join(rest).lstrip("\n")
    return kept


def _fixed_node_port(document: Mapping[str, object]) -> bool:
    """A Service that asks for a fixed node port: it can be in one namespace only."""
    spec = document.get("spec")
    ports = spec.get("ports") if isinstance(spec, dict) else None
    return document.get("kind") == "Service" and any(
        isinstance(p, dict) and "nodePort" in p for p in ports or []
    )


def application(corpus: Path, paths: tuple[str, ...], *, deployments: bool) -> list[dict[str, object]]:
    """A tenant's namespaced objects from these corpus paths, one of each kind and name (the examples are
    alternatives: several declare one Prometheus); Deployments only where asked for, and no Service
    with a fixed node port (it can be in one namespace only)."""
    examples = [d for text in tree(corpus, *paths).values() for d in documents(text)]
    namespaced = [
        d
        for d in examples
        if d.get("kind") not in CLUSTER_SCOPED
        and (deployments or d.get("kind") != "Deployment")
        and not _fixed_node_port(d)
    ]
    return list({(d.get("kind"), identity(d)[2]): d for d in reversed(namespaced)}.values())[::-1]


# Ours, not the corpus's: a tenant's Deployments are applied as objects, and no Pod of theirs may run.
NO_PODS: dict[str, object] = {
    "apiVersion": "v1",
    "kind": "ResourceQuota",
    "metadata": {"name": "no-pods"},
    "spec": {"hard": {"pods": "0"}},
}


def tenant_binding(namespace: str) -> dict[str, object]:
    """Ours, not the corpus's: the tenant's group may edit its namespace (a platform's usual RBAC)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tenant-developers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": f"{namespace}-developers"}
        ],
    }


def tenants(
    corpus: Path, count: int, *, monitoring: bool = True, guestbook: bool = False, boutique: bool = False
) -> Files:
    """The monitoring CRDs (where a tenant has the monitoring application), and the tenant application
    in `count` namespaces of its own."""
    app: list[dict[str, object]] = []
    if monitoring:
        app += application(corpus, TENANT_APP, deployments=False)
    if guestbook:
        app += [*application(corpus, GUESTBOOK, deployments=True), NO_PODS]
    if boutique:
        app += [*documents(BOUTIQUE.read_text()), NO_PODS]
    files = tree(corpus, MONITORING_CRDS) if monitoring else {}
    for i in range(count):
        namespace = f"tenant-{i:04d}"
        own = [tenant_binding(namespace)] if boutique else []
        placed = [{**d, "metadata": {**d["metadata"], "namespace": namespace}} for d in app + own]  # type: ignore[dict-item]
        head = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}
        files[f"tenants/{namespace}.yaml"] = yaml.safe_dump_all([head, *placed], sort_keys=False)
    return files


def boutique_tenants(corpus: Path, *, count: int, monitoring_stack: bool) -> Files:
    """Online Boutique in `count` tenant namespaces, beside the monitoring stack (its CRDs) if asked."""
    stack = REPOSITORIES["monitoring-stack"](corpus) if monitoring_stack else {}
    return {**stack, **tenants(corpus, count, monitoring=False, boutique=True)}


REPOSITORIES: dict[str, Callable[[Path], Files]] = {
    "cert-manager-crds": lambda c: tree(c, "cert-manager-crds"),
    "monitoring-crds": lambda c: tree(c, MONITORING_CRDS),
    "argo-cd-install": lambda c: tree(c, "argo-cd-manifests/install.yaml"),
    "argo-cd-crds": lambda c: tree(c, "argo-cd-manifests/crds"),
    "argo-cd-without-crds": lambda c: without_crds(tree(c, "argo-cd-manifests/install.yaml")),
    "ingress-nginx-cloud": lambda c: tree(c, "ingress-nginx-static/provider/cloud/deploy.yaml"),
    "monitoring-stack": lambda c: first_of_each(
        tree(
            c,
            MONITORING_CRDS,
            f"{PROMETHEUS}/rbac/prometheus-operator",
            f"{PROMETHEUS}/rbac/prometheus",
            *TENANT_APP,
        )
    ),
    "corpus-platform": lambda c: tree(
        c,
        "cert-manager-crds",
        MONITORING_CRDS,
        "argo-cd-manifests/install.yaml",
        "ingress-nginx-static/provider/cloud/deploy.yaml",
    ),
    "monitoring-tenants-100": lambda c: tenants(c, 100),
    "monitoring-tenants-300": lambda c: tenants(c, 300),
    "corpus-platform-tenants-200": lambda c: {**REPOSITORIES["corpus-platform"](c), **tenants(c, 200)},
    # Past 3,000 objects (issue 48): with CRDs, without, and a platform of both.
    "monitoring-tenants-400": lambda c: tenants(c, 400),
    "guestbook-tenants-500": lambda c: tenants(c, 500, monitoring=False, guestbook=True),
    "platform-tenants-300": lambda c: {
        **REPOSITORIES["corpus-platform"](c),
        **tenants(c, 300, guestbook=True),
    },
    # Many small namespaces full of Services and ServiceAccounts (issue 63, item 2): 38 objects a tenant,
    # about 1,000 to 6,000 objects, without CRDs and beside the monitoring stack's.
    **{
        f"boutique{'-monitoring' if stack else ''}-tenants-{n}": functools.partial(
            boutique_tenants, count=n, monitoring_stack=stack
        )
        for n in BOUTIQUE_TENANTS
        for stack in (False, True)
    },
}


def checked(name: str, files: Files, scratch: Path) -> Source:
    """The repository as a point's source, once Config Sync would sync it: every file read (none
    rejected), no object declared twice."""
    root = scratch / name
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    count = count_directory(root)
    if count.rejected or count.unread:
        raise SystemExit(f"{name}: Config Sync would not sync it: {count.rejected or count.unread}")
    identities = Counter(identity(d) for text in files.values() for d in documents(text))
    twice = [identity for identity, n in identities.items() if n > 1]
    if twice:
        raise SystemExit(f"{name}: objects declared twice: {twice[:5]}")
    return Source(
        name,
        count.objects,
        files,
        kinds=dict(count.kinds),
        crd_path_steps=count.crd_path_steps,
        workload_path_steps=count.workload_path_steps,
    )


def run(names: list[str], runs: int, out: Path, corpus: Path, resume: bool) -> list[Point]:
    out.mkdir(parents=True, exist_ok=True)
    table = out / "real-repositories.csv"
    if not resume:
        table.unlink(missing_ok=True)
    done = {(p.shape, p.run) for p in read_points(table)}
    with tempfile.TemporaryDirectory() as scratch:
        sources = {name: checked(name, REPOSITORIES[name](corpus), Path(scratch)) for name in names}
        for name, source in sources.items():
            print(
                f"{name}: {source.objects} objects, {source.bytes / 1e6:.1f} MB in {len(source.files)} files"
            )
        todo = [(name, r) for r in range(1, runs + 1) for name in names if (name, r) not in done]
        if todo:
            with running_config_sync_on_node() as config_sync:
                stack = LocalStack(config_sync)
                for name, r in todo:
                    point = measure_source(stack, sources[name], f"repo-{name}-{r}"[:63], run=r)
                    append(table, point)
                    print(markdown([point]).splitlines()[-1], flush=True)
        points = [refilled(p, sources) for p in read_points(table)]
    write_points(table, points)
    (out / "real-repositories.md").write_text(markdown(points))
    return points


def refilled(point: Point, sources: Mapping[str, Source]) -> Point:
    """A point with its repository's kinds, CRD path steps and Pod-template path steps where it lacks
    them (points measured before they were recorded): counted again from the same pinned sources."""
    source = sources.get(point.shape)
    if source is None:
        return point
    if not point.kinds:
        kinds = orjson.dumps(dict(sorted(source.kinds.items()))).decode()
        point = replace(point, kinds=kinds, crd_path_steps=source.crd_path_steps)
    if point.workload_path_steps is None:
        point = replace(point, workload_path_steps=source.workload_path_steps)
    return point


def recount(table: Path, corpus: Path) -> None:
    """Fill in what a CSV's points lack of their repositories' counts (`refilled`), its `#` provenance
    lines kept: the measurements are not touched."""
    provenance = [line for line in table.read_text().splitlines(keepends=True) if line.startswith("#")]
    points = read_points(table)
    with tempfile.TemporaryDirectory() as scratch:
        names = sorted({p.shape for p in points})
        sources = {name: checked(name, REPOSITORIES[name](corpus), Path(scratch)) for name in names}
        rewritten = Path(scratch) / "points.csv"
        write_points(rewritten, [refilled(p, sources) for p in points])
        table.write_text("".join(provenance) + rewritten.read_text())


def main(argv: list[str] | None = None) -> None:
    # SIGTERM unwinds like Ctrl-C, so the local stack is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        prog="python -m profiles.real_repositories", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--repositories", default=",".join(REPOSITORIES), help="of: " + ", ".join(REPOSITORIES)
    )
    parser.add_argument("--runs", type=int, default=3, help="measurements of each repository")
    parser.add_argument("--out", type=Path, default=Path("profiles/out/real-repositories"))
    parser.add_argument(
        "--corpus",
        type=Path,
        help="the manifest corpus's directory (default: as the tests find it, controlplane/sources.py)",
    )
    parser.add_argument("--resume", action="store_true", help="keep the CSV's points and measure the rest")
    parser.add_argument(
        "--recount",
        nargs="+",
        type=Path,
        metavar="CSV",
        help="measure nothing: fill in these CSVs' counts their points lack (Pod-template path steps)",
    )
    args = parser.parse_args(argv)
    if args.recount:
        for table in args.recount:
            recount(table, args.corpus or corpus_directory())
        return
    names = [n for n in args.repositories.split(",") if n]
    unknown = sorted(set(names) - set(REPOSITORIES))
    if unknown:
        parser.error(f"unknown repositories {unknown}")
    points = run(names, args.runs, args.out, args.corpus or corpus_directory(), args.resume)
    print(markdown(points))


if __name__ == "__main__":
    main()
