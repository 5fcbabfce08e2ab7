"""Source count: the fast path counts exactly what a full YAML load counts."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controlplane.seed import configmaps_yaml, write_commit
from inventory.source_count import (
    SourceError,
    _rapidyaml_errors_kept_off_stderr,
    count_directory,
    count_json,
    count_yaml,
    kinds_json,
    kinds_with_full_loader,
    kinds_yaml,
    read_manifest,
)
from inventory.source_watch import SourceLayout, SourceWatcher, count_source

CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"

CASES = {
    "one": CM,
    "multi-document": CM + "---\n" + CM + "---\n" + CM,
    "leading-separator": "---\n" + CM,
    "empty": "",
    "comments-only": "# nothing here\n# at all\n",
    "empty-documents": "---\n---\n# c\n---\n" + CM + "---\n",
    # Unicode line breaks inside a plain scalar: libyaml folds them (found by the fuzzer below).
    "next-line-in-kind": "apiVersion: '0'\nkind: \x85\n",
    "line-separator-after-kind": "apiVersion: v1\nkind: ConfigMap\u2028\u2029\n",
    "document-end-markers": CM + "...\n---\n" + CM + "...\n",
    "no-kind": "apiVersion: v1\nmetadata: {name: a}\n",
    "no-apiversion": "kind: ConfigMap\n",
    "kind-null": "apiVersion: v1\nkind: null\n",
    "kind-tilde": "apiVersion: v1\nkind: ~\n",
    "kind-empty": "apiVersion: v1\nkind:\n",
    "kind-quoted-null": "apiVersion: v1\nkind: 'null'\n",
    "kind-bool": "apiVersion: v1\nkind: yes\n",
    "kind-quoted-empty": 'apiVersion: v1\nkind: ""\n',
    "apiversion-int": "apiVersion: 1\nkind: Thing\n",
    "apiversion-float": "apiVersion: 1.0\nkind: Thing\n",
    "kind-block-literal": "apiVersion: v1\nkind: |\n  ConfigMap\n",
    "kind-map": "apiVersion: v1\nkind: {a: b}\n",
    "flow-mapping": "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n",
    "quoted-keys": "\"apiVersion\": v1\n'kind': ConfigMap\n",
    "duplicate-kind-last-wins-null": "apiVersion: v1\nkind: ConfigMap\nkind: null\n",
    "duplicate-kind-last-wins-str": "apiVersion: v1\nkind: null\nkind: ConfigMap\n",
    "top-level-sequence": "- " + CM.replace("\n", "\n  ").rstrip() + "\n",
    "top-level-scalar": "just a string\n",
    "list": "apiVersion: v1\nkind: List\nitems:\n- "
    + CM.replace("\n", "\n  ").rstrip()
    + "\n- "
    + CM.replace("\n", "\n  ").rstrip()
    + "\n",
    "list-with-junk-items": "apiVersion: v1\nkind: List\nitems:\n- a\n- {kind: X}\n- {apiVersion: v1, kind: Secret}\n",
    "typed-list": "apiVersion: v1\nkind: ConfigMapList\nitems:\n- {apiVersion: v1, kind: ConfigMap}\n",
    "list-without-items": "apiVersion: v1\nkind: List\n",
    "list-items-not-a-list": "apiVersion: v1\nkind: List\nitems: {a: b}\n",
    "allowlist-object": "apiVersion: example.com/v1\nkind: AllowList\nspec: {}\n",
    "anchors-and-aliases": "apiVersion: &v v1\nkind: ConfigMap\nx: *v\n---\na: &m {apiVersion: v1, kind: S}\n",
    "alias-items": "apiVersion: v1\nkind: List\nx: &i {apiVersion: v1, kind: S}\nitems: [*i, *i]\n",
    "merge-key": "base: &b {apiVersion: v1, kind: ConfigMap}\n---\n<<: {apiVersion: v1, kind: Secret}\n",
    "standard-tag": "apiVersion: !!str v1\nkind: ConfigMap\n",
    "block-scalar-with-dashes": "apiVersion: v1\nkind: ConfigMap\ndata:\n  x: |\n    ---\n    kind: Fake\n",
    "windows-newlines": CM.replace("\n", "\r\n") + "---\r\n" + CM.replace("\n", "\r\n"),
    "unicode": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: caf\u00e9}\ndata: {k: \u65e5\u672c}\n",
    "comment-after-values": "apiVersion: v1 # api\nkind: ConfigMap # kind\n",
}


def is_object(document: Any) -> bool:
    return isinstance(document, dict) and all(
        isinstance(document.get(k), str) and document[k] for k in ("apiVersion", "kind")
    )


def reference_kinds(documents: Any) -> Counter[str]:
    """The counting rule written out here, on fully loaded documents: list kinds count their items."""
    kinds: Counter[str] = Counter()
    for document in documents:
        if not is_object(document):
            continue
        items = document.get("items")
        if document["kind"].endswith("List") and isinstance(items, list):
            kinds.update(item["kind"] for item in items if is_object(item))
        else:
            kinds[document["kind"]] += 1
    return kinds


def reference(text: str) -> int:
    return reference_kinds(yaml.load_all(text, Loader=yaml.SafeLoader)).total()


@pytest.mark.parametrize("name", sorted(CASES))
def test_fast_count_matches_full_load(name: str) -> None:
    data = CASES[name].encode()
    assert count_yaml(data) == reference(CASES[name]) == kinds_with_full_loader(data, name).total()
    expected = reference_kinds(yaml.load_all(CASES[name], Loader=yaml.SafeLoader))
    assert kinds_yaml(data) == expected == kinds_with_full_loader(data, name)


def test_kinds_are_counted_by_kind_with_list_items_by_their_own() -> None:
    text = CM + "---\n" + CASES["list-with-junk-items"] + "---\n" + CASES["typed-list"] + "---\n" + CM
    assert kinds_yaml(text.encode()) == {"ConfigMap": 3, "Secret": 1}
    assert kinds_json(
        b'{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "X"}]}'
    ) == {"X": 1}


@pytest.mark.parametrize(
    "text",
    [
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n",
        "apiVersion: v1\n  kind: ConfigMap\n bad: indent\n",
        "key: 'unterminated\n",
        "a: b\n\tc: d\n",
        "apiVersion: !custom v1\nkind: ConfigMap\n",
        "kind: [a, b\n---\n" + CM,
    ],
    ids=["unclosed-flow", "bad-indent", "unterminated-quote", "tab", "unknown-tag", "bad-then-good"],
)
def test_invalid_yaml_is_an_error_naming_the_file(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        list(yaml.load_all(text, Loader=yaml.SafeLoader))
    with pytest.raises(SourceError, match=r"deploy/app\.yaml: invalid YAML"):
        count_yaml(text.encode(), "deploy/app.yaml")


def test_binary_file_is_an_error() -> None:
    with pytest.raises(SourceError, match=r"blob\.yaml"):
        count_yaml(bytes(range(256)) * 4, "blob.yaml")


def test_json_files() -> None:
    assert count_json(b'{"apiVersion": "v1", "kind": "ConfigMap"}') == 1
    assert (
        count_json(b'{"apiVersion": "v1", "kind": "List", "items": [{"apiVersion": "v1", "kind": "X"}]}') == 1
    )
    assert count_json(b"[1, 2]") == 0
    with pytest.raises(SourceError, match=r"x\.json: invalid JSON"):
        count_json(b"{", "x.json")


def test_directory_walk_skips_hidden_and_other_files(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(configmaps_yaml(3))
    (tmp_path / "nested" / "deeper").mkdir(parents=True)
    (tmp_path / "nested" / "deeper" / "b.yml").write_text(configmaps_yaml(2))
    (tmp_path / "nested" / "c.json").write_text('{"apiVersion": "v1", "kind": "Secret"}')
    (tmp_path / "README.md").write_text("kind: ConfigMap\napiVersion: v1\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "d.yaml").write_text(configmaps_yaml(5))
    (tmp_path / ".e.yaml").write_text(configmaps_yaml(5))
    result = count_directory(tmp_path)
    assert (result.objects, result.files) == (6, 3)
    assert result.kinds == {"ConfigMap": 5, "Secret": 1}
    # The bytes of the three manifest files that hold objects; README.md and hidden files are not read.
    sizes = [tmp_path / "a.yaml", tmp_path / "nested" / "deeper" / "b.yml", tmp_path / "nested" / "c.json"]
    assert result.bytes == sum(p.stat().st_size for p in sizes)


def test_files_without_objects_add_no_bytes(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(CM)
    (tmp_path / "notes.yaml").write_text("# only a comment, and a mapping that is no object\na: b\n")
    assert count_directory(tmp_path).bytes == len(CM)


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


# ----- property: any document stream PyYAML can produce is counted the same way -----------------------
scalars = st.one_of(
    st.text(max_size=6),
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    st.sampled_from(["yes", "null", "~", "1.5", ""]),
)
documents = st.one_of(
    scalars,
    st.lists(scalars, max_size=3),
    st.fixed_dictionaries(
        {"apiVersion": scalars, "kind": st.one_of(scalars, st.sampled_from(["List", "ConfigMap", "XList"]))},
        optional={
            "items": st.lists(
                st.one_of(scalars, st.fixed_dictionaries({"apiVersion": scalars, "kind": scalars})),
                max_size=3,
            ),
            "metadata": st.dictionaries(st.text(max_size=4), scalars, max_size=2),
        },
    ),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(documents, max_size=5), st.booleans(), st.sampled_from([None, True, False]))
def test_fast_count_matches_full_load_on_generated_streams(
    docs: list[Any], start: bool, flow: bool | None
) -> None:
    text = yaml.safe_dump_all(docs, explicit_start=start, default_flow_style=flow, allow_unicode=True)
    assert kinds_yaml(text.encode()) == reference_kinds(yaml.load_all(text, Loader=yaml.SafeLoader))


# ----- fuzzing: YAML-like garbage is counted exactly like the full loader, or rejected like it ---------
FRAGMENTS = [
    "apiVersion: v1\n",
    "kind: ConfigMap\n",
    "kind: List\n",
    "items:\n",
    "- ",
    "  ",
    "---\n",
    "...\n",
    "a: b\n",
    "{",
    "}",
    "[",
    "]",
    ",",
    ":",
    " ",
    "\n",
    "'",
    '"',
    "#c\n",
    "- kind: X\n",
    "  apiVersion: v\n",
    "|\n",
    ">\n",
    "null",
    "~",
    "\t",
    "? ",
    "apiVersion: ",
    "kind: ",
    "x",
    "&a ",
    "*a",
    "!t ",
    "2024-02-30",
]


def full_load_or_error(text: str) -> Counter[str] | None:
    try:
        return reference_kinds(yaml.load_all(text, Loader=yaml.CSafeLoader))
    except (yaml.YAMLError, ValueError):
        return None


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS), max_size=30))
def test_fuzzed_yaml_is_counted_or_rejected_exactly_like_the_full_loader(parts: list[str]) -> None:
    text = "".join(parts)
    try:
        counted: Counter[str] | None = kinds_yaml(text.encode())
    except SourceError:
        counted = None
    assert counted == full_load_or_error(text)


HELM_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
  labels: { {{ .Values.labels }} }
data:
  items: [ [a], {b: c} ]
"""


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(st.sampled_from([*FRAGMENTS, "{{ .Values.x }}", "{ ", "[ "]), max_size=30))
def test_nothing_is_printed_to_stderr_by_the_parsers(
    parts: list[str], capfd: pytest.CaptureFixture[str]
) -> None:
    # rapidyaml prints its C++ parse errors to the process's stderr, where our JSON logs go.
    for text in ("".join(parts), HELM_TEMPLATE, "  apiVersion: v\n---\n"):
        with contextlib.suppress(SourceError):
            count_yaml(text.encode())
    assert capfd.readouterr().err == ""


