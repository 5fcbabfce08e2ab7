"""Config Sync's reader, as we count with it: which objects one manifest file gives Config Sync v1.24.3's
reconciler, and which files it rejects and why. Pure: a file's bytes and name in, `FileRead` out.

What the reconciler does with a file (pkg/importer/reader, read to learn it, not copied):
- `.yaml`/`.yml`: the text is split at every `\\n---` (before any YAML parsing: a `---` line inside a
  block scalar splits it too); a piece holding only blank and comment lines is skipped; every other piece
  is decoded alone, as JSON when its first non-space character is `{`, else as go-yaml v2 reads YAML
  (only its first document), and must be a mapping with a non-empty string `kind`;
- `.json`: one JSON object; an empty file holds nothing;
- objects annotated `config.kubernetes.io/local-config` (any value but `"false"`) are left out;
- an object whose `items` is a list is a List: its items are the objects (Lists of Lists too);
- each object needs a string `apiVersion` (at most one `/`), `kind` and `metadata.name` (else KNV2010),
  no non-empty `status` unless it is Config Sync's own (KNV1045), string annotation and label values
  (KNV1054). A piece that does not decode rejects its file (KNV2001).
One rejected file stops the whole sync: the reconciler applies nothing of that commit.

How, fast: most pieces are read with rapidyaml (C++), looking only at the fields above, once libyaml
(PyYAML's C parser, what go-yaml v2 was ported from) has found the piece valid and a walk of rapidyaml's
tree has found nothing whose meaning needs go-yaml's full decoding (anchors, aliases, tags, merge keys,
null keys, `.nan`/`.inf`, a second document, Unicode line breaks); those pieces, and any either parser
refuses, are decoded in full by `inventory.core.go_decoding`, which also words the error. The differential
tests hold both against Config Sync's own reader on a corpus of public repositories and on generated YAML.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import ryml
from yaml._yaml import CParser

from inventory.core.counts import WORKLOAD_KINDS
from inventory.core.go_decoding import (
    GO_SPACES,
    BeyondUs,
    GoDecodeError,
    Pairs,
    decode_json,
    decode_yaml,
    folds_to,
    plain_scalar,
)

# Objects of one file or commit by kind (`kind` of each object, List items by their own kind).
KindCounter = Counter[str]

SYNTAX, RESOURCE, ILLEGAL_STATUS, ANNOTATION_VALUE = "KNV2001", "KNV2010", "KNV1045", "KNV1054"
UNDOCUMENTED = "KNV9999"
CRASH = "crash"  # Config Sync's reader panics (its reconciler restarts): nothing syncs either
LOCAL_CONFIG = "config.kubernetes.io/local-config"
CONFIG_MANAGEMENT_GROUP = "configmanagement.gke.io"


@dataclass(frozen=True)
class Problem:
    """One error Config Sync reports for a file: its code (`KNV....`) and what it says."""

    code: str
    message: str


@dataclass(frozen=True)
class FileRead:
    """What a file gives the reconciler: its objects by kind, or the errors that reject it; `unread` when
    we could not read it at all (not Config Sync's verdict: its objects are unknown, not none)."""

    kinds: KindCounter
    rejected: tuple[Problem, ...] = ()
    unread: str | None = None
    # The steps of the field paths of its CustomResourceDefinitions' fields (each mapping entry and list
    # item, as deep as it is nested; a List's share by items): what a CRD costs the reconciler follows
    # its fields and their depth (it records every declared field's path), not its bytes.
    crd_path_steps: int = 0
    # The same steps of its objects with a Pod template (Deployments, StatefulSets, ...: WORKLOAD_KINDS).
    workload_path_steps: int = 0


SUFFIXES = (".yaml", ".yml", ".json")


def read_manifest(data: bytes, name: str) -> FileRead:
    """The objects Config Sync reads from one file named `name` (its suffix decides how)."""
    try:
        objects = _json_file(data) if name.endswith(".json") else _yaml_file(data)
    except GoDecodeError as error:
        return FileRead(Counter(), (Problem(SYNTAX, f"{name}: {error}"),))
    except BeyondUs as error:
        return FileRead(Counter(), unread=f"{name}: {error}")
    kinds: KindCounter = Counter()
    problems: list[Problem] = []
    crd_path_steps = workload_path_steps = 0
    for obj, steps in objects:
        if not _local_config(obj):
            found: KindCounter = Counter()
            _file_objects(obj, found, problems, name)
            crd_path_steps += steps * found[CRD_KIND] // max(found.total(), 1)
            workload_path_steps += steps * sum(found[k] for k in WORKLOAD_KINDS) // max(found.total(), 1)
            kinds.update(found)
    if problems:
        return FileRead(Counter(), tuple(problems))
    return FileRead(kinds, crd_path_steps=crd_path_steps, workload_path_steps=workload_path_steps)


CRD_KIND = "CustomResourceDefinition"


# ----- decoding a file into objects ---------------------------------------------------------------------
def _json_file(data: bytes) -> list[tuple[dict[str, Any], int]]:
    """A `.json` file: Unstructured's own JSON decoding (no type check of `apiVersion` first)."""
    if not data:
        return []
    value = decode_json(data)
    return [(_unstructured(_as_map(value, "map[string]interface {}")), _decoded_steps(value))]


def _yaml_file(data: bytes) -> list[tuple[dict[str, Any], int]]:
    """Each piece's object, and the steps of its fields' paths where it may hold a CRD or a Pod template
    (else 0)."""
    return [_decoded_piece(piece) for piece in (b"\n" + data).split(b"\n---") if not _blank(piece)]


def path_steps_of(value: Any, depth: int = 0) -> int:
    """The steps of the paths of a decoded document's fields: each mapping entry and list item counts
    its depth (the document is 0), as `_tree_path_steps` counts rapidyaml's tree (which also counts a
    duplicate key the decoding keeps once)."""
    if isinstance(value, dict):
        return depth + sum(path_steps_of(item, depth + 1) for item in value.values())
    if isinstance(value, list):
        return depth + sum(path_steps_of(item, depth + 1) for item in value)
    return depth


def _tree_path_steps(tree: Any) -> int:
    """`path_steps_of` on a freshly parsed rapidyaml tree (of one document): a node's parent comes
    before it, so one pass gives every depth."""
    parent, size = tree.parent, int(tree.size())
    depths = [0] * size
    for node in range(1, size):
        depths[node] = depths[parent(node)] + 1
    return sum(depths)


def _priced_by_steps(fields: Mapping[str, Any]) -> bool:
    """A CRD, an object with a Pod template, or a List that may hold them: what is priced by its fields."""
    kind = fields.get("kind")
    if isinstance(fields.get("items"), list):
        return True
    # Any YAML value may stand where a kind belongs (a list, a map): only a string is one.
    return isinstance(kind, str) and (kind == CRD_KIND or kind in WORKLOAD_KINDS)


def _decoded_steps(value: Any) -> int:
    """The path steps of a fully decoded document priced by its fields (0 for any other object: they
    are not priced so)."""
    return path_steps_of(value) if isinstance(value, dict) and _priced_by_steps(value) else 0


_GO_SPACES = "".join(GO_SPACES)  # for str.lstrip
_CONTENT_LINE = re.compile(rb"(?m)^[ \t\v\f\r]*[^ \t\v\f\r#\n]")


def _blank(piece: bytes) -> bool:
    """Only blank and comment lines (Go's unicode.IsSpace decides what is blank)."""
    found = _CONTENT_LINE.search(piece)
    if found is None:
        return True
    if piece[found.end() - 1] < 0x80:
        return False
    lines = (line.lstrip(_GO_SPACES) for line in piece.decode("utf-8", "replace").split("\n"))
    return all(not line or line[0] == "#" for line in lines)


def _looks_like_json(piece: bytes) -> bool:
    """Kubernetes' universal decoder takes a piece for JSON when its first non-space character is `{`."""
    rest = piece.lstrip(b" \t\n\v\f\r")
    if rest[:1] == b"{":
        return True
    if not rest or rest[0] < 0x80:
        return False
    return piece.decode("utf-8", "replace").lstrip(_GO_SPACES)[:1] == "{"


def _decoded_piece(piece: bytes) -> tuple[dict[str, Any], int]:
    """The piece's object, as the reader reads it (the fields it checks, at least), and the steps of its
    fields' paths where it is priced by them (a CRD, a Pod template; 0 for any other object)."""
    json = _looks_like_json(piece)
    fast = None if json else _fast_yaml(piece)
    if fast is not None:
        value, tree = fast
        steps = _tree_path_steps(tree) if _priced_by_steps(value) else 0
    else:
        value = decode_json(piece) if json else decode_yaml(piece)
        steps = _decoded_steps(value)
    _interpret(value)
    return _unstructured(_as_map(value, "map[string]interface {}")), steps


def _as_map(value: Any, target: str) -> dict[str, Any] | None:
    if value is None or isinstance(value, dict):
        return value
    raise GoDecodeError(f"json: cannot unmarshal {_json_type(value)} into Go value of type {target}")


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    return {str: "string", list: "array", type(None): "null"}.get(type(value), "object")


def _interpret(value: Any) -> None:
    """What the decoder reads first: `apiVersion` and `kind` into a Go struct, whose fields match keys
    without regard to case (encoding/json), in the order of the JSON text (written by Go from YAML: its
    keys sorted); each must be a string or null, and the last `apiVersion` must name at most one `/`."""
    if value is None:
        return
    if not isinstance(value, dict):
        struct = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string ... }'
        raise GoDecodeError(
            f"couldn't get version/kind; json parse error: json: cannot unmarshal {_json_type(value)} "
            f"into Go value of type {struct}"
        )
    pairs = value.pairs if isinstance(value, Pairs) else sorted(value.items())
    api_version = ""
    for key, item in pairs:
        field = _struct_field(key)
        if field is None or item is None:
            continue
        if not isinstance(item, str):
            raise GoDecodeError(
                f"couldn't get version/kind; json parse error: json: cannot unmarshal "
                f"{_json_type(item)} into Go struct field .{field} of type string"
            )
        if field == "apiVersion":
            api_version = item
    _group_version(api_version)


