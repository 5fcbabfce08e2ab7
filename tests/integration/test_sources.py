"""The pinned sources and the manifest corpus fetched from a git server (controlplane/sources.py): a real
`git daemon` on loopback serves a project whose pinned commit is behind its tip, as a release tag is behind
a public repository's main branch. And a fresh copy of this repository with nothing beside it and no
network stops before any build, naming each archive to provide and the variable that points to it."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane import sources
from controlplane.ports import free_port
from controlplane.process import Process
from controlplane.seed import REPO_ROOT
from controlplane.sources import Corpus, CorpusPart, Source, SourceError, corpus_directory, source_into
from tests.helpers import wait_for

FILES = {
    "go.mod": "module example.com/project\n",
    "LICENSE": "Apache License 2.0\n",
    "cmd/main.go": "package main\n\nfunc main() {}\n",
    "vendor/modules.txt": "# example.com/dep v1.0.0\n",
    "docs/guide.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guide\n",
}
PATHS = ("go.mod", "LICENSE", "cmd", "vendor")  # what its archive would hold (not docs/)


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "upstream", "GIT_AUTHOR_EMAIL": "upstream@example.invalid"}
    env |= {"GIT_COMMITTER_NAME": "upstream", "GIT_COMMITTER_EMAIL": "upstream@example.invalid"}
    done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def recorded_tree(tmp: Path, files: dict[str, str]) -> str:
    """The tree git records for `files` in a sha256 repository of their own: the pin, worked out apart."""
    tmp.mkdir()
    git(tmp, "init", "--quiet", "--object-format=sha256")
    write(tmp, files)
    git(tmp, "add", "--all")
    git(tmp, "commit", "--quiet", "-m", "pin")
    return git(tmp, "rev-parse", "HEAD^{tree}")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str, Process]]:
    """`git://127.0.0.1:PORT/project` (its pinned commit, then one more on top) and the daemon serving it."""
    monkeypatch.setattr(sources, "SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(sources, "CACHE", tmp_path / "cache")
    project = tmp_path / "served" / "project"
    project.mkdir(parents=True)
    git(project, "init", "--quiet", "--initial-branch=main")
    write(project, FILES)
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "-m", "v1")
    pinned = git(project, "rev-parse", "HEAD")
    write(project, {"go.mod": "module example.com/project\n\ngo 1.99\n"})
    git(project, "commit", "--quiet", "--all", "-m", "after v1")
    port = free_port()
    daemon = Process(
        "git-daemon",
        ["git", "daemon", "--reuseaddr", "--export-all", f"--base-path={tmp_path / 'served'}",
         "--listen=127.0.0.1", f"--port={port}", "--informative-errors", str(tmp_path / "served")],
        tmp_path / "git-daemon.log",
    )  # fmt: skip
    daemon.start()
    wait_for(lambda: listening(port) or not daemon.running(), timeout=20, what="git daemon listening")
    assert daemon.running(), daemon.log_tail()
    yield f"git://127.0.0.1:{port}/project", pinned, daemon
    daemon.stop()


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


def project_source(repository: str, commit: str, content: str) -> Source:
    return Source(
        "Project v1", "project", "v1", commit, repository, "project-v1-src.tar.xz", "0" * 64, content, PATHS,
        "OBJCOUNT_PROJECT_ARCHIVES", "project",
    )  # fmt: skip


def test_a_source_is_fetched_at_its_pinned_commit_checked_and_kept(
    served: tuple[str, str, Process], tmp_path: Path
) -> None:
    repository, pinned, daemon = served
    content = recorded_tree(tmp_path / "apart", {k: v for k, v in FILES.items() if not k.startswith("docs/")})
    source = project_source(repository, pinned, content)
    said = source_into(source, tmp_path / "first", environ={})
    assert said.startswith(f"from {repository} at {pinned}"), said
    assert (tmp_path / "first" / "go.mod").read_text() == FILES["go.mod"], "the pinned commit, not the tip"
    assert (tmp_path / "first" / "cmd" / "main.go").read_text() == FILES["cmd/main.go"]
    assert not (tmp_path / "first" / "docs").exists(), "only what the archive holds is kept"
    assert not (tmp_path / "first" / ".git").exists()
    daemon.stop()
    source_into(source, tmp_path / "again", environ={})  # the copy fetched before: no server needed
    assert (tmp_path / "again" / "vendor" / "modules.txt").read_text() == FILES["vendor/modules.txt"]


def test_a_fetch_whose_content_is_not_the_pinned_one_is_refused_and_not_kept(
    served: tuple[str, str, Process], tmp_path: Path
) -> None:
    repository, pinned, _ = served
    other = recorded_tree(tmp_path / "apart", {"go.mod": "module example.com/other\n"})
    source = project_source(repository, pinned, other)
    with pytest.raises(
        SourceError, match=f"Project v1: the fetched content has sha256 tree .*, not the pinned {other}"
    ):
        source_into(source, tmp_path / "dest", environ={})
    assert not source.fetched().exists()
    assert list((tmp_path / "cache").iterdir()) == [], "no scratch left behind"


def test_a_commit_the_server_does_not_have_says_which_archive_to_give(
    served: tuple[str, str, Process], tmp_path: Path
) -> None:
    repository, _, _ = served
    source = project_source(repository, "1" * 40, "0" * 64)
    with pytest.raises(SourceError) as raised:
        source_into(source, tmp_path / "dest", environ={})
    said = str(raised.value)
    assert said.startswith("Project v1: git fetch"), said
    assert "put project-v1-src.tar.xz (sha256 " in said, said
    assert "set OBJCOUNT_PROJECT_ARCHIVES to it" in said, said


def test_the_corpus_is_fetched_file_by_file_from_each_repositorys_source_path(
    served: tuple[str, str, Process], tmp_path: Path
) -> None:
    repository, pinned, _ = served
    files = {"LICENSE": FILES["LICENSE"], "guide.yaml": FILES["docs/guide.yaml"]}
    content = recorded_tree(tmp_path / "apart", files)
    corpus = Corpus(
        "corpus.tar.xz",
        "0" * 64,
        (CorpusPart("project-docs", repository, pinned, "docs", content, tuple(files)),),
    )
    directory = corpus_directory({}, corpus)
    assert {p.name: p.read_text() for p in (directory / "project-docs").iterdir()} == files
    wrong = Corpus(
        "corpus.tar.xz",
        "0" * 64,
        (CorpusPart("project-docs", repository, pinned, "docs", "0" * 64, tuple(files)),),
    )
    with pytest.raises(SourceError, match="the corpus's project-docs: the fetched content"):
        corpus_directory({}, wrong)


def test_a_fresh_copy_with_nothing_beside_it_stops_before_any_build_naming_each_archive(
    tmp_path: Path,
) -> None:
    """As a newcomer's clone on a machine that cannot reach the public repositories: no ../shared, no
    variable, an empty cache, no network (its own network namespace)."""
    clone = tmp_path / "clone"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True).stdout
    for name in tracked.decode().split("\0"):
        if name and (REPO_ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO_ROOT / name, clone / name)
    assert not (tmp_path / "shared").exists()
    env = {k: v for k, v in os.environ.items() if not k.startswith("OBJCOUNT_")}
    done = subprocess.run(
        ["unshare", "--net", "make", "test"],
        cwd=clone,
        env={**env, "XDG_CACHE_HOME": str(tmp_path / "cache")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    for archive, variable in [
        ("configsync-v1.25.0-src.tar.xz", "OBJCOUNT_CONFIGSYNC_ARCHIVES"),
        ("git-sync-v4.4.2-src.tar.xz", "OBJCOUNT_GITSYNC_ARCHIVES"),
        ("manifest-corpus-D.tar.xz", "OBJCOUNT_MANIFEST_CORPUS"),
    ]:
        (line,) = [s for s in done.stderr.splitlines() if f"put {archive} (sha256 " in s]
        assert line.startswith("doctor: "), line
        assert f"set {variable} to" in line, line
    assert "-m venv" not in done.stdout, done.stdout
    assert not (clone / ".venv").exists()
    assert not (tmp_path / "cache" / "objcount-autoscaler").exists(), "nothing built or fetched"
