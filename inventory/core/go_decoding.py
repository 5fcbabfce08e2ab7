"""What Go makes of a manifest: YAML as go-yaml v2 decodes it (through sigs.k8s.io/yaml's conversion to
JSON, as Kubernetes' decoders call it), and JSON as Go's encoding/json and Kubernetes' util/json decode
it. Pure: bytes in, Python values out, `GoDecodeError` where Go returns an error.

Why not PyYAML's own loader: it implements YAML 1.1 as Python reads it, and Config Sync reads YAML as
go-yaml v2 does. They disagree on plain scalars (`=` is PyYAML's value tag and go-yaml's string; `0o17`,
`0b1`, `+1` and `08` are numbers to go-yaml; `1:20` is a number only to PyYAML; a date PyYAML cannot
construct is a string to go-yaml), on merge keys (a later merged key overrides an earlier explicit one in
go-yaml), and on what fails (a null mapping key, `.nan` or `.inf` anywhere, a key that is a list, fail
the conversion to JSON). The syntax is the same: go-yaml v2 is a port of libyaml, and PyYAML's C parser
(libyaml itself) gives the events; the resolution and construction below follow go-yaml v2 as vendored
in Config Sync v1.24.3 (go.yaml.in/yaml/v2 v2.4.4, sigs.k8s.io/yaml v1.6.0).

Values: Go strings, numbers, booleans and nil are Python str, int, float, bool and None; mappings are
dicts. Before the conversion to JSON a mapping's keys are wrapped with their Go type (`GoKey`), because
Go tells the key `true` from `1` and `1.0`, and Python does not.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from typing import Any

import yaml
from yaml._yaml import CParser

_TAG = "tag:yaml.org,2002:"
STR, BOOL, INT, FLOAT, NULL = (f"{_TAG}{t}" for t in ("str", "bool", "int", "float", "null"))
TIMESTAMP, BINARY, MERGE = f"{_TAG}timestamp", f"{_TAG}binary", f"{_TAG}merge"
_RESOLVABLE = frozenset(("", STR, BOOL, INT, FLOAT, NULL, TIMESTAMP))


class GoDecodeError(ValueError):
    """Go returns an error for this input; the message says what Go says."""


class BeyondUs(ValueError):
    """Go reads this input but we cannot (a nesting deeper than Python's recursion allows): the caller
    must not take it for a rejection."""


# ----- plain scalars, as go-yaml v2 resolves them ---------------------------------------------------------
_WORDS: dict[str, tuple[str, Any]] = {
    **{w: (BOOL, True) for w in ("y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON")},
    **{
        w: (BOOL, False) for w in ("n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF")
    },
    **{w: (NULL, None) for w in ("", "~", "null", "Null", "NULL")},
    **{w: (FLOAT, math.nan) for w in (".nan", ".NaN", ".NAN")},
    **{w: (FLOAT, math.inf) for w in (".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF")},
    **{w: (FLOAT, -math.inf) for w in ("-.inf", "-.Inf", "-.INF")},
    "<<": (MERGE, "<<"),
}
# go-yaml looks at the first byte: a sign, a digit, a letter of its words, or a dot may be more than a string.
_HINTS = {**dict.fromkeys("+-", "S"), **dict.fromkeys("0123456789", "D"), **dict.fromkeys("yYnNtTfFoO~", "M")}
_HINTS["."] = "."
_YAML_FLOAT = re.compile(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?")
_DOT_FLOAT = re.compile(r"\.[0-9]+([eE][-+]?[0-9]+)?")
_INT64_MAX, _UINT64_MAX = (1 << 63) - 1, (1 << 64) - 1
_DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def _parse_uint(text: str, base: int = 0) -> int | None:
    """Go's strconv.ParseUint(text, base, 64), without underscores (go-yaml removes them first)."""
    if base == 0:
        base = 10
        if text[:1] == "0":
            prefix = text[1:2].lower()
            if len(text) >= 3 and prefix in "box":
                base, text = {"b": 2, "o": 8, "x": 16}[prefix], text[2:]
            else:
                base, text = 8, text[1:]
                if not text:
                    return 0
    if not text:
        return None
    value = 0
    for char in text.lower():
        digit = _DIGITS.find(char)
        if digit < 0 or digit >= base:
            return None
        value = value * base + digit
    return value if value <= _UINT64_MAX else None


def _parse_int(text: str, base: int = 0) -> int | None:
    """Go's strconv.ParseInt(text, base, 64)."""
    sign, digits = (-1, text[1:]) if text[:1] == "-" else (1, text[1:] if text[:1] == "+" else text)
    magnitude = _parse_uint(digits, base)
    if magnitude is None or magnitude > _INT64_MAX + (sign < 0):
        return None
    return sign * magnitude


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None  # Go: out of range is an error


def _number(text: str) -> tuple[str, Any] | None:
    """An int or float as go-yaml finds one in a scalar that starts with a sign or a digit."""
    plain = text.replace("_", "")
    for parse in (_parse_int, _parse_uint):
        number = parse(plain)
        if number is not None:
            return INT, number
    if _YAML_FLOAT.fullmatch(plain):
        value = _finite(plain)
        if value is not None:
            return FLOAT, value
    if plain.startswith("0b"):
        number = _parse_int(plain[2:], 2)
        number = number if number is not None else _parse_uint(plain[2:], 2)
        if number is not None:
            return INT, number
    elif plain.startswith("-0b"):
        number = _parse_int("-" + plain[3:], 2)
        if number is not None:
            return INT, number
    return None


_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{1,2})-(\d{1,2})"
    r"(?:(?:[Tt](\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d{1,9})?(?:Z|[-+]\d{2}:\d{2}))"
    r"|(?: (\d{1,2}):(\d{1,2}):(\d{1,2})(?:\.\d{1,9})?))?"
)


