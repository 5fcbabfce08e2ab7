"""Source count: what Config Sync's reader makes of each file (the named cases, their expectations
written out and held against Config Sync's own reader by tests/integration/test_config_sync_reader.py),
the reconciler's listing, the fast path against the full decoding, and files we do not read."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.seed import configmaps_yaml, write_commit
from inventory.core.go_decoding import GoDecodeError, decode_yaml
from inventory.core.manifest_reader import CRASH, _fast_yaml, _tree_path_steps, path_steps_of, read_manifest
from inventory.core.tally import Untallied
from inventory.source.source_count import (
    SourceError,
    Unread,
    count_directory,
    quiet_rapidyaml,
    read_file,
)
from inventory.source.source_watch import SourceLayout, SourceWatcher, count_source
from tests.manifest_cases import CM, CRD_WITH_EQUALS, NAMED_CASES, fragment_files, yaml_files


@pytest.mark.parametrize("name", sorted(NAMED_CASES))
def test_named_case(name: str) -> None:
    case = NAMED_CASES[name]
    with quiet_rapidyaml():
        read = read_manifest(case.text.encode(), case.file)
    assert (dict(read.kinds), tuple(p.code for p in read.rejected)) == (case.kinds, case.codes)
    assert read.unread is None
    assert all(p.message.startswith(f"{case.file}: ") for p in read.rejected), "each error names its file"


def test_a_status_that_is_not_a_mapping_is_config_syncs_crash_not_a_count() -> None:
    # Config Sync's reader panics here (reader.go: a type assertion on the status), so it syncs nothing.
    read = read_manifest((CM + "status: Active\n").encode(), "a.yaml")
    assert (dict(read.kinds), [p.code for p in read.rejected]) == ({}, [CRASH])


def test_deep_nesting_is_counted_and_beyond_our_reach_is_unread_not_rejected() -> None:
    deep = CM + "data:\n  x: " + "[" * 5000 + "]" * 5000 + "\n"
    assert read_manifest(deep.encode(), "deep.yaml").kinds == {"ConfigMap": 1}  # go-yaml allows 10,000
    deep = deep.replace("x: ", "x: &anchor ")  # an anchor: only the full decoding can tell, recursively
    read = read_manifest(deep.encode(), "deep.yaml")
    assert read.rejected == ()
    assert read.unread is not None
    assert "deep.yaml" in read.unread


def _relevant(value: Any) -> Any:
    """What the reader reads of an object: the text of `apiVersion`, `kind`, `metadata.name` and the
    local-config annotation, the type of any other value (a string's text is not compared: only that
    it is a string matters)."""
    if not isinstance(value, dict):
        return value
    keep = {
        k: _shape(v) for k, v in value.items() if k.lower() in ("apiversion", "kind", "metadata", "items")
    }
    for exact in ("apiVersion", "kind"):
        if isinstance(value.get(exact), str):
            keep[exact] = value[exact]
    metadata = value.get("metadata")
    if isinstance(metadata, dict):
        metadata = {k: v for k, v in metadata.items() if k in ("name", "annotations", "labels")}
        keep["metadata"] = {
            **_shape(metadata),
            **{k: metadata[k] for k in ("name",) if isinstance(metadata.get(k), str)},
        }
        annotations = metadata.get("annotations")
        local = (
            annotations.get("config.kubernetes.io/local-config") if isinstance(annotations, dict) else None
        )
        if isinstance(local, str):
            keep["metadata"]["local"] = local
    if isinstance(value.get("items"), list):
        # An item that is not an object is read as such, whatever its text (as the docstring says).
        keep["items"] = [_relevant(i) if isinstance(i, dict) else _shape(i) for i in value["items"]]
    if "status" in value:
        keep["status"] = bool(value["status"]) if isinstance(value["status"], dict) else value["status"]
    return keep


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return "<string>" if isinstance(value, str) else value


def test_an_explicit_key_is_left_to_the_full_decoding() -> None:
    """Found by the property below: `? ::` is a key that is itself a mapping ({":": null}), which go-yaml
    refuses, while rapidyaml read a plain key; a `?` inside a value keeps the fast path."""
    with quiet_rapidyaml():
        assert _fast_yaml(b"\n? ::\t") is None
        assert _fast_yaml(b"\n{? a: b}") is None
        assert _fast_yaml(b'\nkind: ConfigMap\ndata: {url: "a?b", q: x?}') is not None
    with pytest.raises(GoDecodeError):
        decode_yaml(b"\n? ::\t")


@settings(
    max_examples=int(os.environ.get("OBJCOUNT_FUZZ_EXAMPLES", "1500")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.one_of(yaml_files(), fragment_files))
def test_the_fast_path_agrees_with_the_full_decoding(data: bytes) -> None:
    for piece in (b"\n" + data).split(b"\n---"):
        with quiet_rapidyaml():
            read = _fast_yaml(piece)
        if read is None:
            continue
        fast, tree = read
        try:
            full = decode_yaml(piece)
        except GoDecodeError as error:
            raise AssertionError(f"the fast path read {piece!r}, which go-yaml rejects: {error}") from None
        steps = _tree_path_steps(tree)
        assert steps >= path_steps_of(full), "rapidyaml counts a duplicate key the decoding keeps once"
        fast_status = fast.pop("status", None)
        assert _relevant(fast) == {k: v for k, v in _relevant(full).items() if k != "status"}
        assert (bool(fast_status) if isinstance(fast_status, dict) else fast_status) == _relevant(full).get(
            "status"
        )


def test_counts_through_the_rev_link_and_prefers_hydrated_output(tmp_path: Path) -> None:
    write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(4)}, sync_dir="config")
    layout = SourceLayout(tmp_path, "config")
    assert (count_source(layout).objects, count_source(layout).commit) == (4, "c1")
    hydrated = tmp_path / "hydrated" / "h1" / "config"
    hydrated.mkdir(parents=True)
    (hydrated / "all.yaml").write_text(configmaps_yaml(11))
    os.symlink(tmp_path / "hydrated" / "h1", tmp_path / "hydrated" / "rev")
    assert (count_source(layout).objects, count_source(layout).commit) == (11, "h1")


def test_missing_source_is_an_error_not_zero(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="exists"):
        count_source(SourceLayout(tmp_path, "config"))


HELM_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
  labels: { {{ .Values.labels }} }
data:
  items: [ [a], {b: c} ]
"""


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=fragment_files)
def test_nothing_is_printed_to_stderr_by_the_parsers(
    data: bytes, capfd: pytest.CaptureFixture[str], tmp_path_factory: pytest.TempPathFactory
) -> None:
    # rapidyaml prints its C++ parse errors to the process's stderr, where our JSON logs go.
    directory = tmp_path_factory.mktemp("stderr")
    for i, text in enumerate((data, HELM_TEMPLATE.encode(), b"  apiVersion: v\n---\n")):
        (directory / f"{i}.yaml").write_bytes(text)
    count_directory(directory)
    assert capfd.readouterr().err == ""