def test_a_source_directory_that_disappears_keeps_the_last_good_count(tmp_path: Path) -> None:
    commit = write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(7)}, sync_dir="config")
    counts: list[int] = []
    watcher = SourceWatcher(
        SourceLayout(tmp_path, "config"), lambda c: counts.append(c.objects), clock=lambda: 0.0
    )
    previous = watcher.poll_once(None)
    assert counts == [7]
    shutil.rmtree(commit)  # the checkout vanishes under the link
    watcher.poll_once("changed")
    assert counts == [7], "no count is reported for a missing directory"
    assert watcher.last_error is not None
    assert "does not exist" in watcher.last_error
    write_commit(tmp_path, "c2", {"a.yaml": configmaps_yaml(3)}, sync_dir="config")
    watcher.poll_once(previous)
    assert counts == [7, 3]
    assert watcher.last_error is None


# ----- hostile files: links out of the commit, FIFOs, devices, huge files -------------------------------
def _commit_with(tmp_path: Path, make: Any) -> SourceLayout:
    commit = write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(3)}, sync_dir="config")
    make(commit / "config")
    return SourceLayout(tmp_path, "config")


@pytest.mark.timeout(10)
def test_a_link_to_a_fifo_is_an_error_not_a_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    layout = _commit_with(tmp_path, lambda config: (config / "b.yaml").symlink_to(fifo))
    with pytest.raises(SourceError, match=r"config/b.yaml: a symbolic link out of the commit"):
        count_source(layout)