def _struct_field(key: str) -> str | None:
    """The field of Go's struct { apiVersion; kind } that encoding/json fills from this key, if any."""
    if len(key) not in (4, 10) and key.isascii():
        return None
    return "apiVersion" if folds_to(key, "apiVersion") else "kind" if folds_to(key, "kind") else None


def _group_version(text: str) -> tuple[str, str]:
    """apimachinery's ParseGroupVersion: (group, version), GoDecodeError beyond one `/`."""
    if not text or text == "/":
        return "", ""
    if text.count("/") > 1:
        raise GoDecodeError(f"unexpected GroupVersion string: {text}")
    group, _, version = text.rpartition("/")
    return group, version


def _unstructured(value: dict[str, Any] | None) -> dict[str, Any]:
    """An Unstructured object needs a non-empty string `kind`, and a string `apiVersion` must parse:
    else Kubernetes' decoder says the kind is missing."""
    api_version = value.get("apiVersion") if value else None
    try:
        _group_version(api_version if isinstance(api_version, str) else "")
    except GoDecodeError:
        value = None
    kind = value.get("kind") if value else None
    if value is None or not isinstance(kind, str) or not kind:
        raise GoDecodeError("Object 'Kind' is missing")
    return value


# ----- the reader's checks of each object -------------------------------------------------------------------
def _local_config(obj: Mapping[str, Any]) -> bool:
    """Annotated as local configuration. The annotations are read as Unstructured reads them: null
    values are empty strings, and any other value that is not a string hides them all."""
    metadata = obj.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    if not isinstance(annotations, dict) or LOCAL_CONFIG not in annotations:
        return False
    if not all(v is None or isinstance(v, str) for v in annotations.values()):
        return False
    return (annotations[LOCAL_CONFIG] or "") != "false"


