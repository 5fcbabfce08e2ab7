"""Source count: the Kubernetes objects in the rendered source that the reconciler will apply.

Counting rules (checked against a full YAML load by the tests):
- files ending in `.yaml`, `.yml` or `.json`; hidden files and directories are skipped;
- every document of a multi-document file; a document counts when it is a mapping whose `apiVersion`
  and `kind` are non-empty strings; empty and comment-only documents count nothing;
- a document whose kind ends in `List` and that has an `items` list counts its items (by the same rule)
  instead of itself, as `kubectl` expands list kinds.

How, and why it is exact: libyaml's parser (PyYAML's C extension, building no Python objects) first
decides whether the file is valid YAML, because rapidyaml alone accepts some text that libyaml rejects.
Then a rapidyaml parse (C++) is walked over the top-level keys of each document only, with PyYAML's own
resolver deciding whether a plain scalar is a string. Files whose meaning only the full loader can
settle (anchors, aliases, tags, merge keys, directives, complex keys, date-like scalars) and files
either parser rejects go to PyYAML's CSafeLoader, which is the reference and words the error. Counts
of file contents already seen are cached by digest, so a new commit re-parses only changed files.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import stat
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import ryml
import yaml
from yaml._yaml import CParser

YAML_SUFFIXES = (".yaml", ".yml")
SUFFIXES = (*YAML_SUFFIXES, ".json")
_STR_TAG = "tag:yaml.org,2002:str"
# Bytes after which a file is left to the full loader, which alone can fail on them after parsing:
# anchors and aliases, tags, merge keys, directives, complex and flow-collection keys (unhashable).
# A flow collection in key position (`{{ .Values.x }}` of a Helm template, `{ [a]: b }`) is unhashable
# for the full loader and refused by rapidyaml: such files go straight to the full loader.
# The Unicode line breaks libyaml folds (NEL, LS, PS: a `kind: \x85` is " " to it) and rapidyaml keeps.
_NEEDS_FULL_LOADER = (
    *(b"&", b"*", b"!", b"<<", b"%", b"? ", b"?\n", b"?\t", b"]:", b"}:", b"] :", b"} :"),
    *(b"{{", b"{ {", b"{[", b"{ [", b"[[", b"[ [", b"[{", b"[ {", b",{", b", {", b",[", b", ["),
    *("\u0085".encode(), "\u2028".encode(), "\u2029".encode()),
)
# Plain scalars that PyYAML turns into dates (and fails on when the date is impossible).
_TIMESTAMP = re.compile(rb"[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}")
_RESOLVER = yaml.resolver.Resolver()
_KEYS = ("apiVersion", "kind", "items")
_KEY_LENGTHS = frozenset(len(k) for k in _KEYS)


class SourceError(Exception):
    """The source cannot be counted (invalid file, unreadable directory); the message names the file."""


def kib_of(size: int) -> int:
    """Bytes to whole KiB, rounded up (a size estimate's input is never rounded down)."""
    return -(-size // 1024)


# Objects of one file or commit by kind (`kind` of each object, list items by their own kind).
KindCounter = Counter[str]


@dataclass(frozen=True)
class SourceCount:
    """What a commit holds: objects, the manifest files read, and what the size estimate uses: the
    bytes of the files that hold objects (their serialized form as committed) and the objects by kind."""

    objects: int
    files: int
    root: Path
    bytes: int = 0
    kinds: Mapping[str, int] = field(default_factory=dict)
    commit: str = ""  # the directory `rev` points to, named by its commit (as Config Sync reads it)


# ----- the rule, on loaded documents (the reference) -------------------------------------------------
def is_object(document: Any) -> bool:
    if not isinstance(document, dict):
        return False
    api_version, kind = document.get("apiVersion"), document.get("kind")
    return isinstance(api_version, str) and bool(api_version) and isinstance(kind, str) and bool(kind)


def kinds_loaded(documents: Iterable[Any]) -> KindCounter:
    kinds: KindCounter = Counter()
    for document in documents:
        if not is_object(document):
            continue
        items = document.get("items")
        if document["kind"].endswith("List") and isinstance(items, list):
            kinds.update(item["kind"] for item in items if is_object(item))
        else:
            kinds[document["kind"]] += 1
    return kinds


def count_loaded(documents: Iterable[Any]) -> int:
    return kinds_loaded(documents).total()


def kinds_with_full_loader(data: bytes, name: str) -> KindCounter:
    """The reference: PyYAML's C loader builds every object."""
    try:
        return kinds_loaded(yaml.load_all(data, Loader=yaml.CSafeLoader))
    except (yaml.YAMLError, ValueError) as error:
        # ValueError: a plain scalar PyYAML resolves as a date but cannot construct (2024-02-30).
        raise SourceError(f"{name}: invalid YAML: {error}") from error
    except UnicodeDecodeError as error:
        raise SourceError(f"{name}: not UTF-8 text: {error}") from error


# ----- the fast path ----------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4096)
def _plain_scalar_is_str(text: bytes) -> bool:
    """Whether PyYAML resolves this plain scalar to a string (not null, bool, int, float or date)."""
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, text.decode(), (True, False))  # type: ignore[no-untyped-call]
    return tag == _STR_TAG


def _scalar_is_nonempty_str(tree: Any, node: int) -> bool:
    node_type = tree.type(node)
    if not node_type & ryml.VAL or node_type & (ryml.MAP | ryml.SEQ):
        return False
    value = tree.val(node)
    if value is None:
        return False
    text = bytes(value)
    if node_type & ryml.VALQUO:  # quoted or block scalars are strings whatever they say
        return bool(text)
    return bool(text) and _plain_scalar_is_str(text)


def _top_level(tree: Any, mapping: int) -> dict[str, int]:
    """Key -> node id for the keys we look at; the last duplicate wins, as in PyYAML."""
    found: dict[str, int] = {}
    child = tree.first_child(mapping)
    while child != ryml.NONE:
        key = tree.key(child)
        if key is not None and len(key) in _KEY_LENGTHS:
            text = bytes(key).decode()
            if text in _KEYS:
                found[text] = child
        child = tree.next_sibling(child)
    return found


def _is_object_node(tree: Any, node: int) -> tuple[bool, dict[str, int]]:
    if not tree.type(node) & ryml.MAP:
        return False, {}
    keys = _top_level(tree, node)
    ok = (
        "apiVersion" in keys
        and "kind" in keys
        and _scalar_is_nonempty_str(tree, keys["apiVersion"])
        and _scalar_is_nonempty_str(tree, keys["kind"])
    )
    return ok, keys


def _documents(tree: Any) -> Iterator[int]:
    root = tree.root_id()
    if tree.is_stream(root):
        child = tree.first_child(root)
        while child != ryml.NONE:
            yield child
            child = tree.next_sibling(child)
    else:
        yield root


def _kind(tree: Any, keys: dict[str, int]) -> str:
    return bytes(tree.val(keys["kind"])).decode()


def _kinds_tree(tree: Any) -> KindCounter:
    kinds: KindCounter = Counter()
    for document in _documents(tree):
        ok, keys = _is_object_node(tree, document)
        if not ok:
            continue
        items = keys.get("items")
        if _kind(tree, keys).endswith("List") and items is not None and tree.type(items) & ryml.SEQ:
            item = tree.first_child(items)
            while item != ryml.NONE:
                item_ok, item_keys = _is_object_node(tree, item)
                if item_ok:
                    kinds[_kind(tree, item_keys)] += 1
                item = tree.next_sibling(item)
        else:
            kinds[_kind(tree, keys)] += 1
    return kinds


def count_yaml(data: bytes, name: str = "<bytes>") -> int:
    """Count the objects in one YAML file's bytes, exactly as the full loader would."""
    return kinds_yaml(data, name).total()


def kinds_yaml(data: bytes, name: str = "<bytes>") -> KindCounter:
    """The objects of one YAML file's bytes by kind, exactly as the full loader would find them."""
    if any(marker in data for marker in _NEEDS_FULL_LOADER) or _TIMESTAMP.search(data):
        return kinds_with_full_loader(data, name)
    try:
        data.decode()
        # rapidyaml accepts some text that libyaml rejects: libyaml's own parser (in C, building
        # nothing) decides validity, so an invalid file is reported exactly as the full loader would.
        CParser(data).raw_parse()
        with _rapidyaml_errors_kept_off_stderr():
            tree = ryml.parse_in_arena(data)
    except Exception:
        return kinds_with_full_loader(data, name)
    return _kinds_tree(tree)


_STDERR_LOCK = threading.Lock()
_RAPIDYAML_LINE = re.compile(rb"^line=\d+ col=\d+ .*ERROR: |c4/yml/")


@contextlib.contextmanager
def _rapidyaml_errors_kept_off_stderr() -> Iterator[None]:
    """rapidyaml reports a parse error by printing to the process's stderr (file descriptor 2, where our
    JSON log lines go) before it raises, for some text libyaml accepts (an indented top-level mapping,
    a flow collection as a key): no marker list catches them all. So the parse runs with descriptor 2
    pointed at a memory file; whatever else reached it meanwhile (another thread's log line) is copied
    to the real stderr afterwards, less rapidyaml's own lines. Parses are serialized by a lock."""
    with _STDERR_LOCK:
        sys.stderr.flush()
        saved = os.dup(2)
        capture = os.memfd_create("rapidyaml-stderr", os.MFD_CLOEXEC)
        os.dup2(capture, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.lseek(capture, 0, os.SEEK_SET)
            with os.fdopen(capture, "rb") as captured:
                others = [line for line in captured if not _RAPIDYAML_LINE.search(line)]
            if others:
                os.write(2, b"".join(others))


def count_json(data: bytes, name: str = "<bytes>") -> int:
    return kinds_json(data, name).total()


def kinds_json(data: bytes, name: str = "<bytes>") -> KindCounter:
    try:
        return kinds_loaded([orjson.loads(data)])
    except orjson.JSONDecodeError as error:
        raise SourceError(f"{name}: invalid JSON: {error}") from error


# ----- the directory ----------------------------------------------------------------------------------
def manifest_files(root: Path) -> list[Path]:
    """Manifest files under `root`, sorted, skipping hidden files and directories."""
    found: list[Path] = []
    for directory, subdirs, files in os.walk(root, onerror=_raise):
        subdirs[:] = sorted(d for d in subdirs if not d.startswith("."))
        found.extend(
            Path(directory) / f for f in sorted(files) if not f.startswith(".") and f.endswith(SUFFIXES)
        )
    return found


def _raise(error: OSError) -> None:
    raise error


class CountCache:
    """Kinds of file contents already seen, keyed by a content digest (bounded, least recent dropped).

    A new commit is a new directory, but most of its files are byte-identical to the last commit's:
    only the changed ones are parsed again.
    """

    def __init__(self, max_entries: int = 50_000) -> None:
        self._entries: OrderedDict[bytes, KindCounter] = OrderedDict()
        self._max = max_entries

    def count(self, data: bytes, name: str, counter: Callable[[bytes, str], KindCounter]) -> KindCounter:
        """The file's kinds (callers must not change the Counter: it is the cached one)."""
        digest = hashlib.blake2b(data, digest_size=16).digest()
        cached = self._entries.get(digest)
        if cached is not None:
            self._entries.move_to_end(digest)
            return cached
        result = counter(data, name)  # errors are not cached: the message names this file
        self._entries[digest] = result
        if len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return result


def kinds_file(data: bytes, name: str) -> KindCounter:
    return kinds_json(data, name) if name.endswith(".json") else kinds_yaml(data, name)


# No manifest file Config Sync can apply comes near this (an object is at most 1.5 MiB in etcd); a larger
# one is refused rather than read into memory.
MAX_FILE_BYTES = 64 << 20


def read_manifest(path: Path, commit: Path, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of one manifest file; SourceError for a symlink out of the commit, anything that is not
    a regular file (a link to a FIFO would block, one to /dev/zero never ends) and a file over the cap.

    Opened without blocking and checked on the open descriptor, so the file cannot be swapped between
    the check and the read."""
    target = Path(os.path.realpath(path))
    if target != commit and commit not in target.parents:
        raise SourceError(f"{name}: a symbolic link out of the commit ({target}): not read")
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        raise SourceError(f"{name}: cannot open: {error.strerror}") from error
    with os.fdopen(descriptor, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise SourceError(f"{name}: not a regular file (a FIFO, device or socket): not read")
        if status.st_size > max_bytes:
            raise SourceError(f"{name}: {status.st_size} bytes, over the {max_bytes}-byte limit: not read")
        data = file.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise SourceError(f"{name}: over the {max_bytes}-byte limit: not read")
    return data


def count_directory(
    root: Path, names_relative_to: Path | None = None, cache: CountCache | None = None
) -> SourceCount:
    """Count every object under `root` (a resolved, immutable commit directory).

    Errors name the file relative to `names_relative_to` (default: `root`), which is also the commit:
    no file outside it is read.
    """
    commit = Path(os.path.realpath(names_relative_to or root))
    kinds: KindCounter = Counter()
    size, files = 0, manifest_files(root)
    for path in files:
        name = str(path.relative_to(names_relative_to or root))
        data = read_manifest(path, commit, name)
        found = cache.count(data, name, kinds_file) if cache else kinds_file(data, name)
        kinds.update(found)
        size += len(data) if found else 0
    return SourceCount(kinds.total(), len(files), root, size, dict(kinds))
