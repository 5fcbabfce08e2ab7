#!/usr/bin/env python3
"""`make doctor`: what the set-up needs, checked before anything is installed or built. Every problem is
said at once, each in one line with what to do; the exit status is 1 when any was found.

    python3 controlplane/doctor.py [--for check|run|test]

`make check` runs it `--for check` (Python and its venv only: no cluster, no build); `make run` and
`make test` `--for run` / `--for test` (also Go at the version every pinned module needs, the pinned
sources and, for the tests, the manifest corpus (controlplane/sources.py), root, the cgroup layout, free
disk for the caches, and the registries the build downloads from: fatal on a cold machine, a warning once
the caches are built). It uses the standard library only: it runs with the system's
python3, before the virtualenv exists.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

if __package__:  # imported: the tests, the tools
    from controlplane import sources
else:  # run as a file by the Makefile, with the system's python3, before the virtualenv exists
    import sources  # type: ignore[import-not-found,no-redef]

REPO = Path(__file__).resolve().parent.parent
PYTHON_MIN = (3, 11)  # pyproject.toml's requires-python
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "objcount-autoscaler"
# Free disk the set-up needs (docs/setup.md, "make doctor"). Cold (no cache of ours yet): what a cold build
# wrote, measured alone on 2026-11-30 (Go's build cache 11.4 GiB, its module cache 2.8, ours 4.1, the
# virtualenv 0.5: 18.9 GiB), with a margin for the tests' stacks. Warm: the tests' stacks and a rebuild.
DISK_COLD_GIB = 22
DISK_WARM_GIB = 5
REGISTRY_TIMEOUT_S = 5.0

Problem = str


def go_needed(go_mods: Iterable[Path]) -> tuple[int, int] | None:
    """The highest `go` directive among the project's own Go modules (the pins' wrappers and builds)."""
    versions = []
    for go_mod in go_mods:
        found = re.search(r"^go (\d+)\.(\d+)", go_mod.read_text(), re.M)
        if found:
            versions.append((int(found[1]), int(found[2])))
    return max(versions, default=None)


def go_version(output: str) -> tuple[int, int] | None:
    """The version `go version` prints (`go version go1.26.8 linux/amd64`)."""
    found = re.search(r"\bgo(\d+)\.(\d+)", output)
    return None if found is None else (int(found[1]), int(found[2]))


def check_python(version: tuple[int, int], has_ensurepip: bool) -> list[Problem]:
    problems = []
    if version < PYTHON_MIN:
        problems.append(
            f"python3 is {version[0]}.{version[1]}; {PYTHON_MIN[0]}.{PYTHON_MIN[1]}+ is needed "
            "(Debian 12: apt-get install python3)"
        )
    if not has_ensurepip:
        problems.append("python3 cannot make a virtualenv (no ensurepip): apt-get install python3-venv")
    return problems


def check_go(printed: str | None, needed: tuple[int, int] | None) -> list[Problem]:
    """`printed`: what `go version` printed (None: no `go` on PATH)."""
    want = "" if needed is None else f" {needed[0]}.{needed[1]}+"
    if printed is None:
        return [f"no `go` on PATH: install Go{want} from https://go.dev/dl/ and put its bin/ on PATH"]
    have = go_version(printed)
    if have is None:
        return [f"`go version` printed {printed.strip()!r}: not a Go version we can read"]
    if needed is not None and have < needed:
        return [
            f"go is {have[0]}.{have[1]}; the pinned modules need Go{want} (their go.mod files): install it "
            "from https://go.dev/dl/ (Debian 12's golang package is 1.19)"
        ]
    return []


def check_root(euid: int) -> list[Problem]:
    if euid != 0:
        return [
            "not root: the real node (kubelet, containerd, its cgroups and namespaces) runs as root: sudo"
        ]
    return []


def cgroup_layout(root: Path) -> str:
    """v2 (one hierarchy: cgroup.controllers at its root) or v1."""
    return "v2" if (root / "cgroup.controllers").exists() else "v1"


def check_cgroups(root: Path) -> tuple[list[Problem], str]:
    """Problems, and what the layout means for the stack (said either way)."""
    if not root.is_dir():
        return [f"no cgroup filesystem at {root}: the real node needs one mounted, writable"], ""
    layout = cgroup_layout(root)
    writable = os.access(root if layout == "v2" else root / "memory", os.W_OK)
    said = (
        "cgroup v2: the layout the node's kubelet runs on as users' nodes do"
        if layout == "v2"
        else "cgroup v1: the node's kubelet is started with failCgroupV1: false, which it needs on v1 "
        "(controlplane/cgroups.py)"
    )
    problems = (
        [] if writable else [f"the cgroups at {root} are not writable: run as root, not in a read-only mount"]
    )
    return problems, said


def check_disk(path: Path, free_bytes: int, needed_gib: int) -> list[Problem]:
    free_gib = free_bytes / 2**30
    if free_gib < needed_gib:
        return [f"{free_gib:.1f} GiB free under {path}; the set-up may need {needed_gib} GiB: free some disk"]
    return []


def registries(environ: dict[str, str], go_proxy: str | None) -> dict[str, str]:
    """The registries the build downloads from, as this machine is configured: name -> a URL to ask."""
    pip = environ.get("PIP_INDEX_URL", "https://pypi.org/simple/")
    urls = {"PyPI": pip.rstrip("/") + "/pip/"}
    proxy = next((p for p in (go_proxy or "").split(",") if p.startswith("http")), None)
    if proxy:
        urls["the Go module proxy"] = proxy.rstrip("/") + "/golang.org/x/mod/@v/list"
    debian = _debian_mirror()
    if debian:
        urls["Debian's archive"] = debian.rstrip("/") + "/dists/bookworm/Release"
    return urls


def _debian_mirror() -> str | None:
    for sources in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            text = sources.read_text()
        except OSError:
            continue
        found = re.search(r"^(?:URIs:\s*|deb\s+(?:\[[^\]]*\]\s+)?)(https?://\S+)", text, re.M)
        if found:
            return found[1]
    return None


def check_registries(urls: dict[str, str], ask: Callable[[str], str | None], tries: int = 3) -> list[Problem]:
    """`ask(url)`: None when it answers, else why not; a registry is asked up to `tries` times (a passing
    hiccup is no reason to stop a build that pip or Go would retry)."""
    problems = []
    for name, url in urls.items():
        why = ask(url)
        for _ in range(tries - 1):
            if why is None:
                break
            why = ask(url)
        if why is not None:
            problems.append(f"{name} does not answer ({url}: {why}): the build downloads from it")
    return problems


def _ask(url: str) -> str | None:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="GET"), timeout=REGISTRY_TIMEOUT_S):
            return None
    except urllib.error.HTTPError as error:
        return None if error.code < 500 else f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return str(getattr(error, "reason", error))


def _go_printed() -> str | None:
    go = shutil.which("go")
    if go is None:
        return None
    done = subprocess.run([go, "version"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout or done.stderr


def _go_proxy() -> str | None:
    go = shutil.which("go")
    if go is None:
        return os.environ.get("GOPROXY")
    done = subprocess.run([go, "env", "GOPROXY"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout.strip() or None


def examine(purpose: str) -> tuple[list[Problem], list[str]]:
    """Every problem for `purpose` (check, run, test), and what is said beside them."""
    problems = check_python(sys.version_info[:2], importlib.util.find_spec("ensurepip") is not None)
    said: list[str] = []
    if purpose == "check":
        return problems, said
    problems += check_go(_go_printed(), go_needed(sorted(REPO.glob("controlplane/**/go.mod"))))
    # The pinned sources (and, for the tests, the manifest corpus): each from its archive, a copy fetched
    # before, or its repository; where none answers, which archive to give and the variable to name it.
    problems += sources.problems(sources.needed(purpose), os.environ, sources.answers)
    problems += check_root(os.geteuid())
    cgroup_problems, layout = check_cgroups(Path("/sys/fs/cgroup"))
    problems += cgroup_problems
    said += [layout] if layout else []
    existing = next(p for p in (CACHE, *CACHE.parents) if p.exists())
    # Once built, the caches are not written again: only the tests' stacks and a rebuild need room then.
    needed = DISK_WARM_GIB if CACHE.exists() else DISK_COLD_GIB
    problems += check_disk(existing, shutil.disk_usage(existing).free, needed)
    unreachable = check_registries(registries(dict(os.environ), _go_proxy()), _ask)
    # With the caches built, a registry that does not answer now may not be needed (and may be back soon):
    # said, not fatal. On a cold machine the build cannot go on without it.
    if CACHE.exists():
        said += [f"warning: {line}" for line in unreachable]
    else:
        problems += unreachable
    return problems, said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make doctor", description=__doc__.splitlines()[0])
    parser.add_argument("--for", dest="purpose", choices=["check", "run", "test"], default="test")
    args = parser.parse_args(argv)
    problems, said = examine(args.purpose)
    for line in said:
        print(f"doctor: {line}")
    for problem in problems:
        print(f"doctor: {problem}", file=sys.stderr)
    if problems:
        print(f"doctor: {len(problems)} problem(s) before `make {args.purpose}` can work", file=sys.stderr)
        return 1
    print(f"doctor: ready for `make {args.purpose}`")
    return 0


if __name__ == "__main__":
    sys.exit(main())