def _file_objects(obj: Mapping[str, Any], kinds: KindCounter, problems: list[Problem], name: str) -> None:
    items = obj.get("items")
    if isinstance(items, list):
        for item in items:
            if not isinstance(item, dict):
                problems.append(Problem(UNDOCUMENTED, f"{name}: items member is not an object"))
                return
            _file_objects(item, kinds, problems, name)
        return
    problem = _object_problem(obj, name)
    if problem is not None:
        problems.append(problem)
    else:
        kinds[obj["kind"]] += 1


def _object_problem(obj: Mapping[str, Any], name: str) -> Problem | None:
    errors = [e for e in (_string_error(obj, "apiVersion"), _string_error(obj, "kind")) if e]
    group = ""
    if not errors:
        try:
            group = _group_version(obj["apiVersion"])[0]
        except GoDecodeError as error:
            errors.append(str(error))
    name_error = _string_error(obj, "metadata", "name")
    errors += [name_error] if name_error else []
    if errors:
        return Problem(RESOURCE, f"{name}: {'; '.join(errors)}")
    status = obj.get("status")
    if group != CONFIG_MANAGEMENT_GROUP and status is not None:
        if not isinstance(status, dict):
            return Problem(
                CRASH, f"{name}: a `status` that is not a mapping makes Config Sync's reader panic"
            )
        if status:
            return Problem(ILLEGAL_STATUS, f"{name}: a {obj['kind']} declared with a `status` field")
    return _metadata_problem(obj["metadata"], name)


