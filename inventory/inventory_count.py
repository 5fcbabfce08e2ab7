"""Sync count: the number of entries in an inventory ResourceGroup, read from raw JSON bytes.

Pure (no I/O). Inventories can hold 100,000 entries (8 MB of JSON per watch event), so the count is
taken without building Python objects: simdjson parses the document in C and gives the length of
`spec.resources`; a byte-level check confirms every entry is a flat object with a non-empty `kind` and
`name`. Whenever that quick check cannot vouch for the entries it says so, and the exact check
(`orjson` decode of the entries) decides. A malformed inventory yields an error, never a count.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import simdjson

_SPEC = b'"spec":{'
_RESOURCES = b'"resources":['


@dataclass(frozen=True)
class InventorySummary:
    """What the service keeps of a ResourceGroup: its identity and its entry count, not its entries."""

    namespace: str
    name: str
    resource_version: str
    labels: Mapping[str, str]
    count: int | None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.error is None


class InventoryCounter:
    """Summarizes ResourceGroups from raw JSON. Holds one reusable simdjson parser (not thread-safe)."""

    def __init__(self) -> None:
        self._parser = simdjson.Parser()

    def summarize(self, raw: bytes, pointer: str = "") -> InventorySummary:
        """Summarize the ResourceGroup at JSON `pointer` in `raw` ("" for a bare object, "/object" for a
        watch event)."""
        try:
            document: Any = self._parser.parse(raw)
            obj = document.at_pointer(pointer) if pointer else document
            metadata = obj["metadata"]
            namespace, name = str(metadata.get("namespace", "")), str(metadata["name"])
            resource_version = str(metadata.get("resourceVersion", ""))
            labels_node = metadata.get("labels")
            labels: dict[str, str] = labels_node.as_dict() if labels_node is not None else {}
            resources = _resources_node(obj)
        except (ValueError, KeyError, TypeError) as error:
            return InventorySummary("", "", "", {}, None, f"not a ResourceGroup object: {error}")
        if resources is None:
            return InventorySummary(namespace, name, resource_version, labels, 0)
        if not isinstance(resources, simdjson.Array):
            not_list = f"spec.resources is a {type(resources).__name__}, not a list"
            return InventorySummary(namespace, name, resource_version, labels, None, not_list)
        count = len(resources)
        # When the quick check cannot vouch for the entries, decide exactly (slower, rare).
        vouched = quick_entries_check(raw, count) if count else True
        problem = None if vouched else exact_entries_problem(orjson.loads(resources.mini))
        if problem is not None:
            return InventorySummary(namespace, name, resource_version, labels, None, problem)
        return InventorySummary(namespace, name, resource_version, labels, count)


def _resources_node(obj: Any) -> Any:
    spec = obj.get("spec")
    if spec is None:
        return None
    if not isinstance(spec, simdjson.Object):
        raise TypeError(f"spec is a {type(spec).__name__}, not an object")
    return spec.get("resources")


def resources_slice(raw: bytes) -> bytes | None:
    """The bytes of the `spec.resources` array, located by the API server's key order.

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
    return raw[start : end + 1] if end > 0 else None


def quick_entries_check(raw: bytes, count: int) -> bool | None:
    """True when every one of `count` entries is surely a flat object with a non-empty kind and name;
    None when this byte-level check cannot tell (then `exact_entries_problem` decides).

    Why it is sound: `"kind":"` cannot occur inside a JSON string (the inner quotes would be escaped),
    so in an array of exactly `count` objects with no nested object, `count` occurrences of each key
    pattern and no empty values mean each object has its kind and name.
    """
    window = resources_slice(raw)
    if window is None:
        return None
    if window.count(b"{") != count or window.count(b"}") != count:
        return None
    if window.count(b'"kind":"') != count or window.count(b'"name":"') != count:
        return None
    if b'"kind":""' in window or b'"name":""' in window:
        return None
    return True


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


def count_entries_plainly(raw: bytes, pointer: str = "") -> int:
    """The obvious way (full decode), kept as the benchmark baseline and the test oracle's helper."""
    obj = orjson.loads(raw)
    for part in filter(None, pointer.split("/")):
        obj = obj[part]
    return len(obj.get("spec", {}).get("resources") or [])