def _is_timestamp(text: str) -> bool:
    """go-yaml's timestamp formats (as Go's time.Parse accepts them, ranges checked)."""
    match = _TIMESTAMP.fullmatch(text)
    if match is None:
        return False
    year, month, day = (int(g) for g in match.group(1, 2, 3))
    clock = [int(g) for g in match.groups()[3:] if g is not None]
    try:
        date(year, month, day)
    except ValueError:
        return False
    return not clock or (clock[0] < 24 and clock[1] < 60 and clock[2] < 60)


def resolve(tag: str, text: str) -> tuple[str, Any]:
    """(tag, value) of a scalar, as go-yaml v2's resolve gives them; GoDecodeError where an explicit
    tag does not fit the text (`!!int abc`). Timestamps come back as their text: go-yaml decodes them
    as strings into an untyped value."""
    if tag not in _RESOLVABLE:
        return tag, text
    found = _resolve_untagged(tag, text)
    if tag in ("", found[0], STR):
        return found
    if tag == FLOAT and found[0] == INT:
        return FLOAT, float(found[1])
    short = {found[0]: f"!!{found[0].removeprefix(_TAG)}", tag: f"!!{tag.removeprefix(_TAG)}"}
    raise GoDecodeError(f"yaml: cannot decode {short[found[0]]} `{text}` as a {short[tag]}")


def _resolve_untagged(tag: str, text: str) -> tuple[str, Any]:
    hint = _HINTS.get(text[:1], "") if text else "N"
    if not hint or tag == STR:
        return STR, text
    word = _WORDS.get(text)
    if word is not None:
        return word
    if hint == "." and _DOT_FLOAT.fullmatch(text):
        value = _finite(text)
        if value is not None:
            return FLOAT, value
    if hint in "DS":
        if tag in ("", TIMESTAMP) and _is_timestamp(text):
            return TIMESTAMP, text
        number = _number(text)
        if number is not None:
            return number
    return STR, text


def plain_scalar(text: str) -> Any:
    """The value of an untagged plain scalar (the common case: no error is possible)."""
    if text and text[0] not in _HINTS:
        return text  # what most scalars are: go-yaml does not look further
    return resolve("", text)[1]


# ----- documents, as go-yaml v2 decodes them into an untyped value ----------------------------------------
@dataclass(frozen=True)
class GoKey:
    """A mapping key with its Go type (`str`, `int`, `uint64`, `float64`, `bool`, `nil`)."""

    type: str
    value: Any


@dataclass(eq=False)
class _Node:
    kind: str  # scalar, mapping, sequence, alias
    tag: str = ""
    value: str = ""  # a scalar's text, an alias's anchor name
    implicit: bool = False  # a plain scalar (or one tagged `!`): resolved from its text
    children: list[_Node] = field(default_factory=list)
    target: _Node | None = None  # what an alias names