@pytest.mark.timeout(10)
def test_a_fifo_inside_the_commit_is_an_error_not_a_hang(tmp_path: Path) -> None:
    layout = _commit_with(tmp_path, lambda config: os.mkfifo(config / "b.yaml"))
    with pytest.raises(SourceError, match=r"config/b.yaml: not a regular file"):
        count_source(layout)


@pytest.mark.timeout(10)
def test_a_link_to_dev_zero_is_refused_without_reading(tmp_path: Path) -> None:
    layout = _commit_with(tmp_path, lambda config: (config / "z.yaml").symlink_to("/dev/zero"))
    with pytest.raises(SourceError, match=r"config/z.yaml: a symbolic link out of the commit \(/dev/zero\)"):
        count_source(layout)


def test_a_link_inside_the_commit_is_followed(tmp_path: Path) -> None:
    def link(config: Path) -> None:
        (config / "shared").mkdir()
        (config / "shared" / "b.txt").write_text(configmaps_yaml(2))
        (config / "b.yaml").symlink_to("shared/b.txt")

    assert count_source(_commit_with(tmp_path, link)).objects == 3 + 2


def test_a_file_over_the_cap_is_refused_not_read(tmp_path: Path) -> None:
    data = configmaps_yaml(1).encode()
    path = tmp_path / "a.yaml"
    path.write_bytes(data)
    assert read_manifest(path, tmp_path, "a.yaml", max_bytes=len(data)) == data
    with pytest.raises(SourceError, match=rf"a.yaml: {len(data)} bytes, over the {len(data) - 1}-byte limit"):
        read_manifest(path, tmp_path, "a.yaml", max_bytes=len(data) - 1)


def test_an_unexpected_error_keeps_the_watcher_alive_with_the_last_good_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_commit(tmp_path, "c1", {"a.yaml": configmaps_yaml(4)}, sync_dir="config")
    counts: list[int] = []
    watcher = SourceWatcher(SourceLayout(tmp_path, "config"), lambda c: counts.append(c.objects))
    previous = watcher.poll_once(None)
    assert counts == [4]

    def crash(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr("inventory.source_watch.count_source", crash)
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
    with _rapidyaml_errors_kept_off_stderr():
        os.write(2, b'{"message": "another thread logged this"}\n')
        os.write(2, b"line=2 col=1 (16B): ERROR: [parse] parse error: incorrect indentation?\n")
    assert capfd.readouterr().err == '{"message": "another thread logged this"}\n'
