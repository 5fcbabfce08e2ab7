"""Where the pinned sources and the manifest corpus come from (controlplane/sources.py): the pins as read,
the sums they are checked against, and what the preflight says when one can be had from nowhere. The
fetch itself, from a git server, is in tests/integration/test_sources.py."""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from controlplane import sources
from controlplane.sources import (
    Source,
    SourceError,
    check_archive,
    configsync_sources,
    corpus_pin,
    gitsync_source,
    problems,
    tree_digest,
)

UNREACHABLE = "Could not resolve host: github.com"


@pytest.fixture(autouse=True)
def nothing_beside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No ../shared and an empty cache, as on a newcomer's machine."""
    monkeypatch.setattr(sources, "SHARED", tmp_path / "no-shared")
    monkeypatch.setattr(sources, "CACHE", tmp_path / "cache")


def test_the_pins_name_each_sources_commit_archive_and_both_sums() -> None:
    pinned = configsync_sources()
    assert sorted(pinned) == ["v1.22.0", "v1.24.3", "v1.25.0"]
    v125 = pinned["v1.25.0"]
    # As ../shared/configsync/README.md gives them.
    assert v125.commit == "4e6e21b841548cbcb2a08c89dcc816c2c97bb653"
    assert v125.sha256 == "c3060d2be09819e2972224454e11fa6d6ddea583ad8ca50f0b07c75a2c657711"
    assert v125.archive == "configsync-v1.25.0-src.tar.xz"
    assert v125.variable == "OBJCOUNT_CONFIGSYNC_ARCHIVES"
    assert sources.built_configsync_versions() == ["v1.25.0"]
    git_sync = gitsync_source()
    assert (git_sync.name, git_sync.commit) == ("git-sync v4.4.2", "534976a97c3b40e9925fc2d8b93d324f25598729")
    assert git_sync.paths == (".",)
    for source in [*pinned.values(), git_sync]:
        assert len(source.content) == 64
        assert source.content != source.sha256


def test_the_corpus_pin_lists_seven_directories_and_every_file_of_the_archive() -> None:
    corpus = corpus_pin()
    assert corpus.sha256 == "0199f89c77d4236642478716f5e4e9d6393dac07aeb0b8a8761ee3f0229d032e"
    assert [p.directory for p in corpus.parts] == [
        "argo-cd-manifests",
        "cert-manager-crds",
        "config-sync-e2e-testdata",
        "gatekeeper-library",
        "ingress-nginx-static",
        "kubernetes-examples",
        "prometheus-operator-example",
    ]
    # The corpus's README: 1,037 manifest files, and each directory's LICENSE (NOTICE for two).
    assert sum(len(p.files) for p in corpus.parts) == 1037 + 7 + 2
    assert all("LICENSE" in p.files for p in corpus.parts)
    by_directory = {p.directory: p for p in corpus.parts}
    assert len(by_directory["gatekeeper-library"].files) == 436 + 2
    assert by_directory["config-sync-e2e-testdata"].source_path == "e2e/testdata"


def git(cwd: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.invalid"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.invalid"}
    return subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True).stdout


def test_the_content_sum_is_the_tree_git_itself_records_in_a_sha256_repository(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "pkg").mkdir(parents=True)
    (tree / "go.mod").write_text("module example.com/x\n")
    (tree / "pkg" / "a.go").write_text("package pkg\n")
    (tree / "run.sh").write_text("#!/bin/sh\n")
    (tree / "run.sh").chmod(0o755)
    (tree / "left-out.txt").write_text("not one of the paths\n")
    git(tree, "init", "--quiet", "--object-format=sha256")
    git(tree, "add", "go.mod", "pkg", "run.sh")
    git(tree, "commit", "--quiet", "-m", "x")
    recorded = git(tree, "rev-parse", "HEAD^{tree}").strip()
    assert tree_digest(tree, ("go.mod", "pkg", "run.sh")) == recorded
    (tree / "run.sh").chmod(0o644)
    assert tree_digest(tree, ("go.mod", "pkg", "run.sh")) != recorded, "the mode is part of the content"


def test_an_archive_is_checked_against_its_sha256(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar.xz"
    archive.write_bytes(b"not the pinned bytes")
    pinned = hashlib.sha256(b"the pinned bytes").hexdigest()
    with pytest.raises(SourceError, match=f"has sha256 .*, not the pinned {pinned}"):
        check_archive(archive, pinned, "OBJCOUNT_X")
    with pytest.raises(SourceError, match=r"not found \(OBJCOUNT_X\)"):
        check_archive(tmp_path / "absent.tar.xz", pinned, "OBJCOUNT_X")
    check_archive(archive, hashlib.sha256(b"not the pinned bytes").hexdigest(), "OBJCOUNT_X")


def test_with_nothing_to_fetch_from_each_input_names_its_archive_and_variable() -> None:
    asked: list[str] = []

    def ask(repository: str) -> str | None:
        asked.append(repository)
        return UNREACHABLE

    said = problems(sources.needed("test"), {}, ask)
    assert len(said) == 3, said
    for archive, variable in [
        ("configsync-v1.25.0-src.tar.xz", "OBJCOUNT_CONFIGSYNC_ARCHIVES"),
        ("git-sync-v4.4.2-src.tar.xz", "OBJCOUNT_GITSYNC_ARCHIVES"),
        ("manifest-corpus-D.tar.xz", "OBJCOUNT_MANIFEST_CORPUS"),
    ]:
        (line,) = [s for s in said if f"put {archive} (sha256 " in s]
        assert f"set {variable} to" in line, line
        assert UNREACHABLE in line, line
    assert sorted(asked) == sorted(set(asked)), "each repository asked once"
    assert len(asked) == 8  # config-sync, git-sync and the corpus's six others
    assert problems(sources.needed("run"), {}, ask)[-1].startswith("git-sync v4.4.2: no git-sync-v4.4.2")


def test_a_repository_that_answers_or_a_copy_fetched_before_is_enough() -> None:
    assert problems(sources.needed("test"), {}, lambda _: None) == []
    git_sync = gitsync_source()
    git_sync.fetched().mkdir(parents=True)
    assert problems([git_sync], {}, lambda _: UNREACHABLE) == []


def test_an_archive_given_is_used_and_a_wrong_or_missing_one_is_said(tmp_path: Path) -> None:
    given = tmp_path / "archives"
    given.mkdir()
    source: Source = gitsync_source()
    environ = {source.variable: str(given)}
    (said,) = problems([source], environ, lambda _: None)
    assert said.startswith(f"{given / source.archive} not found (OBJCOUNT_GITSYNC_ARCHIVES)"), said
    (given / source.archive).write_bytes(b"x")
    (said,) = problems([source], environ, lambda _: None)
    assert f"not the pinned {source.sha256}" in said, said
