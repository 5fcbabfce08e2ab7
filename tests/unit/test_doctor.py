"""The preflight's checks (controlplane/doctor.py) as pure functions: each problem said in one line with
what to do, nothing said where all is well. `make run` without Go, end to end: tests/integration/test_doctor.py."""

from __future__ import annotations

from pathlib import Path

from controlplane.doctor import (
    cgroup_layout,
    check_disk,
    check_go,
    check_python,
    check_registries,
    check_root,
    go_needed,
    go_version,
)


def test_the_go_needed_is_the_highest_go_directive_of_the_modules(tmp_path: Path) -> None:
    mods = []
    for name, directive in (("a", "go 1.24.0"), ("b", "go 1.26.0\ntoolchain go1.26.3"), ("c", "go 1.22.7")):
        mod = tmp_path / name / "go.mod"
        mod.parent.mkdir()
        mod.write_text(f"module example.com/{name}\n\n{directive}\n")
        mods.append(mod)
    assert go_needed(mods) == (1, 26)
    assert go_needed([]) is None


def test_go_missing_old_or_unreadable_is_said_with_what_to_install() -> None:
    assert go_version("go version go1.26.8 linux/amd64") == (1, 26)
    (missing,) = check_go(None, (1, 26))
    assert missing.startswith("no `go` on PATH: install Go 1.26+")
    (old,) = check_go("go version go1.19.8 linux/amd64", (1, 26))
    assert "go is 1.19" in old
    assert "Go 1.26+" in old
    (odd,) = check_go("bash: go: permission denied", (1, 26))
    assert "not a Go version" in odd
    assert check_go("go version go1.26.8 linux/amd64", (1, 26)) == []


def test_python_too_old_or_without_venv_is_said() -> None:
    assert check_python((3, 11), has_ensurepip=True) == []
    assert check_python((3, 9), has_ensurepip=True) == [
        "python3 is 3.9; 3.11+ is needed (Debian 12: apt-get install python3)"
    ]
    assert check_python((3, 11), has_ensurepip=False) == [
        "python3 cannot make a virtualenv (no ensurepip): apt-get install python3-venv"
    ]


def test_root_disk_and_registries() -> None:
    assert check_root(0) == []
    assert "sudo" in check_root(1000)[0]
    assert check_disk(Path("/x"), 30 * 2**30, needed_gib=20) == []
    (short,) = check_disk(Path("/x"), 5 * 2**30, needed_gib=20)
    assert short.startswith("5.0 GiB free under /x; the set-up may need 20 GiB")
    urls = {"PyPI": "https://pypi.example/simple/pip/", "the Go module proxy": "https://proxy.example/x"}
    answers = {urls["PyPI"]: None, urls["the Go module proxy"]: "timed out"}
    assert check_registries(urls, answers.__getitem__) == [
        "the Go module proxy does not answer (https://proxy.example/x: timed out): the build downloads from it"
    ]
    # A registry that answers on its second try is no problem; asked three times at most.
    asked: list[str] = []
    hiccups = iter(["reset", None])
    assert check_registries({"PyPI": "u"}, lambda url: asked.append(url) or next(hiccups)) == []
    assert asked == ["u", "u"]
    asked.clear()
    check_registries({"PyPI": "u"}, lambda url: asked.append(url) or "down")
    assert asked == ["u", "u", "u"]


def test_the_cgroup_layout_is_read_from_its_root(tmp_path: Path) -> None:
    assert cgroup_layout(tmp_path) == "v1"
    (tmp_path / "cgroup.controllers").write_text("cpu memory\n")
    assert cgroup_layout(tmp_path) == "v2"
