#!/usr/bin/env python3
"""The third-party inputs pinned by content: Config Sync's and git-sync's sources, and the manifest corpus
the differential tests read. Each comes from one of, in this order:

1. its archive in the directory (or, for the corpus, the file) its variable names:
   OBJCOUNT_CONFIGSYNC_ARCHIVES, OBJCOUNT_GITSYNC_ARCHIVES, OBJCOUNT_MANIFEST_CORPUS; checked against the
   archive's pinned sha256;
2. its archive in `../shared` beside the repository, where it is (as on the machines this project is
   built on), checked the same way;
3. a copy fetched before, kept under the cache (~/.cache/objcount-autoscaler/sources);
4. its public repository, fetched at the pinned commit (`git fetch --depth 1 REPOSITORY COMMIT`): the
   commit checked, then the content against the same pinned sha256 the archive's content has (the sha256
   git tree of the archive's paths, `content` below: one sum for both ways in).

Where none of them can be had, the error names the archive to provide and the variable that points to it;
`make doctor` says it for every input before any build (`problems`). The standard library only: the
doctor runs this with the system's python3, before the virtualenv exists.

    python3 controlplane/sources.py source configsync|git-sync VERSION DEST   (the source, into DEST)
    python3 controlplane/sources.py corpus                                   (prints the corpus's directory)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED = REPO.parent / "shared"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "objcount-autoscaler" / "sources"
# Config Sync's archives hold these paths of the tag (../shared/configsync/README.md); git-sync's, all of it.
CONFIGSYNC_PATHS = ("go.mod", "go.sum", "LICENSE", "README.md", "cmd", "pkg", "vendor", "manifests")
# How long the preflight waits for a public repository to answer `git ls-remote` (a fetch may be needed).
ANSWER_TIMEOUT_S = 20
# A corpus directory's licence files come from its repository's root, not from its source path.
LICENCES = ("LICENSE", "NOTICE")


class SourceError(Exception):
    """An input that cannot be had, with what to provide."""


@dataclass(frozen=True)
class Source:
    """One pinned source tree: an archive beside the repository, or a public repository's commit."""

    name: str  # as said: "Config Sync v1.25.0"
    kind: str  # configsync, git-sync: as build scripts name it
    version: str
    commit: str
    repository: str
    archive: str
    sha256: str  # of the archive
    content: str  # the sha256 git tree of `paths`, extracted or fetched alike
    paths: tuple[str, ...]
    variable: str  # the directory holding the archive
    shared: str  # that directory under ../shared

    def archive_given(self, environ: Mapping[str, str]) -> Path | None:
        """The archive the variable names, else the one in ../shared; None when neither is set or there."""
        given = environ.get(self.variable)
        path = Path(given or SHARED / self.shared) / self.archive
        return path if given or path.is_file() else None

    def fetched(self) -> Path:
        return CACHE / f"{self.kind}-{self.version}-{self.content[:12]}"

    def repositories(self) -> list[str]:
        return [self.repository]

    def provide(self) -> str:
        return f"put {self.archive} (sha256 {self.sha256}) in a directory and set {self.variable} to it"


@dataclass(frozen=True)
class CorpusPart:
    """One directory of the corpus: the files of a repository's source path at a commit."""

    directory: str
    repository: str
    commit: str
    source_path: str
    content: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Corpus:
    archive: str
    sha256: str
    parts: tuple[CorpusPart, ...]
    name: str = "the manifest corpus"
    variable: str = "OBJCOUNT_MANIFEST_CORPUS"  # the archive file itself
    shared: str = "data/manifest-corpus"
    top: str = "corpus-D"  # the directory the archive unpacks to

    def archive_given(self, environ: Mapping[str, str]) -> Path | None:
        if environ.get(self.variable):
            return Path(environ[self.variable])
        path = SHARED / self.shared / self.archive
        return path if path.is_file() else None

    def extracted(self) -> Path:
        return CACHE / f"{self.top}-{self.sha256[:12]}"

    def fetched(self) -> Path:
        digest = hashlib.sha256("".join(p.content for p in self.parts).encode()).hexdigest()
        return CACHE / f"{self.top}-fetched-{digest[:12]}"

    def repositories(self) -> list[str]:
        return [part.repository for part in self.parts]

    def provide(self) -> str:
        return f"put {self.archive} (sha256 {self.sha256}) somewhere and set {self.variable} to its path"


def _rows(pins: Path) -> list[list[str]]:
    return [
        line.split() for line in pins.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]


def configsync_sources(pins: Path = HERE / "configsync-pins") -> dict[str, Source]:
    """Every pinned Config Sync release by version (configsync-pins)."""
    found = {}
    for version, commit, _module, repository, archive, sha256, _tests, content in _rows(pins):
        found[version] = Source(
            f"Config Sync {version}", "configsync", version, commit, repository, archive, sha256, content,
            CONFIGSYNC_PATHS, "OBJCOUNT_CONFIGSYNC_ARCHIVES", "configsync",
        )  # fmt: skip
    return found