# ----- the reconciler's listing -----------------------------------------------------------------------------
def test_files_are_listed_as_the_reconciler_lists_them(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(configmaps_yaml(3))
    (tmp_path / "nested" / "deeper").mkdir(parents=True)
    (tmp_path / "nested" / "deeper" / "b.yml").write_text(configmaps_yaml(2))
    (tmp_path / "nested" / "c.json").write_text(
        '{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}'
    )
    (tmp_path / "README.md").write_text("kind: ConfigMap\napiVersion: v1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.yaml").write_text(configmaps_yaml(5))  # read: only .git is skipped
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "e.yaml").write_text(configmaps_yaml(7))
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / ".github" / "workflows" / "ci.yaml").write_text("on: push\n")  # the reader skips it
    result = count_directory(tmp_path)
    assert (result.objects, result.files) == (3 + 2 + 1 + 5, 4)
    assert result.kinds == {"ConfigMap": 10, "Secret": 1}
    holding = ["a.yaml", "nested/deeper/b.yml", "nested/c.json", ".hidden/d.yaml"]
    assert result.bytes == sum((tmp_path / p).stat().st_size for p in holding)
    assert (result.rejected, result.unread) == ((), ())


def test_files_without_objects_add_no_bytes(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CM)
    (tmp_path / "notes.yaml").write_text("# only a comment\n")
    assert count_directory(tmp_path).bytes == len(CM)