def _parse_first_document(data: bytes) -> _Node | None:
    """The first document's node tree, as go-yaml v2's parser builds it (its Unmarshal reads only the
    first); None for a stream with no document."""
    parser = CParser(data)
    try:
        parser.get_event()
        if isinstance(parser.peek_event(), yaml.StreamEndEvent):
            return None
        parser.get_event()  # the document's start
        anchors: dict[str, _Node] = {}
        root = _node(parser, anchors)
        if not isinstance(parser.get_event(), yaml.DocumentEndEvent):
            raise GoDecodeError("yaml: expected the end of the document")
        return root
    except yaml.MarkedYAMLError as error:
        raise GoDecodeError(_go_parse_message(error)) from error
    except yaml.YAMLError as error:  # a reader error: not UTF-8 or UTF-16, a control character
        raise GoDecodeError(f"yaml: {error}") from error
    finally:
        parser.dispose()


def _go_parse_message(error: yaml.MarkedYAMLError) -> str:
    """go-yaml's wording: `yaml: line N: problem` (a scanner error counts lines from 1)."""
    line = 0
    if error.problem_mark is not None and error.problem_mark.line:
        line = error.problem_mark.line + isinstance(error, yaml.scanner.ScannerError)
    elif error.context_mark is not None:
        line = error.context_mark.line
    return (
        f"yaml: {f'line {line}: ' if line else ''}{error.problem or 'unknown problem parsing YAML content'}"
    )


def _node(parser: CParser, anchors: dict[str, _Node]) -> _Node:
    event: Any = parser.get_event()
    if isinstance(event, yaml.AliasEvent):
        name = str(event.anchor)
        target = anchors.get(name)
        if target is None:
            raise GoDecodeError(f"yaml: unknown anchor '{name}' referenced")
        return _Node("alias", value=name, target=target)
    if isinstance(event, yaml.ScalarEvent):
        node = _Node("scalar", event.tag or "", event.value, implicit=event.implicit[0])
    else:
        node = _Node("mapping" if isinstance(event, yaml.MappingStartEvent) else "sequence", event.tag or "")
    if event.anchor is not None:
        anchors[event.anchor] = node  # before the children: an alias inside may name its parent
    if node.kind != "scalar":
        end = yaml.MappingEndEvent if node.kind == "mapping" else yaml.SequenceEndEvent
        while not isinstance(parser.peek_event(), end):
            node.children.append(_node(parser, anchors))
        parser.get_event()
    return node


# go-yaml v2 refuses documents whose decoding is mostly alias expansion (a "billion laughs").
_ALIAS_LOW, _ALIAS_HIGH = 400_000, 4_000_000


def _allowed_alias_ratio(decodes: int) -> float:
    if decodes <= _ALIAS_LOW:
        return 0.99
    if decodes >= _ALIAS_HIGH:
        return 0.10
    return 0.99 - 0.89 * (decodes - _ALIAS_LOW) / (_ALIAS_HIGH - _ALIAS_LOW)


@dataclass
class _Decoder:
    """go-yaml v2's decoder into an untyped value, with its count of decodes and alias expansions."""

    decodes: int = 0
    aliased: int = 0
    alias_depth: int = 0
    expanding: set[int] = field(default_factory=set)

    def _counted(self) -> None:
        self.decodes += 1
        if self.alias_depth:
            self.aliased += 1
        excessive = self.aliased / self.decodes > _allowed_alias_ratio(self.decodes)
        if self.aliased > 100 and self.decodes > 1000 and excessive:
            raise GoDecodeError("yaml: document contains excessive aliasing")

    def value(self, node: _Node) -> Any:
        self._counted()
        if node.kind == "alias":
            return self._alias(node, self.value)
        if node.kind == "scalar":
            return self._scalar(node)
        if node.kind == "sequence":
            return [self.value(child) for child in node.children]
        mapping: dict[GoKey, Any] = {}
        self._pairs(node, mapping)
        return mapping

    def _alias(self, node: _Node, then: Callable[[_Node], Any]) -> Any:
        if id(node) in self.expanding:
            raise GoDecodeError(f"yaml: anchor '{node.value}' value contains itself")
        assert node.target is not None
        self.expanding.add(id(node))
        self.alias_depth += 1
        try:
            return then(node.target)
        finally:
            self.alias_depth -= 1
            self.expanding.discard(id(node))

    @staticmethod
    def _scalar(node: _Node) -> Any:
        if not node.tag and not node.implicit:
            return node.value  # quoted, or a block scalar: a string
        tag, value = resolve(node.tag, node.value)
        return _binary(value) if tag == BINARY else value

    def _pairs(self, node: _Node, mapping: dict[GoKey, Any]) -> None:
        """A mapping's pairs into `mapping`, in order: a later key replaces an earlier one, merged too."""
        pairs = node.children
        for key_node, value_node in zip(pairs[::2], pairs[1::2], strict=True):
            if _is_merge(key_node):
                self._merge(value_node, mapping)
                continue
            key = self.value(key_node)
            if isinstance(key, dict | list):
                raise GoDecodeError(f"yaml: invalid map key: {_go_repr(key)}")
            mapping[_go_key(key, key_node)] = self.value(value_node)

    def _merge(self, node: _Node, mapping: dict[GoKey, Any]) -> None:
        """`<<`: a mapping, an alias of one, or a sequence of those (the last first, so the first wins)."""
        sources = list(reversed(node.children)) if node.kind == "sequence" else [node]
        for source in sources:
            named = source.target if source.kind == "alias" else source
            if named is None or named.kind != "mapping":
                raise GoDecodeError("yaml: map merge requires map or sequence of maps as the value")
            self._merge_one(source, mapping)

    def _merge_one(self, node: _Node, mapping: dict[GoKey, Any]) -> None:
        self._counted()
        if node.kind == "alias":
            self._alias(node, lambda named: self._merge_one(named, mapping))
        else:
            self._pairs(node, mapping)