def built_configsync_versions(pins: Path = HERE / "configsync-pins") -> list[str]:
    """The releases the suite builds and tests (configsync-pins' `tests` column is not `none`)."""
    return [row[0] for row in _rows(pins) if row[6] != "none"]


def gitsync_source(pin: Path = HERE / "gitsync-pin") -> Source:
    ((version, commit, _module, repository, archive, sha256, content),) = _rows(pin)
    return Source(
        f"git-sync {version}", "git-sync", version, commit, repository, archive, sha256, content, (".",),
        "OBJCOUNT_GITSYNC_ARCHIVES", "gitsync",
    )  # fmt: skip


def corpus_pin(pin: Path = HERE / "corpus-pin", files: Path = HERE / "corpus-files") -> Corpus:
    """The manifest corpus (corpus-pin: its archive, and each directory's repository, commit, source path
    and content; corpus-files: the files each directory holds)."""
    rows = _rows(pin)
    (archive, sha256), parts = rows[0], rows[1:]
    listed: dict[str, list[str]] = {}
    for directory, path in _rows(files):
        listed.setdefault(directory, []).append(path)
    return Corpus(
        archive,
        sha256,
        tuple(
            CorpusPart(d, repo, commit, src, content, tuple(listed[d]))
            for d, repo, commit, src, content in parts
        ),
    )


# Checks ------------------------------------------------------------------------------------------------


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_archive(path: Path, sha256: str, variable: str) -> None:
    if not path.is_file():
        raise SourceError(f"{path} not found ({variable})")
    got = sha256_of(path)
    if got != sha256:
        raise SourceError(f"{path} has sha256 {got}, not the pinned {sha256}")


def tree_digest(root: Path, paths: tuple[str, ...]) -> str:
    """The sha256 git tree of `paths` under `root`: git's own content address (names, modes, bytes), so a
    fetched checkout and an extracted archive of the same files give the same sum."""
    with tempfile.TemporaryDirectory() as index:
        env = {**os.environ, "GIT_DIR": index, "GIT_WORK_TREE": str(root)}
        _git(["init", "--quiet", "--bare", "--object-format=sha256", index], env=None)
        _git(["-c", "core.autocrlf=false", "add", "--force", "--", *paths], env=env)
        return _git(["write-tree"], env=env).strip()


def _run_git(
    args: list[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    timeout: float | None = None,
) -> subprocess.CompletedProcess[str]:
    """`git ARGS`, never asking for credentials (a repository that wants them fails instead)."""
    return subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**(env or os.environ), "GIT_TERMINAL_PROMPT": "0"},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def _git(args: list[str], env: Mapping[str, str] | None, cwd: Path | None = None) -> str:
    done = _run_git(args, env, cwd)
    if done.returncode != 0:
        raise SourceError(f"git {' '.join(args[:3])} failed: {done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


def fetch_commit(repository: str, commit: str, dest: Path) -> None:
    """The tree of `commit` of `repository` in `dest` (no .git left), the commit checked."""
    if shutil.which("git") is None:
        raise SourceError("git is needed to fetch from a repository")
    dest.mkdir(parents=True)
    _git(["init", "--quiet"], env=None, cwd=dest)
    _git(["fetch", "--quiet", "--depth", "1", repository, commit], env=None, cwd=dest)
    _git(["checkout", "--quiet", "FETCH_HEAD"], env=None, cwd=dest)
    got = _git(["rev-parse", "HEAD"], env=None, cwd=dest).strip()
    if got != commit:
        raise SourceError(f"{repository} gave commit {got}, not the pinned {commit}")
    shutil.rmtree(dest / ".git")


def check_content(root: Path, paths: tuple[str, ...], content: str, what: str) -> None:
    got = tree_digest(root, paths)
    if got != content:
        raise SourceError(f"{what}: the fetched content has sha256 tree {got}, not the pinned {content}")


def _publish(build: Callable[[Path], None], out: Path) -> Path:
    """`build` into a scratch directory beside `out`, then moved to `out` whole (never half-written)."""
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=out.name + ".partial.", dir=out.parent))
    try:
        build(scratch / "tree")
        (scratch / "tree").rename(out)
    except FileExistsError:  # another build published it first
        pass
    except OSError as error:
        if not out.is_dir():
            raise SourceError(f"cannot write {out}: {error}") from error
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return out


# The inputs ------------------------------------------------------------------------------------------------