def test_a_rejected_file_is_reported_and_the_others_still_counted(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(configmaps_yaml(3))
    (tmp_path / "b.yaml").write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n")
    result = count_directory(tmp_path)
    assert result.objects == 3
    assert [(p.code, p.message.split(":")[0]) for p in result.rejected] == [("KNV2010", "b.yaml")]


def test_a_broken_link_fails_the_listing_as_it_fails_the_reconcilers(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(configmaps_yaml(3))
    (tmp_path / "b.yaml").symlink_to("missing.yaml")
    result = count_directory(tmp_path)
    assert result.objects == 0
    assert [p.code for p in result.rejected] == ["KNV2001"]
    assert "b.yaml" in result.rejected[0].message


def test_a_link_is_read_where_it_points_by_its_targets_suffix(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "b.txt").write_text(configmaps_yaml(2))
    (tmp_path / "shared" / "c.yaml").write_text(configmaps_yaml(4))
    (tmp_path / "b.yaml").symlink_to("shared/b.txt")  # a .txt target: not a manifest to the reconciler
    (tmp_path / "c.txt").symlink_to("shared/c.yaml")  # read a second time, as the reconciler does
    assert count_directory(tmp_path).objects == 4 + 4


def test_a_source_directory_that_disappears_keeps_the_last_good_count(tmp_path: Path) -> None:
    commit = write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(7)}, sync_dir="config")
    counts: list[int] = []
    watcher = SourceWatcher(
        SourceLayout(tmp_path, "config"),
        lambda c: counts.append(c.objects),
        clock=lambda: 0.0,
        tally=Untallied(),
    )
    previous = watcher.poll_once(None)
    assert counts == [7]
    shutil.rmtree(commit)  # the checkout vanishes under the link
    watcher.poll_once((tmp_path, tmp_path))  # another link than the one counted: counted again
    assert counts == [7], "no count is reported for a missing directory"
    assert watcher.last_error is not None
    assert "does not exist" in watcher.last_error
    write_commit(tmp_path, "c2", {"a.yaml": configmaps_yaml(3)}, sync_dir="config")
    watcher.poll_once(previous)
    assert counts == [7, 3]
    assert watcher.last_error is None


def test_a_moved_link_is_told_with_its_commit_before_that_commit_is_counted(tmp_path: Path) -> None:
    """The reconciler may parse a new commit while we count it: the commit is told as soon as the link
    names it, then its count; an unmoved link tells nothing again."""
    write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(2)}, sync_dir="config")
    told: list[tuple[str, str]] = []
    watcher = SourceWatcher(
        SourceLayout(tmp_path, "config"),
        lambda c: told.append(("counted", c.commit)),
        on_linked=lambda commit: told.append(("linked", commit)),
        tally=Untallied(),
    )
    previous = watcher.poll_once(None)
    assert watcher.poll_once(previous) == previous
    write_commit(tmp_path, "c2", {"a.yaml": configmaps_yaml(5)}, sync_dir="config")
    watcher.poll_once(previous)
    assert told == [("linked", "c1"), ("counted", "c1"), ("linked", "c2"), ("counted", "c2")]


# ----- files we do not read: their objects are unknown, the rest is still counted ----------------------------
def _commit_with(tmp_path: Path, make: Any) -> SourceLayout:
    commit = write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(3)}, sync_dir="config")
    make(commit / "config")
    return SourceLayout(tmp_path, "config")