def _string_error(obj: Mapping[str, Any], *path: str) -> str | None:
    """Why the field at `path` is not a non-empty string (unstructured.NestedString's rules: a missing
    parent is missing, a parent that is not a mapping is an error); None when it is one."""
    field = ".".join(path)
    value: Any = obj
    for step in path:
        if value is None:
            return f'missing field "{field}"'
        if not isinstance(value, dict):
            return f".{field} accessor error: {_json_type(value)} where a map is expected"
        if step not in value:
            return f'missing field "{field}"'
        value = value[step]
    if not isinstance(value, str):
        return f".{field} accessor error: {_json_type(value)} where a string is expected"
    return None if value else f'missing field "{field}"'


def _metadata_problem(metadata: Mapping[str, Any], name: str) -> Problem | None:
    for field in ("annotations", "labels"):
        values = metadata.get(field)
        if values is None:
            continue
        if not isinstance(values, dict):
            return Problem(RESOURCE, f"{name}: validating {field}: not a map")
        invalid = sorted(key for key, value in values.items() if not isinstance(value, str))
        if invalid:
            return Problem(
                ANNOTATION_VALUE, f"{name}: {field} values must be strings (quote them): {', '.join(invalid)}"
            )
    return None


# ----- the fast path: rapidyaml, looking only at what the reader checks -----------------------------------
# A piece is decoded in full after a merge key (`<<`), `.nan`/`.inf`, a document end or directive (a
# second document), or the Unicode line breaks libyaml folds and rapidyaml keeps (_needs_full_decoding).
_NAN_OR_INF = re.compile(rb"\.(?:nan|NaN|NAN|inf|Inf|INF)")
# NEL, LS, PS, and a byte order mark (which libyaml skips at the start of any line, go-yaml not)
_UNICODE_MARKS = re.compile(rb"\xc2\x85|\xe2\x80[\xa8\xa9]|\xef\xbb\xbf")
_NODE_PROPERTIES = (b"&", b"*", b"!")  # anchors, aliases, tags: rapidyaml flags the real ones
_NULL_WORD_KEY = re.compile(rb"(?:~|null|Null|NULL)[ \t]*:")
_EMPTY_KEY = re.compile(rb"[\n{\[,?-][ \t]*:")
# An explicit key (`? key`): its content may be a mapping or a sequence, which go-yaml refuses as a key
# (seen: `? ::` is the mapping {":": null} to libyaml and go-yaml, a plain key to rapidyaml).
_EXPLICIT_KEY = re.compile(rb"(?:^|[\n{\[,])[ \t-]*\?(?:[ \t\r\n]|$)")
_PROPERTY_FLAGS = ryml.KEYANCH | ryml.VALANCH | ryml.KEYREF | ryml.VALREF | ryml.KEYTAG | ryml.VALTAG
_RELEVANT = frozenset((b"apiVersion", b"kind", b"metadata", b"status", b"items"))


def _fast_yaml(piece: bytes) -> tuple[dict[str, Any], Any] | None:
    """The piece's top-level mapping with the fields the reader checks (others left out), as go-yaml
    would decode them, and rapidyaml's tree of it; None when only the full decoding can tell."""
    if _needs_full_decoding(piece):
        return None
    try:
        tree, root = _mapping_tree(piece)
        null_keys = _may_have_null_keys(piece)
        if (null_keys or any(p in piece for p in _NODE_PROPERTIES)) and _needs_full_decode(tree, null_keys):
            return None
        return _object_fields(tree, root), tree
    except _Undecided:
        return None


def _needs_full_decoding(piece: bytes) -> bool:
    if piece.startswith((b"...", b"%")) or b"<<" in piece or b"\n..." in piece or b"\n%" in piece:
        return True
    if b"?" in piece and _EXPLICIT_KEY.search(piece):
        return True
    if (b".n" in piece or b".N" in piece or b".i" in piece or b".I" in piece) and _NAN_OR_INF.search(piece):
        return True
    return not piece.isascii() and _UNICODE_MARKS.search(piece) is not None


def _may_have_null_keys(piece: bytes) -> bool:
    """`~`, `null` or nothing as a key (written plain): rapidyaml's tree is then searched for them."""
    if b"?" in piece or piece.lstrip(b" \t").startswith(b":") or _EMPTY_KEY.search(piece):
        return True
    return (b"~" in piece or b"ull" in piece or b"ULL" in piece) and _NULL_WORD_KEY.search(piece) is not None


def _mapping_tree(piece: bytes) -> tuple[Any, int]:
    """rapidyaml's tree of a piece that libyaml finds valid, and its one document's top-level mapping."""
    try:
        CParser(piece).raw_parse()  # libyaml, building nothing: is the piece valid YAML at all?
        tree = ryml.parse_in_arena(piece)
    except Exception as error:
        raise _Undecided from error
    root = tree.root_id()
    if tree.is_stream(root):
        if tree.num_children(root) != 1:
            raise _Undecided
        root = tree.first_child(root)
    if not tree.is_map(root):
        raise _Undecided
    return tree, root


