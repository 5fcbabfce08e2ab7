"""Source count: the Kubernetes objects in the rendered source that the reconciler will apply.

Counting rules (checked against a full YAML load by the tests):
- files ending in `.yaml`, `.yml` or `.json`; hidden files and directories are skipped;
- every document of a multi-document file; a document counts when it is a mapping whose `apiVersion`
  and `kind` are non-empty strings; empty and comment-only documents count nothing;
- a document whose kind ends in `List` and that has an `items` list counts its items (by the same rule)
  instead of itself, as `kubectl` expands list kinds.

Speed: a rapidyaml parse (C++) walks only the top-level keys of each document, with PyYAML's own
resolver deciding whether a plain scalar is a string. Any file that rapidyaml cannot vouch for (anchors,
aliases, tags, directives, a parse error) goes to PyYAML's full CSafeLoader, which is the reference and
also produces the error message for invalid files.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import ryml
import yaml

YAML_SUFFIXES = (".yaml", ".yml")
SUFFIXES = (*YAML_SUFFIXES, ".json")
_STR_TAG = "tag:yaml.org,2002:str"
# Bytes after which a file is left to the full loader: anchors, aliases, tags, merge keys, directives.
_NEEDS_FULL_LOADER = (b"&", b"*", b"!", b"<<", b"%")
_RESOLVER = yaml.resolver.Resolver()


class SourceError(Exception):
    """The source cannot be counted (invalid file, unreadable directory); the message names the file."""


@dataclass(frozen=True)
class SourceCount:
    objects: int
    files: int
    root: Path


# ----- the rule, on loaded documents (the reference) -------------------------------------------------
def is_object(document: Any) -> bool:
    if not isinstance(document, dict):
        return False
    api_version, kind = document.get("apiVersion"), document.get("kind")
    return isinstance(api_version, str) and bool(api_version) and isinstance(kind, str) and bool(kind)


def count_loaded(documents: Iterable[Any]) -> int:
    total = 0
    for document in documents:
        if not is_object(document):
            continue
        items = document.get("items")
        if document["kind"].endswith("List") and isinstance(items, list):
            total += sum(1 for item in items if is_object(item))
        else:
            total += 1
    return total


def count_with_full_loader(data: bytes, name: str) -> int:
    """The reference: PyYAML's C loader builds every object."""
    try:
        return count_loaded(yaml.load_all(data, Loader=yaml.CSafeLoader))
    except yaml.YAMLError as error:
        raise SourceError(f"{name}: invalid YAML: {error}") from error
    except UnicodeDecodeError as error:
        raise SourceError(f"{name}: not UTF-8 text: {error}") from error


# ----- the fast path ----------------------------------------------------------------------------------
def _scalar_is_nonempty_str(tree: Any, node: int) -> bool:
    if not tree.has_val(node) or tree.is_container(node):
        return False
    text = bytes(tree.val(node)).decode()
    if tree.is_val_quoted(node) or tree.is_val_literal(node) or tree.is_val_folded(node):
        return bool(text)
    if not text or tree.val_is_null(node):
        return False
    tag: str = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    return tag == _STR_TAG


def _top_level(tree: Any, mapping: int) -> dict[str, int]:
    """Key -> node id for the keys we look at; the last duplicate wins, as in PyYAML."""
    found: dict[str, int] = {}
    child = tree.first_child(mapping)
    while child != ryml.NONE:
        if tree.has_key(child) and not tree.is_key_ref(child):
            key = bytes(tree.key(child))
            if key in (b"apiVersion", b"kind", b"items"):
                found[key.decode()] = child
        child = tree.next_sibling(child)
    return found


def _is_object_node(tree: Any, node: int) -> tuple[bool, dict[str, int]]:
    if not tree.is_map(node):
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


def _count_tree(tree: Any) -> int:
    total = 0
    for document in _documents(tree):
        ok, keys = _is_object_node(tree, document)
        if not ok:
            continue
        items = keys.get("items")
        if bytes(tree.val(keys["kind"])).endswith(b"List") and items is not None and tree.is_seq(items):
            item = tree.first_child(items)
            while item != ryml.NONE:
                total += _is_object_node(tree, item)[0]
                item = tree.next_sibling(item)
        else:
            total += 1
    return total


def count_yaml(data: bytes, name: str = "<bytes>") -> int:
    """Count the objects in one YAML file's bytes, exactly as the full loader would."""
    if any(marker in data for marker in _NEEDS_FULL_LOADER):
        return count_with_full_loader(data, name)
    try:
        data.decode()
        tree = ryml.parse_in_arena(data)
    except Exception:
        return count_with_full_loader(data, name)
    return _count_tree(tree)


def count_json(data: bytes, name: str = "<bytes>") -> int:
    try:
        return count_loaded([orjson.loads(data)])
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


def count_directory(root: Path, names_relative_to: Path | None = None) -> SourceCount:
    """Count every object under `root` (a resolved, immutable commit directory).

    Errors name the file relative to `names_relative_to` (default: `root`).
    """
    total, files = 0, manifest_files(root)
    for path in files:
        data = path.read_bytes()
        name = str(path.relative_to(names_relative_to or root))
        total += count_json(data, name) if path.suffix == ".json" else count_yaml(data, name)
    return SourceCount(total, len(files), root)