@pytest.mark.timeout(10)
def test_a_link_to_a_fifo_is_unread_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    count = count_source(_commit_with(tmp_path, lambda config: (config / "b.yaml").symlink_to(fifo)))
    assert count.objects == 3
    assert [u.split(": ", 1)[0] for u in count.unread] == [str(fifo)]  # named where the link points
    assert "a symbolic link out of the commit" in count.unread[0]


@pytest.mark.timeout(10)
def test_a_fifo_inside_the_commit_is_unread_not_a_hang(tmp_path: Path) -> None:
    count = count_source(_commit_with(tmp_path, lambda config: os.mkfifo(config / "b.yaml")))
    assert (count.objects, count.rejected) == (3, ())
    assert count.unread == ("config/b.yaml: not a regular file (a FIFO, device or socket): not read",)


def test_a_link_out_of_the_commit_is_unread(tmp_path: Path) -> None:
    outside = tmp_path / "outside.yaml"
    outside.write_text(configmaps_yaml(5))
    count = count_source(_commit_with(tmp_path, lambda config: (config / "z.yaml").symlink_to(outside)))
    assert count.objects == 3
    assert count.unread == (f"{outside}: a symbolic link out of the commit ({outside}): not read",)


def test_a_link_to_a_device_is_not_read_by_the_reconciler_either(tmp_path: Path) -> None:
    # The reconciler reads a link's target by the target's suffix: /dev/zero is no manifest to it.
    count = count_source(_commit_with(tmp_path, lambda config: (config / "z.yaml").symlink_to("/dev/zero")))
    assert (count.objects, count.files, count.unread, count.rejected) == (3, 1, (), ())


def test_a_directory_named_like_a_manifest_through_a_link_is_rejected(tmp_path: Path) -> None:
    # The reconciler reads the link's target as a file and fails: "is a directory".
    def link(config: Path) -> None:
        (config / "d.yaml").mkdir()
        (config / "e.yaml").symlink_to("d.yaml")

    count = count_source(_commit_with(tmp_path, link))
    assert [p.code for p in count.rejected] == ["KNV2001"]
    assert "is a directory" in count.rejected[0].message


def test_a_file_over_the_cap_is_refused_not_read(tmp_path: Path) -> None:
    data = configmaps_yaml(1).encode()
    path = tmp_path / "a.yaml"
    path.write_bytes(data)
    assert read_file(path, tmp_path, "a.yaml", max_bytes=len(data)) == data
    with pytest.raises(Unread, match=rf"a.yaml: {len(data)} bytes, over the {len(data) - 1}-byte limit"):
        read_file(path, tmp_path, "a.yaml", max_bytes=len(data) - 1)


def test_an_unexpected_error_keeps_the_watcher_alive_with_the_last_good_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(4)}, sync_dir="config")
    counts: list[int] = []
    watcher = SourceWatcher(
        SourceLayout(tmp_path, "config"), lambda c: counts.append(c.objects), tally=Untallied()
    )
    previous = watcher.poll_once(None)
    assert counts == [4]

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("inventory.source.source_watch.count_source", crash)
    write_commit(tmp_path, "c2", {"a.yaml": configmaps_yaml(9)}, sync_dir="config")
    watcher.interval = 0.01
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while watcher.last_error is None and time.monotonic() < deadline:
            watcher.stopping.wait(0.01)
        assert watcher.last_error == "crashed: RuntimeError('a bug')"
        assert watcher.alive
        assert counts == [4], "the last good count stands"
        monkeypatch.undo()
        watcher.retry_interval = 0.0
        deadline = time.monotonic() + 10
        while counts == [4] and time.monotonic() < deadline:
            watcher.stopping.wait(0.01)
        assert counts == [4, 9]
    finally:
        watcher.stop()
    assert previous is not None