class _Undecided(Exception):
    """The fast path met what only the full decoding can settle."""


def _needs_full_decode(tree: Any, null_keys: bool) -> bool:
    node_type, key_is_null = tree.type, tree.key_is_null
    for node in range(tree.size()):
        flags = node_type(node)
        if flags & _PROPERTY_FLAGS:
            return True
        if null_keys and flags & ryml.KEY and key_is_null(node):
            return True
    return False


def _children(tree: Any, node: int) -> Iterator[int]:
    child = tree.first_child(node)
    while child != ryml.NONE:
        yield child
        child = tree.next_sibling(child)


def _raw_key(tree: Any, node: int) -> bytes:
    raw = tree.key(node)
    if raw is None:  # a null key: the full decoding words the error
        raise _Undecided
    return bytes(raw)


def _key(tree: Any, node: int) -> str:
    """A key as Go's conversion to JSON names it (a plain `1` or `yes` is not the string it reads)."""
    text = _raw_key(tree, node).decode()
    value = text if tree.type(node) & ryml.KEYQUO else plain_scalar(text)
    if isinstance(value, str):
        return value
    return "true" if value is True else "false" if value is False else str(value)


def _read_key(tree: Any, node: int) -> str | None:
    """The key when the reader reads its value: one of its fields, or a key Go's decoder of `apiVersion`
    and `kind` takes for one of them (it ignores case); None for any other key. A key the reader reads
    is the same text plain or quoted (a plain key that is no string in Go is none of them)."""
    key = _raw_key(tree, node)
    if key in _RELEVANT:
        return key.decode()
    if len(key) in (4, 10) or not key.isascii():
        text = key.decode()
        if folds_to(text, "apiVersion") or folds_to(text, "kind"):
            return text
    return None


def _object_fields(tree: Any, node: int) -> dict[str, Any]:
    """The reader's fields of a mapping; a later duplicate key wins, as in go-yaml."""
    fields: dict[str, Any] = {}
    for child in _children(tree, node):
        key = _read_key(tree, child)
        if key is not None:
            fields.pop(key, None)
            fields[key] = _field(tree, child, key)
    return fields


def _field(tree: Any, node: int, key: str) -> Any:
    if key == "status" and tree.is_map(node):
        return {"": None} if tree.has_children(node) else {}  # only whether it is empty is checked
    if key == "items" and tree.is_seq(node):
        return [_object_fields(tree, c) if tree.is_map(c) else _value(tree, c) for c in _children(tree, node)]
    if key == "metadata" and tree.is_map(node):
        return _metadata(tree, node)
    if key in ("apiVersion", "kind"):
        _exact_text(tree, node)
    return _value(tree, node)


def _metadata(tree: Any, node: int) -> dict[str, Any]:
    """`name`, `annotations` and `labels`, the metadata the reader reads."""
    fields: dict[str, Any] = {}
    for child in _children(tree, node):
        key = _raw_key(tree, child)
        if key not in (b"name", b"annotations", b"labels"):
            continue
        if key == b"name":
            _exact_text(tree, child)
        elif key == b"annotations" and tree.is_map(child):
            for annotation in _children(tree, child):
                if _raw_key(tree, annotation) == LOCAL_CONFIG_KEY:
                    _exact_text(tree, annotation)
        fields[key.decode()] = _value(tree, child)
    return fields


LOCAL_CONFIG_KEY = LOCAL_CONFIG.encode()
_BLOCK = ryml.VAL_LITERAL | ryml.VAL_FOLDED


def _exact_text(tree: Any, node: int) -> None:
    """A field whose text the reader compares: rapidyaml's block scalars may end in another line break
    than libyaml's (at the end of a piece, with CRLF line ends), so they are left to the full decoding.
    Elsewhere only whether a value is a string matters."""
    if tree.type(node) & _BLOCK:
        raise _Undecided


def _value(tree: Any, node: int) -> Any:
    flags = tree.type(node)
    if flags & ryml.MAP:
        return {_key(tree, c): _value(tree, c) for c in _children(tree, node)}
    if flags & ryml.SEQ:
        return [_value(tree, c) for c in _children(tree, node)]
    text = tree.val(node)
    if text is None:
        return None
    value = bytes(text).decode()
    return value if flags & ryml.VALQUO else plain_scalar(value)