def source_into(source: Source, dest: Path, environ: Mapping[str, str] = os.environ) -> str:
    """`source`'s tree in `dest` (made here); says where it came from."""
    archive = source.archive_given(environ)
    if archive is not None:
        check_archive(archive, source.sha256, source.variable)
        dest.mkdir(parents=True)
        # The archive's one top-level directory dropped.
        tar = ["tar", "-xaf", str(archive), "-C", str(dest), "--strip-components=1"]
        done = subprocess.run(tar, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            raise SourceError(f"cannot extract {archive}: {done.stderr.strip()}")
        return f"from {archive}"
    fetched = source.fetched()
    if not fetched.is_dir():
        _publish(lambda tree: _fetch_source(source, tree), fetched)
    shutil.copytree(fetched, dest, symlinks=True)
    return f"from {source.repository} at {source.commit} (kept in {fetched})"


def _fetch_source(source: Source, tree: Path) -> None:
    print(f"fetching {source.name} from {source.repository} at {source.commit}", file=sys.stderr)
    try:
        fetch_commit(source.repository, source.commit, tree)
    except SourceError as error:
        raise SourceError(f"{source.name}: {error}; or {source.provide()}") from error
    check_content(tree, source.paths, source.content, source.name)
    if source.paths != (".",):  # only what an archive holds is kept
        for entry in tree.iterdir():
            if entry.name not in source.paths:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def corpus_directory(environ: Mapping[str, str] = os.environ, corpus: Corpus | None = None) -> Path:
    """The corpus's directory (its seven repositories' directories inside), extracted or fetched once."""
    corpus = corpus or corpus_pin()
    archive = corpus.archive_given(environ)
    if archive is not None:
        check_archive(archive, corpus.sha256, corpus.variable)

        def extract(tree: Path) -> None:
            with tarfile.open(archive) as tar:
                tar.extractall(tree, filter="data")

        return _publish(extract, corpus.extracted()) / corpus.top
    return _publish(lambda tree: _fetch_corpus(corpus, tree), corpus.fetched()) / corpus.top


def _fetch_corpus(corpus: Corpus, tree: Path) -> None:
    for part in corpus.parts:
        with tempfile.TemporaryDirectory() as scratch:
            checkout = Path(scratch) / "checkout"
            print(
                f"fetching the corpus's {part.directory} from {part.repository} at {part.commit}",
                file=sys.stderr,
            )
            try:
                fetch_commit(part.repository, part.commit, checkout)
            except SourceError as error:
                raise SourceError(f"the manifest corpus: {error}; or {corpus.provide()}") from error
            target = tree / corpus.top / part.directory
            for path in part.files:
                origin = checkout / path if path in LICENCES else checkout / part.source_path / path
                (target / path).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(origin, target / path)  # the bytes, as the archive holds them (no modes)
            check_content(target, (".",), part.content, f"the corpus's {part.directory}")


# The preflight -------------------------------------------------------------------------------------------


def answers(repository: str) -> str | None:
    """None when `repository` answers a `git ls-remote`, else why not (git's last line of error)."""
    try:
        done = _run_git(["ls-remote", "--heads", repository], timeout=ANSWER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return f"{repository}: no answer within {ANSWER_TIMEOUT_S} s"
    except OSError as error:  # no git
        return str(error)
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines() or [f"exit status {done.returncode}"]
        return lines[-1].removeprefix("fatal: ")
    return None


def needed(purpose: str) -> list[Source | Corpus]:
    """What `make run` (every tested Config Sync release and git-sync: `binaries` builds them) and `make
    test` (the corpus too) need."""
    configsync = configsync_sources()
    inputs: list[Source | Corpus] = [configsync[v] for v in built_configsync_versions()]
    inputs.append(gitsync_source())
    return [*inputs, corpus_pin()] if purpose == "test" else inputs


def problems(
    inputs: list[Source | Corpus], environ: Mapping[str, str], ask: Callable[[str], str | None]
) -> list[str]:
    """One line per input that cannot be had: no good archive, no copy fetched before, and its repository
    not answering. Each repository is asked once."""
    said = []
    wanted = [pinned for pinned in inputs if not _at_hand(pinned, environ)]
    repositories = {r for pinned in wanted for r in pinned.repositories()}
    with ThreadPoolExecutor(max_workers=max(1, len(repositories))) as pool:  # at most one timeout's wait
        asked = dict(zip(repositories, pool.map(ask, repositories), strict=True))
    for pinned in inputs:
        archive = pinned.archive_given(environ)
        if archive is not None:
            try:
                check_archive(archive, pinned.sha256, pinned.variable)
            except SourceError as error:
                said.append(f"{error}: {pinned.provide()}")
            continue
        if pinned.fetched().is_dir():
            continue
        why = next((asked[r] for r in pinned.repositories() if asked[r] is not None), None)
        if why is not None:
            said.append(
                f"{pinned.name}: no {pinned.archive} in {pinned.variable} or {SHARED / pinned.shared}, "
                f"and it cannot be fetched ({why}): {pinned.provide()}"
            )
    return said


def _at_hand(pinned: Source | Corpus, environ: Mapping[str, str]) -> bool:
    return pinned.archive_given(environ) is not None or pinned.fetched().is_dir()


def main(argv: list[str]) -> int:
    try:
        if argv[:1] == ["source"] and len(argv) == 4:
            kind, version, dest = argv[1:]
            pinned = {(s.kind, s.version): s for s in [*configsync_sources().values(), gitsync_source()]}
            source = pinned.get((kind, version))
            if source is None:
                raise SourceError(f"{kind} {version} is not pinned")
            print(f"{source.name}: {source_into(source, Path(dest))}", file=sys.stderr)
            return 0
        if argv == ["corpus"]:
            print(corpus_directory())
            return 0
    except SourceError as error:
        print(f"sources: {error}", file=sys.stderr)
        return 1
    print("usage: sources.py source configsync|git-sync VERSION DEST | sources.py corpus", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