def _is_merge(node: _Node) -> bool:
    return node.kind == "scalar" and node.value == "<<" and (node.implicit or node.tag == MERGE)


def _binary(text: str) -> str:
    """A `!!binary` scalar: Go's standard base64 (line breaks ignored), its bytes as Go's JSON writes
    a string (invalid UTF-8 replaced)."""
    try:
        raw = base64.b64decode(text.replace("\n", "").replace("\r", ""), validate=True)
    except (binascii.Error, ValueError) as error:
        raise GoDecodeError("yaml: !!binary value contains invalid base64 data") from error
    return raw.decode("utf-8", "replace")


def _go_key(key: Any, node: _Node) -> GoKey:
    if key is None:
        return GoKey("nil", None)
    if isinstance(key, bool):
        return GoKey("bool", key)
    if isinstance(key, int):
        return GoKey("int" if key <= _INT64_MAX else "uint64", key)
    if isinstance(key, float):
        return GoKey("float64", key if not math.isnan(key) else (math.nan, id(node)))
    return GoKey("str", key)


def _go_repr(value: Any) -> str:
    return "map[interface {}]interface {}{...}" if isinstance(value, dict) else "[]interface {}{...}"


def decode_yaml(data: bytes) -> Any:
    """sigs.k8s.io/yaml's YAMLToJSON of one YAML text, read back as JSON: the first document as Go's
    JSON sees it (string keys; numbers, strings, booleans, None), or GoDecodeError."""
    data, placeholder = _bom_as_content(data or b"\n")
    try:
        root = _parse_first_document(data)
        value = None if root is None else _jsonable(_Decoder().value(root))
    except RecursionError as error:
        raise BeyondUs("nested deeper than this reader follows") from error
    return value if placeholder is None else _restored(value, placeholder)


_BOM = "\ufeff".encode()


def _bom_as_content(data: bytes) -> tuple[bytes, str | None]:
    """go-yaml v2 skips a byte order mark only at the very start of its input (where its reader
    detects the encoding), and reads one anywhere else as a character of the text, also at the start of
    a line, where libyaml skips it (go-yaml's port tests the start of its buffer, not the current
    position). Such marks are given to libyaml as a private-use character the text does not hold, put
    back into the decoded strings by `_restored`. (The port's test can succeed when its buffer happens
    to start with a mark at the start of a line, near the input's end; that case is not followed.)"""
    body = data[len(_BOM) :] if data.startswith(_BOM) else data
    if _BOM not in body:
        return data, None
    text = body.decode("utf-8", "surrogateescape")
    placeholder = next(chr(c) for c in range(0xE000, 0xF900) if chr(c) not in text)
    marked = text.replace("\ufeff", placeholder).encode("utf-8", "surrogateescape")
    return data[: len(data) - len(body)] + marked, placeholder


def _restored(value: Any, placeholder: str) -> Any:
    if isinstance(value, str):
        return value.replace(placeholder, "\ufeff")
    if isinstance(value, list):
        return [_restored(item, placeholder) for item in value]
    if isinstance(value, dict):
        return {_restored(k, placeholder): _restored(v, placeholder) for k, v in value.items()}
    return value


