"""Sync count: the number of entries in an inventory ResourceGroup, and how many of each kind, read from
raw JSON bytes.

Pure (no I/O). Inventories can hold 100,000 entries (8 MB of JSON per watch event), so the count is
taken without building Python objects: simdjson parses the document in C and gives the length of
`spec.resources`; a byte-level check confirms every entry is a flat object with a non-empty `kind` and
`name`, and the kinds are read by one regular expression over the same bytes. Whenever that quick check
cannot vouch for the entries it says so, and the exact check (`orjson` decode of the entries) decides. A
malformed inventory yields an error, never a count.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import simdjson

from inventory.core.counts import Kinds, kinds_of

_SPEC = b'"spec":{'
_RESOURCES = b'"resources":['
# An entry's kind as the API server writes it; a kind with an escaped character does not match, so the
# kinds found then fall short of the count and the exact check reads them.
_KIND = re.compile(rb'"kind":"([^"\\]+)"')


@dataclass(frozen=True)
class InventorySummary:
    """What the service keeps of a ResourceGroup: its identity, its entry count and how many of each kind
    (the inventory alone prices each object by its kind, as the source does), not its entries."""

    namespace: str
    name: str
    resource_version: str
    labels: Mapping[str, str]
    count: int | None
    error: str | None = None
    kinds: Kinds | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


class InventoryCounter:
    """Summarizes ResourceGroups from raw JSON. Holds one reusable simdjson parser (not thread-safe)."""

    # simdjson keeps buffers of about three times the largest document parsed; after a document
    # bigger than this the parser is replaced so a long-running service does not hold them.
    RECYCLE_AFTER_BYTES = 1 << 20

    def __init__(self) -> None:
        self._parser = simdjson.Parser()

    def summarize(self, raw: bytes) -> InventorySummary:
        """Summarize a ResourceGroup given as a bare JSON object."""
        return self._summarize(raw, lambda document: document)

    def summarize_event(self, raw: bytes) -> tuple[str, InventorySummary]:
        """Summarize the ResourceGroup of a watch event; also return the event type."""
        event_type = ""

        def object_of(document: Any) -> Any:
            nonlocal event_type
            event_type = str(document.get("type", ""))
            return document["object"]

        summary = self._summarize(raw, object_of)
        return event_type, summary

    def _summarize(self, raw: bytes, locate: Callable[[Any], Any]) -> InventorySummary:
        try:
            return self._summarize_parsed(raw, locate)
        finally:
            if len(raw) > self.RECYCLE_AFTER_BYTES:
                self._parser = simdjson.Parser()

    def _summarize_parsed(self, raw: bytes, locate: Callable[[Any], Any]) -> InventorySummary:
        try:
            obj = locate(self._parser.parse(raw))
            metadata = obj["metadata"]
            namespace, name = str(metadata.get("namespace", "")), str(metadata["name"])
            resource_version = str(metadata.get("resourceVersion", ""))
            labels_node = metadata.get("labels")
            labels: dict[str, str] = labels_node.as_dict() if labels_node is not None else {}
            resources = _resources_node(obj)
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            # AttributeError: `metadata` or `labels` of another JSON type than an object.
            return InventorySummary("", "", "", {}, None, f"not a ResourceGroup object: {error}")
        if resources is None:
            return InventorySummary(namespace, name, resource_version, labels, 0)
        if not isinstance(resources, simdjson.Array):
            not_list = f"spec.resources is a {type(resources).__name__}, not a list"
            return InventorySummary(namespace, name, resource_version, labels, None, not_list)
        count = len(resources)
        # When the quick check cannot vouch for the entries, decide exactly (slower, rare).
        kinds = quick_kinds(raw, count) if count else Counter[str]()
        if kinds is None:
            entries = orjson.loads(resources.mini)
            problem = exact_entries_problem(entries)
            if problem is not None:
                return InventorySummary(namespace, name, resource_version, labels, None, problem)
            kinds = Counter(entry["kind"] for entry in entries)
        return InventorySummary(namespace, name, resource_version, labels, count, kinds=kinds_of(kinds))


def _resources_node(obj: Any) -> Any:
    spec = obj.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, simdjson.Object):
        raise TypeError(f"spec is a {type(spec).__name__}, not an object")
    return spec.get("resources")


def resources_span(raw: bytes) -> tuple[int, int] | None:
    """Where the `spec.resources` array is in `raw` (start, end), located by the API server's key order.

    A guess: callers only trust it after its contents match counts they got from a real parser.
    """
    spec = raw.find(_SPEC)
    if spec < 0:
        return None
    start = raw.find(_RESOURCES, spec)
    if start < 0:
        return None
    start += len(_RESOURCES) - 1
    end = raw.find(b"]", start)
    return (start, end + 1) if end > 0 else None


def quick_entries_check(raw: bytes, count: int) -> bool | None:
    """True when every one of `count` entries is surely a flat object with a non-empty kind and name;
    None when this byte-level check cannot tell (then `exact_entries_problem` decides).

    Why it is sound: `"kind":"` cannot occur inside a JSON string (the inner quotes would be escaped),
    so in an array of exactly `count` objects with no nested object, `count` occurrences of each key
    pattern and no empty values mean each object has its kind and name. Counted in place, no copy.
    """
    span = resources_span(raw)
    return True if span is not None and _vouched(raw, span, count) else None


def _vouched(raw: bytes, span: tuple[int, int], count: int) -> bool:
    start, end = span
    for pattern in (b"{", b"}", b'"kind":"', b'"name":"'):
        if raw.count(pattern, start, end) != count:
            return False
    return raw.find(b'"kind":""', start, end) < 0 and raw.find(b'"name":""', start, end) < 0


def quick_kinds(raw: bytes, count: int) -> Counter[str] | None:
    """How many entries of each kind, when `quick_entries_check` vouches for the `count` entries and each
    kind reads plainly; None when the exact check must decide."""
    span = resources_span(raw)
    if span is None or not _vouched(raw, span, count):
        return None
    kinds = Counter(_KIND.findall(raw, *span))
    if kinds.total() != count:
        return None
    named = Counter[str]()
    for kind, n in kinds.items():
        named[kind.decode("utf-8", "replace")] += n
    return named


def exact_entries_problem(entries: Any) -> str | None:
    """Describe the first malformed entry (not an object, or without a non-empty kind and name)."""
    if not isinstance(entries, list):
        return f"spec.resources is a {type(entries).__name__}, not a list"
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            return f"spec.resources[{index}] is a {type(entry).__name__}, not an object"
        for field in ("kind", "name"):
            value = entry.get(field)
            if not isinstance(value, str) or not value:
                return f"spec.resources[{index}] has no {field}"
    return None


def count_entries_plainly(raw: bytes) -> int:
    """The obvious way (full decode of a watch event), the benchmark baseline and a test oracle."""
    return len(orjson.loads(raw)["object"].get("spec", {}).get("resources") or [])
