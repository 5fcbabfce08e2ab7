"""Manifest files for the differential tests: hypothesis strategies that write the YAML and JSON corner
cases where readers of Kubernetes manifests disagree, and a client of Config Sync's own reader (the
`csreader` oracle that build_configsync.sh builds beside the reconciler).

The corner cases (issue 33): YAML 1.1 and 1.2 scalars (`=`, `<<`, `y`/`yes`/`on`, octal, hex, binary
and sexagesimal numbers, dates, `.nan`), tags, anchors and aliases, merge keys, duplicate keys and keys
that differ only in case, null and complex keys, Unicode line breaks, byte order marks, empty and
comment-only documents, `---` inside block scalars and at the start of other lines, document end
markers, CRLF, JSON with and without a trailing newline, Lists of Lists, local-config objects.

Config Sync's reader panics on a non-empty `status` that is not a mapping (the oracle would crash, as the
reconciler does): the generator never writes one; a unit test names that case.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from controlplane.configsync_build import VERSION, build_configsync
from inventory.core.manifest_reader import read_manifest
from inventory.source.source_count import count_directory, listed_files, quiet_rapidyaml, read_by_reconciler

# ----- scalars -------------------------------------------------------------------------------------------------
PLAIN = [
    *("=", "<<", "y", "Y", "yes", "on", "No", "off", "n", "~", "null", "NULL", "true", "FALSE"),
    *("0777", "0o17", "0x1F", "0b101", "-0b11", "1:20", "190:20:30", "1_000", "+1", "08", "-0", "0"),
    *(".5", "1.", "1e3", "1e999", ".nan", ".Inf", "-.inf", "3.14", "99999999999999999999"),
    *(
        "18446744073709551615",
        "2024-02-30",
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "2001-12-14 21:59:43",
    ),
    *("v1", "apps/v1", "a/b/c", "/", "g/", "ConfigMap", "List", "ConfigMapList", "Secret", "caf\u00e9"),
    *("a b", "x\u0085y", "x\u2028y", "\u00a0v1", "a#b", "a #b", "%x", "@x"),
]
TAGGED = [
    *("!!str 5", "!!int 7", "!!int x", "!!float 1", "!!float .nan", "!!bool yes", "!!null ~", "!!null x"),
    *("!!binary aGVsbG8=", "!!binary 'a*'", "!foo bar", "! 5", "!!timestamp 2001-01-01", "!!timestamp x"),
    *("!!str", "!<tag:yaml.org,2002:str> 9", "!!merge <<"),
]
NAMES = ["a", "b", "cm-1", "", "x y", "\u00e9"]


def quoted(text: str, double: bool) -> str:
    if double:
        return json.dumps(text)
    return "'" + text.replace("'", "''") + "'"


tricky = st.one_of(
    st.sampled_from(PLAIN),
    st.builds(quoted, st.sampled_from([*PLAIN, *NAMES]), st.booleans()),
    st.sampled_from(TAGGED),
    st.sampled_from(["&a v1", "*a", "&b ConfigMap", "*b", "&c [1]", "*c"]),
)
# Mostly plain words (so that most generated objects are valid and counted), now and then a trap.
scalar = st.one_of(st.sampled_from(["a", "b", "x y", "1", "v1", "'q'", '"d"']), tricky)


def sometimes(
    usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], one_in: int = 5
) -> st.SearchStrategy[Any]:
    """`rare` once in `one_in` draws, `usual` otherwise."""
    return st.integers(1, one_in).flatmap(lambda n: rare if n == 1 else usual)


# ----- nodes, rendered in block or flow style ------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """A block scalar (`|` or `>`) whose lines may say `---` (indented: inside it, for YAML and Go)."""

    style: str
    lines: tuple[str, ...]


Node = Any  # str (a scalar as written), Block, list[Node], or list of (key, Node) pairs in a `Pairs`


@dataclass(frozen=True)
class Pairs:
    items: tuple[tuple[str, Node], ...]
    flow: bool = False


TRICKY_KEYS = [
    *("apiVersion", "kind", "metadata", "items"),
    *("Kind", "KIND", "apiversion", "APIVERSION", "\u212aind", "'kind'", '"apiVersion"'),
    *("~", "null", "yes", "1", "1.5", "<<", "'<<'", "? [a]", "? {a: b}", "? a"),
]
KEYS = ["data", "spec", "x", "y", "z-1", "'q k'"]
key = sometimes(st.sampled_from(KEYS), st.sampled_from(TRICKY_KEYS))

block = st.builds(
    Block,
    st.sampled_from(["|", ">", "|-", ">+", "|2"]),
    st.lists(st.sampled_from(["---", "--- x", "kind: Fake", "...", "a", "", "# c", "  b"]), max_size=4).map(
        tuple
    ),
)


def mappings(values: st.SearchStrategy[Node]) -> st.SearchStrategy[Pairs]:
    return st.builds(Pairs, st.lists(st.tuples(key, values), max_size=4).map(tuple), st.booleans())


values: st.SearchStrategy[Node] = st.recursive(
    sometimes(scalar, block),
    lambda children: st.one_of(st.lists(children, max_size=3), mappings(children)),
    max_leaves=8,
)


def metadata() -> st.SearchStrategy[Pairs]:
    annotations = st.lists(
        st.tuples(
            st.sampled_from(["config.kubernetes.io/local-config", "a", "b"]),
            sometimes(
                st.sampled_from(["'true'", "'false'", "x"]), st.sampled_from(["false", "1", "''", "~", "[]"])
            ),
        ),
        max_size=2,
    ).map(lambda pairs: Pairs(tuple(pairs)))
    return st.builds(
        lambda name, rest: Pairs(((("name", name),) if name is not None else ()) + tuple(rest)),
        sometimes(
            st.sampled_from(["a", "b", "cm-1"]),
            st.sampled_from(["''", "~", "5", "yes", "[a]", "{a: b}"]) | st.none(),
        ),
        st.lists(
            st.tuples(
                st.sampled_from(["namespace", "annotations", "labels"]),
                sometimes(annotations, st.sampled_from(["~", "x", "ns"])),
            ),
            max_size=2,
        ),
    )


def objects(depth: int = 2, one_in: int = 5) -> st.SearchStrategy[Pairs]:
    """A mapping shaped like a Kubernetes object, its fields a trap once in `one_in`."""
    fields: list[st.SearchStrategy[tuple[str, Node]]] = [
        st.tuples(
            st.just("apiVersion"),
            sometimes(st.sampled_from(["v1", "apps/v1", "configmanagement.gke.io/v1"]), tricky, one_in),
        ),
        st.tuples(
            st.just("kind"),
            sometimes(st.sampled_from(["ConfigMap", "Secret", "List", "FooList"]), tricky, one_in),
        ),
        st.tuples(st.just("metadata"), sometimes(metadata(), scalar, one_in)),
        st.tuples(st.just("status"), st.sampled_from(["{}", "~", "{phase: x}", ""])),
        st.tuples(key, values),
    ]
    if depth > 0:
        items = st.lists(sometimes(objects(depth - 1, one_in), scalar, one_in), max_size=3)
        fields.append(st.tuples(st.just("items"), sometimes(items, scalar, one_in)))
    return st.builds(
        lambda core, extra, flow: Pairs(tuple(core) + tuple(extra), flow),
        st.tuples(*fields[:3]).flatmap(lambda core: st.permutations(list(core))),
        st.lists(st.one_of(*fields[3:]), max_size=2),
        st.booleans(),
    )


def render(node: Node, indent: int = 0) -> str:
    """YAML text of a node, as the value that follows a key (or starts a document)."""
    pad = " " * indent
    if isinstance(node, str):
        return node
    if isinstance(node, Block):
        lines = "".join(f"\n{pad}  {line}" if line else "\n" for line in node.lines)
        return node.style + lines
    if isinstance(node, list):
        items = (f"\n{pad}- {_inline(render(item, indent + 2), indent + 2)}" for item in node)
        return "".join(items) or "[]"
    return _render_mapping(node, indent)


def _render_mapping(node: Pairs, indent: int) -> str:
    pad = " " * indent
    if not node.items:
        return "{}"
    if node.flow and all(isinstance(v, str) or (isinstance(v, Pairs) and v.flow) for _, v in node.items):
        return "{" + ", ".join(f"{k}: {render(v)}" for k, v in node.items) + "}"
    return "".join(f"\n{pad}{k}: {render(v, indent + 2)}" for k, v in node.items)


def _inline(text: str, indent: int) -> str:
    """A block mapping as a sequence item: its first key on the line of the `- `."""
    return text[1 + indent :] if text.startswith("\n") else text


def document(node: Node) -> str:
    text = render(node)
    return text[1:] + "\n" if text.startswith("\n") else text + "\n"


SEPARATORS = ["---\n", "--- \n", "---\r\n", "--- # c\n", "...\n---\n", "----\n", "---x\n", "--- |\n  t\n"]
FILLER = [
    "",
    "# only a comment\n",
    "\n\n",
    "   \n# c\n",
    "\u00a0\n",
    "\u3000# c\n",
    "\ufeff\n",
    "~\n",
    "...\n",
]


@st.composite
def yaml_files(draw: st.DrawFn) -> bytes:
    one_in = draw(st.sampled_from([4, 30]))
    docs = draw(
        st.lists(
            sometimes(objects(one_in=one_in).map(document), st.sampled_from(FILLER), 10),
            min_size=1,
            max_size=4,
        )
    )
    text = draw(
        sometimes(
            st.sampled_from(["", "---\n"]), st.sampled_from(["\ufeff", "\ufeff---\n", "%YAML 1.1\n---\n"]), 10
        )
    )
    text += docs[0]
    for doc in docs[1:]:
        text += draw(sometimes(st.just("---\n"), st.sampled_from(SEPARATORS), 10)) + doc
    if draw(st.booleans()):
        text = text.rstrip("\n")
    if draw(st.integers(0, 4)) == 0:
        text = text.replace("\n", "\r\n")
    return text.encode()


# Pieces of text put together at random: syntax the structured generator never writes.
FRAGMENTS = [
    *("apiVersion: v1\n", "kind: ConfigMap\n", "kind: List\n", "items:\n", "metadata: {name: a}\n"),
    *("metadata:\n  name: a\n", "- ", "  ", "---\n", "...\n", "a: b\n", "{", "}", "[", "]", ",", ":"),
    *(" ", "\n", "'", '"', "#c\n", "- kind: X\n", "  apiVersion: v\n", "|\n", ">\n", "null", "~", "\t"),
    *("? ", "apiVersion: ", "kind: ", "x", "&a ", "*a", "!t ", "!!int ", "2024-02-30", "=", "<<: ", "\ufeff"),
    *("\u0085", "\u2028", "\r\n", "status: {a: 1}\n", "status: {}\n", ".nan", "yes", "0o17"),
]
fragment_files = st.lists(st.sampled_from(FRAGMENTS), max_size=30).map(lambda parts: "".join(parts).encode())


def json_value(depth: int = 2) -> st.SearchStrategy[Any]:
    leaf = st.one_of(
        st.sampled_from(["v1", "ConfigMap", "List", "", "a/b/c", "a"]),
        st.integers(),
        st.none(),
        st.booleans(),
    )
    if depth == 0:
        return leaf
    return st.one_of(leaf, st.lists(json_value(depth - 1), max_size=3), json_objects(depth - 1))


def json_objects(depth: int = 2) -> st.SearchStrategy[dict[str, Any]]:
    keys = st.sampled_from(["apiVersion", "kind", "metadata", "items", "Kind", "apiversion", "x"])
    core = st.fixed_dictionaries(
        {"apiVersion": st.sampled_from(["v1", "apps/v1"]), "kind": st.sampled_from(["ConfigMap", "List"])},
        optional={
            "metadata": st.fixed_dictionaries({}, optional={"name": st.sampled_from(["a", "", "b"])}),
            "status": st.sampled_from([{}, None, {"phase": "x"}]),
        },
    )
    return st.builds(
        lambda c, extra: {**c, **extra},
        core,
        st.dictionaries(keys, json_value(depth - 1) if depth else st.none(), max_size=2),
    )


@st.composite
def json_files(draw: st.DrawFn) -> bytes:
    value = draw(st.one_of(json_objects(), json_value(1)))
    text = json.dumps(value, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 2])))
    text = draw(st.sampled_from(["", " ", "\ufeff"])) + text + draw(st.sampled_from(["", "\n", " \n", "x"]))
    return draw(
        st.sampled_from(
            [
                text,
                "",
                "\n",
                '{"kind": 5, "kind": "ConfigMap", "apiVersion": "v1", "metadata": {"name": "a"}}',
                "NaN",
            ]
        )
    ).encode()


# A directory: a few files, YAML and JSON, sometimes hidden or in a skipped folder.
FILE_NAMES = [
    "a.yaml",
    "b.yml",
    "c.json",
    ".hidden.yaml",
    "sub/d.yaml",
    ".github/e.yaml",
    "notes.txt",
    "f.JSON",
]
directories = st.dictionaries(
    st.sampled_from(FILE_NAMES),
    st.one_of(yaml_files(), fragment_files, json_files()),
    min_size=1,
    max_size=4,
)


# ----- the oracle ---------------------------------------------------------------------------------------------
class Oracle:
    """Config Sync's reader in a process of its own, asked one directory at a time (`csreader -serve`)."""

    def __init__(self, binary: Path) -> None:
        self._process = subprocess.Popen(
            [str(binary), "-serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    def read(self, directory: Path) -> dict[str, Any]:
        assert self._process.stdin is not None
        assert self._process.stdout is not None
        self._process.stdin.write(f"{directory}\n")
        self._process.stdin.flush()
        line = self._process.stdout.readline()
        if not line:
            raise RuntimeError(f"the oracle exited ({self._process.wait()}) reading {directory}")
        return dict(json.loads(line))

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        self._process.wait(timeout=10)


def oracle_binary(version: str = VERSION) -> Path:
    binary = build_configsync(version).root / "bin" / "csreader"
    if not binary.is_file():
        raise FileNotFoundError(f"{binary} is missing: build_configsync.sh {version} builds it")
    return binary


def disagreements(directory: Path, oracle: dict[str, Any]) -> list[str]:
    """Where we and Config Sync's reader differ on a directory: the files listed (or the listing
    failing), each file's objects by kind and the codes of its errors, the commit's objects and bytes."""
    root = directory.resolve()
    count = count_directory(directory)
    if oracle.get("list_error") or (count.files == 0 and count.rejected):
        listing_failed = bool(count.rejected) and count.files == 0
        return (
            []
            if oracle.get("list_error") and listing_failed
            else [f"listing: ours {count.rejected}, theirs {oracle}"]
        )
    found: list[str] = []
    theirs = {f["file"]: f for f in oracle["files"]}
    ours_listed = [
        str(p.relative_to(root)) if p.is_relative_to(root) else str(p) for p in map(Path, listed_files(root))
    ]
    if sorted(ours_listed) != sorted(f["file"] for f in oracle["files"]):
        found.append(f"files listed: ours {sorted(ours_listed)}, Config Sync's {sorted(theirs)}")
    for name, file in theirs.items():
        path = root / name
        with quiet_rapidyaml():
            read = read_manifest(path.read_bytes(), name) if read_by_reconciler(path) else None
        kinds = dict(read.kinds) if read else {}
        codes = sorted(p.code for p in read.rejected) if read else []
        if read is not None and read.unread is not None:
            found.append(f"{name}: we did not read it: {read.unread}")
        if kinds != file["kinds"] or codes != sorted(e["code"] for e in file["errors"]):
            messages = [e["message"][-200:] for e in file["errors"]]
            ours = [p.message[-200:] for p in read.rejected] if read else []
            found.append(f"{name}: ours {kinds} {codes} {ours}, Config Sync's {file['kinds']} {messages}")
    their_bytes = sum(f["bytes"] for f in oracle["files"])
    if (count.objects, count.bytes) != (oracle["objects"], their_bytes):
        found.append(
            f"totals: ours {count.objects} objects {count.bytes} B, theirs {oracle['objects']} {their_bytes} B"
        )
    return found


@dataclass
class Scratch:
    """A fresh directory per generated example, under one temporary root."""

    root: Path

    def directory(self, files: dict[str, bytes]) -> Path:
        directory = Path(tempfile.mkdtemp(dir=self.root))
        for name, data in files.items():
            path = directory / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        return directory


# ----- named cases: each corner case with what Config Sync v1.24.3 makes of it, written out by hand ----------
# (The unit tests hold our reader to these; the differential tests hold Config Sync's own reader to them.)
CM = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n"


@dataclass(frozen=True)
class Case:
    file: str
    text: str
    kinds: dict[str, int]
    codes: tuple[str, ...] = ()


CRD_WITH_EQUALS = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: alertmanagerconfigs.monitoring.coreos.com
spec:
  versions:
  - schema:
      openAPIV3Schema:
        properties:
          matchType:
            enum:
            - '!='
            - =
            - =~
            - '!~'
            type: string
"""
NAMED_CASES = {
    "a bare = in an enum (YAML 1.1's value tag) is the string =": Case(
        "crd.yaml", CRD_WITH_EQUALS, {"CustomResourceDefinition": 1}
    ),
    "an empty .json file holds nothing": Case("empty.json", "", {}),
    "a .json file of whitespace is invalid": Case("blank.json", "\n", {}, ("KNV2001",)),
    "JSON with a trailing newline": Case(
        "cm.json", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}\n', {"ConfigMap": 1}
    ),
    "JSON without a trailing newline": Case(
        "cm.json", '{"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a"}}', {"Secret": 1}
    ),
    "no metadata.name is KNV2010": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n", {}, ("KNV2010",)
    ),
    "a status field is KNV1045": Case("a.yaml", CM + "status: {phase: Active}\n", {}, ("KNV1045",)),
    "an empty status is allowed": Case("a.yaml", CM + "status: {}\n", {"ConfigMap": 1}),
    "Config Sync's own objects may have a status": Case(
        "repo.yaml",
        "apiVersion: configmanagement.gke.io/v1\nkind: Repo\nmetadata: {name: repo}\nstatus: {x: 1}\n",
        {"Repo": 1},
    ),
    "an annotation value that is not a string is KNV1054": Case(
        "a.yaml", CM + "  annotations: {replicas: 3}\n", {}, ("KNV1054",)
    ),
    "a merge key overrides an earlier key (go-yaml)": Case(
        "a.yaml", CM + "<<: {kind: Secret}\n", {"Secret": 1}
    ),
    "a later key overrides a merged one": Case("a.yaml", "<<: {kind: Secret}\n" + CM, {"ConfigMap": 1}),
    "a merge key with a scalar is invalid": Case("a.yaml", CM + "<<: x\n", {}, ("KNV2001",)),
    "a quoted << is a plain key": Case("a.yaml", CM + "'<<': x\n", {"ConfigMap": 1}),
    "yes is a boolean name (YAML 1.1)": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: yes}\n", {}, ("KNV2010",)
    ),
    "on is a boolean name": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: on}\n", {}, ("KNV2010",)
    ),
    "0o17 is a number to go-yaml": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 0o17}\n", {}, ("KNV2010",)
    ),
    "0777 is an octal number": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 0777}\n", {}, ("KNV2010",)
    ),
    "08 is a float to go-yaml": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 08}\n", {}, ("KNV2010",)
    ),
    "1:20 is a string to go-yaml (no sexagesimal)": Case(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: '1'}\ndata: {t: 1:20}\n---\napiVersion: v1\nkind: Secret\nmetadata: {name: 1:20}\n",
        {"ConfigMap": 1, "Secret": 1},
    ),
    "an impossible date is a string to go-yaml": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 2024-02-30}\n", {"ConfigMap": 1}
    ),
    "a date is a string name": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 2024-02-29}\n", {"ConfigMap": 1}
    ),
    ".nan anywhere fails the conversion to JSON": Case("a.yaml", CM + "data: {x: .nan}\n", {}, ("KNV2001",)),
    ".inf anywhere fails it too": Case("a.yaml", CM + "spec: [-.Inf]\n", {}, ("KNV2001",)),
    "a null key fails the conversion to JSON": Case("a.yaml", CM + "data: {~: x}\n", {}, ("KNV2001",)),
    "an empty key is a null key": Case("a.yaml", CM + "data:\n  : x\n", {}, ("KNV2001",)),
    "a list as a key is invalid": Case("a.yaml", CM + "data:\n  ? [a]\n  : b\n", {}, ("KNV2001",)),
    "!!str keeps a string": Case(
        "a.yaml", "apiVersion: v1\nkind: !!str ConfigMap\nmetadata: {name: !!str 5}\n", {"ConfigMap": 1}
    ),
    "!!int on text is invalid": Case("a.yaml", CM + "data: {x: !!int abc}\n", {}, ("KNV2001",)),
    "!!binary decodes": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: !!binary Y20tMQ==}\n", {"ConfigMap": 1}
    ),
    "a local tag leaves a string": Case(
        "a.yaml", "apiVersion: v1\nkind: !custom ConfigMap\nmetadata: {name: a}\n", {"ConfigMap": 1}
    ),
    "anchors and aliases in one document": Case(
        "a.yaml", "apiVersion: &v v1\nkind: ConfigMap\nmetadata: {name: a}\ndata: {x: *v}\n", {"ConfigMap": 1}
    ),
    "an alias of another document's anchor is unknown": Case(
        "a.yaml", CM + "data: {x: &v v1}\n---\n" + CM + "data: {x: *v}\n", {}, ("KNV2001",)
    ),
    "an alias as the kind": Case(
        "a.yaml", "x: &k Secret\napiVersion: v1\nkind: *k\nmetadata: {name: a}\n", {"Secret": 1}
    ),
    "a duplicate kind: the last wins": Case(
        "a.yaml", "apiVersion: v1\nkind: Secret\nkind: ConfigMap\nmetadata: {name: a}\n", {"ConfigMap": 1}
    ),
    "Kind in another case is read as kind first": Case("a.yaml", CM + "Kind: 5\n", {}, ("KNV2001",)),
    "the Kelvin sign folds to k (encoding/json)": Case("a.yaml", CM + "\u212aind: 5\n", {}, ("KNV2001",)),
    "a string Kind in another case is fine": Case("a.yaml", CM + "KIND: Other\n", {"ConfigMap": 1}),
    "a Unicode line break is a line break": Case(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\ndata:\n  x: a\u2028  b\n",
        {},
        ("KNV2001",),
    ),
    "a Unicode line break in a quoted scalar": Case(
        "a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: 'a\u0085b'}\n", {"ConfigMap": 1}
    ),
    "a paragraph separator in a quoted kind is kept": Case(
        "a.yaml", "apiVersion: v1\nkind: 'Config\u2029  Map'\nmetadata: {name: a}\n", {"Config\u2029Map": 1}
    ),
    "a byte order mark at the start of a file is read as text": Case(
        "a.yaml", "\ufeff" + CM, {}, ("KNV2010",)
    ),
    "a byte order mark right after --- is skipped": Case("a.yaml", "---\ufeff" + CM, {"ConfigMap": 1}),
    "empty and comment-only documents are skipped": Case(
        "a.yaml", "---\n# c\n---\n\n---\n" + CM + "---\n", {"ConfigMap": 1}
    ),
    "an indented --- inside a block scalar does not split": Case(
        "a.yaml", CM + "data:\n  x: |\n    ---\n    kind: Fake\n", {"ConfigMap": 1}
    ),
    "---x at the start of a line splits the file": Case(
        "a.yaml", CM + "data:\n  x: |\n    a\n---x: 1\n", {}, ("KNV2001",)
    ),
    "a document end marker ends the piece's document": Case(
        "a.yaml", CM + "...\nignored: [\n", {"ConfigMap": 1}
    ),
    "a flow mapping in YAML is decoded as JSON": Case(
        "a.yaml", "{apiVersion: v1, kind: ConfigMap, metadata: {name: a}}\n", {}, ("KNV2001",)
    ),
    "JSON in a YAML file": Case(
        "a.yaml", '{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}\n', {"ConfigMap": 1}
    ),
    "a List's items are the objects": Case(
        "a.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- " + CM.replace("\n", "\n  ").rstrip() + "\n",
        {"ConfigMap": 1},
    ),
    "a List of Lists": Case(
        "a.yaml",
        "apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: List\n  items:\n  - {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
        {"Secret": 1},
    ),
    "any kind with a list of items is a List": Case(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nitems:\n- {apiVersion: v1, kind: Secret, metadata: {name: s}}\n",
        {"Secret": 1},
    ),
    "a List item that is no object": Case(
        "a.yaml", "apiVersion: v1\nkind: List\nitems: [a]\n", {}, ("KNV9999",)
    ),
    "a local-config object is left out": Case(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  annotations: {config.kubernetes.io/local-config: 'true'}\n",
        {},
    ),
    "local-config false is applied": Case(
        "a.yaml", CM + "  annotations: {config.kubernetes.io/local-config: 'false'}\n", {"ConfigMap": 1}
    ),
    "a null local-config value is local": Case(
        "a.yaml", CM + "  annotations: {config.kubernetes.io/local-config: ~}\n", {}
    ),
    "CRLF line ends": Case("a.yaml", (CM + "---\n" + CM).replace("\n", "\r\n"), {"ConfigMap": 2}),
    "a top-level list is invalid": Case("a.yaml", "- " + CM.replace("\n", "\n  "), {}, ("KNV2001",)),
    "a piece of only ~ is invalid": Case("a.yaml", CM + "---\n~\n", {}, ("KNV2001",)),
    "an apiVersion with two slashes is invalid": Case(
        "a.yaml", "apiVersion: a/b/c\nkind: ConfigMap\nmetadata: {name: a}\n", {}, ("KNV2001",)
    ),
    "a %YAML directive is cut off by the split": Case("a.yaml", "%YAML 1.1\n---\n" + CM, {}, ("KNV2001",)),
}