def _jsonable(value: Any) -> Any:
    """sigs.k8s.io/yaml's conversion to a JSON-able value, and what Go's json.Marshal refuses."""
    if isinstance(value, dict):
        return {_key_text(key, item): _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        raise GoDecodeError(f"json: unsupported value: {_float_key(value)}")
    return value


def _key_text(key: GoKey, value: Any) -> str:
    if key.type == "str":
        return str(key.value)
    if key.type == "int":
        return str(key.value)
    if key.type == "bool":
        return "true" if key.value else "false"
    if key.type == "float64":
        return _float_key(math.nan if isinstance(key.value, tuple) else key.value)
    type_name = "<nil>" if key.type == "nil" else key.type
    raise GoDecodeError(f"unsupported map key of type: {type_name}, key: {key.value!r}, value: {value!r}")


def _float_key(value: float) -> str:
    """Go's strconv.FormatFloat(value, 'g', -1, 32), with go-yaml's names for the infinities and NaN:
    the shortest digits that give the same 32-bit float, an exponent below 1e-4 and from 1e6 on."""
    if math.isnan(value):
        return ".nan"
    if math.isinf(value) or abs(value) > _FLOAT32_MAX:
        return ".inf" if value > 0 else "-.inf"
    single = _float32(value)
    text = next(t for t in (f"{single:.{n}e}" for n in range(9)) if _float32(float(t)) == single)
    mantissa, power = text.split("e")
    sign, digits = ("-", mantissa[1:]) if mantissa.startswith("-") else ("", mantissa)
    digits = digits.replace(".", "").rstrip("0") or "0"
    exponent = int(power)
    if exponent < -4 or exponent >= 6:
        fraction = f".{digits[1:]}" if len(digits) > 1 else ""
        return f"{sign}{digits[0]}{fraction}e{'-' if exponent < 0 else '+'}{abs(exponent):02d}"
    if exponent < 0:
        return f"{sign}0.{'0' * (-exponent - 1)}{digits}"
    whole, fraction = digits[: exponent + 1].ljust(exponent + 1, "0"), digits[exponent + 1 :]
    return f"{sign}{whole}{'.' + fraction if fraction else ''}"


_FLOAT32_MAX = 3.4028234663852886e38


def _float32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


# ----- JSON, as Go reads it -------------------------------------------------------------------------------
class Pairs(dict[str, Any]):
    """A JSON object as Go's decoder into a map leaves it (the last of duplicate keys wins), with every
    key in the order written (what Go's decoder into a struct goes through)."""

    pairs: list[tuple[str, Any]]


def _object(pairs: list[tuple[str, Any]]) -> Pairs:
    mapping = Pairs(pairs)
    mapping.pairs = pairs
    return mapping


def _go_int(text: str) -> int | float:
    """util/json: an int64 where it fits, else a float64 (out of range: Go's error)."""
    value = int(text)
    if -_INT64_MAX - 1 <= value <= _INT64_MAX:
        return value
    return _go_float(text)


def _go_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise GoDecodeError(f'strconv.ParseFloat: parsing "{text[:32]}": value out of range')
    return value


def _no_constant(name: str) -> Any:
    raise GoDecodeError(f"invalid character '{name[0]}' looking for beginning of value")


_JSON = json.JSONDecoder(
    object_pairs_hook=_object, parse_int=_go_int, parse_float=_go_float, parse_constant=_no_constant
)


def decode_json(data: bytes) -> Any:
    """One JSON value as Go reads it into an untyped value (objects are `Pairs`), or GoDecodeError.
    Go keeps invalid UTF-8 inside strings (replaced); outside them it is a syntax error either way."""
    text = data.decode("utf-8", "replace")
    try:
        return _JSON.decode(text)
    except json.JSONDecodeError as error:
        raise GoDecodeError(
            f"invalid JSON: {error.msg} (line {error.lineno} column {error.colno})"
        ) from error
    except RecursionError as error:
        raise BeyondUs("nested deeper than this reader follows") from error


# ----- Go's unicode.IsSpace and bytes.EqualFold, for the reader's checks -----------------------------------
GO_SPACES = frozenset("\t\n\v\f\r \x85\xa0\u1680\u2028\u2029\u202f\u205f\u3000") | frozenset(
    chr(c) for c in range(0x2000, 0x200B)
)
# The runes Go's simple case folding takes for each letter of the two keys it matches without case.
_FOLDS = {"k": "kK\u212a", "s": "sS\u017f"}


def folds_to(key: str, target: str) -> bool:
    """Go's bytes.EqualFold(key, target) for an ASCII `target` (encoding/json matches struct fields so)."""
    if len(key) != len(target):
        return False
    if key.isascii():
        return key.lower() == target.lower()
    return all(k in _FOLDS.get(t.lower(), t.lower() + t.upper()) for k, t in zip(key, target, strict=True))