def test_other_writes_to_stderr_during_a_parse_are_passed_through(capfd: pytest.CaptureFixture[str]) -> None:
    with quiet_rapidyaml():
        os.write(2, b'{"message": "another thread logged this"}\n')
        os.write(2, b"line=2 col=1 (16B): ERROR: [parse] parse error: incorrect indentation?\n")
    assert capfd.readouterr().err == '{"message": "another thread logged this"}\n'


def test_the_path_steps_of_custom_resource_definitions_are_counted_apart() -> None:
    read = read_manifest((CM + "---\n" + CRD_WITH_EQUALS).encode(), "a.yaml")
    assert read.kinds == {"ConfigMap": 1, "CustomResourceDefinition": 1}
    # Counted by hand, each field at its depth: apiVersion, kind, metadata, spec 1 each; name, versions
    # 2; the versions item 3; schema 4; openAPIV3Schema 5; properties 6; matchType 7; enum, type 8 each;
    # enum's four items 9 each: 4 + 4 + 3 + 4 + 5 + 6 + 7 + 16 + 36 = 85.
    assert read.crd_path_steps == 85
    # The same document through the full decoding (an anchor sends it there) counts the same.
    anchored = CRD_WITH_EQUALS.replace("type: string", "type: &t string")
    assert read_manifest(anchored.encode(), "b.yaml").crd_path_steps == 85
    listed = "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n"
    assert read_manifest(listed.encode(), "l.yaml").crd_path_steps == 0


def test_the_path_steps_of_objects_with_a_pod_template_are_counted_apart() -> None:
    deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\nspec:\n  replicas: 0\n"
    read = read_manifest((CM + "---\n" + deployment + "---\n" + CRD_WITH_EQUALS).encode(), "a.yaml")
    # By hand: apiVersion, kind, metadata, spec 1 each; name, replicas 2 each: 8. The ConfigMap's fields
    # are not counted, the CRD's are its own (85, as above).
    assert (read.workload_path_steps, read.crd_path_steps) == (8, 85)
    anchored = deployment.replace("replicas: 0", "replicas: &r 0")  # the full decoding counts the same
    assert read_manifest(anchored.encode(), "b.yaml").workload_path_steps == 8


def test_a_commits_counts_carry_every_input_of_the_model(tmp_path: Path) -> None:
    # The replay once dropped the Pod templates' path steps here, so its sizes took the 360 steps assumed
    # of an unread template: every input the model reads of a commit is carried, by hand as above.
    deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: a\nspec:\n  replicas: 0\n"
    text = CM + "---\n" + deployment + "---\n" + CRD_WITH_EQUALS
    (tmp_path / "a.yaml").write_text(text)
    counts = count_directory(tmp_path).object_counts(commit="c1")
    kib = -(-len(text.encode()) // 1024)
    assert (counts.source, counts.source_kib, counts.source_commit) == (3, kib, "c1")
    assert not counts.source_partial
    assert dict(counts.source_kinds or ()) == {"ConfigMap": 1, "Deployment": 1, "CustomResourceDefinition": 1}
    assert (counts.source_workload_path_steps, counts.source_crd_path_steps) == (8, 85)


@pytest.mark.parametrize("kind", ["[1]", "&c [1]", "{a: 1}", "&m {a: 1}"])
def test_a_kind_that_is_not_a_string_is_rejected_as_config_sync_does_not_a_crash(kind: str) -> None:
    # Found by the differential test (CI, 2026-12-04): a list where the kind belongs was looked up in a
    # set of kinds. Config Sync's decoder cannot unmarshal it into the kind's string: KNV2001.
    read = read_manifest(f"apiVersion: v1\nkind: {kind}\nmetadata: {{name: a}}\n".encode(), "a.yaml")
    assert [problem.code for problem in read.rejected] == ["KNV2001"]
    assert (read.kinds, read.workload_path_steps, read.crd_path_steps) == ({}, 0, 0)
