"""The one in-memory stand-in for the API server in unit tests (`inventory.kube.kubeapi.KubeClient`).

Played by us, not a real API server (the integration tests run the real one): it keeps objects by
resource, namespace and name with a resourceVersion each; answers get, create, replace, patch (merge, and
the strategic merge of a Pod's containers by name; a server-side apply merged the same way, without
field ownership), delete and lists filtered by equality label
selectors; records every call in `log`; and, where a test says so, answers lists and watches from a
script, holds every call until `gate` is set, or fails every call with `failure`.
"""

from __future__ import annotations

import copy
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson

from inventory.kube import kubeapi

JSON = dict[str, Any]
ObjectKey = tuple[str, str, str]  # (resource plural, namespace, name)


@dataclass
class ScriptedStream:
    """A watch's lines, then the error it ends with (None: it ends quietly)."""

    lines: Iterable[bytes]
    error: Exception | None = None

    def __iter__(self) -> Iterator[bytes]:
        yield from self.lines
        if self.error is not None:
            raise self.error

    def shutdown(self) -> None:
        return None

    def close(self) -> None:
        return None


@dataclass
class FakeApi:
    """An API server in memory. `lists`: answers of the next lists, in order (each the items, or the
    error it raises) before the stored objects are; `watches`: the next watch streams, in order, then
    `watches_done` is called and an empty stream answered."""

    objects: dict[ObjectKey, JSON] = field(default_factory=dict)
    log: list[str] = field(default_factory=list)
    lists: list[list[JSON] | Exception] = field(default_factory=list)
    watches: list[ScriptedStream] = field(default_factory=list)
    watches_done: Callable[[], None] = lambda: None
    gate: threading.Event | None = None  # every call waits for it (a slow API server)
    failure: Exception | None = None  # every call raises it
    resource_types: int = 100
    resize_served: bool = True
    version: str = "v1.37.2"
    version_counter: int = 0

    @classmethod
    def holding(cls, *objects: tuple[kubeapi.Resource, JSON]) -> FakeApi:
        api = cls()
        for resource, body in objects:
            api.put(resource, body)
        return api

    @property
    def calls(self) -> Counter[str]:
        """How many times each call was made (`log` counted)."""
        return Counter(self.log)

    # ----- what a test reads or sets directly ---------------------------------------------------------
    def put(self, resource: kubeapi.Resource, body: JSON) -> JSON:
        """Store `body` as it is (a new resourceVersion), without a call logged."""
        metadata = body.get("metadata") or {}
        return self._store((resource.plural, metadata.get("namespace") or "", metadata["name"]), body)

    def stored(self, resource: kubeapi.Resource, namespace: str | None, name: str) -> JSON:
        return self.objects[(resource.plural, namespace or "", name)]

    # ----- KubeApi --------------------------------------------------------------------------------------
    @property
    def server(self) -> str:
        return "https://fake-api-server.invalid"

    def close(self) -> None:
        return None

    def api_resource_types(self) -> int:
        self._call("discovery")
        return self.resource_types

    def server_version(self) -> str:
        self._call("version")
        return self.version

    def serves_pod_resize(self) -> bool:
        self._call("pods/resize in discovery")
        return self.resize_served

    def get(
        self, resource: kubeapi.Resource, namespace: str | None, name: str, subresource: str | None = None
    ) -> JSON:
        self._call("get", resource, subresource)
        return copy.deepcopy(self._found(resource, namespace, name))

    def create(self, resource: kubeapi.Resource, namespace: str | None, body: JSON) -> JSON:
        self._call("create", resource)
        key = (resource.plural, namespace or "", body["metadata"]["name"])
        if key in self.objects:
            raise kubeapi.Conflict(f"{resource.plural} {key[2]} already exists", status=409)
        return copy.deepcopy(self._store(key, body))

    def replace(
        self,
        resource: kubeapi.Resource,
        namespace: str | None,
        name: str,
        body: JSON,
        subresource: str | None = None,
    ) -> JSON:
        self._call("replace", resource, subresource)
        current = self._found(resource, namespace, name)
        asked = (body.get("metadata") or {}).get("resourceVersion")
        if asked and asked != current["metadata"]["resourceVersion"]:
            raise kubeapi.Conflict(f"{resource.plural} {name}: the object has been modified", status=409)
        return copy.deepcopy(self._store((resource.plural, namespace or "", name), body))

    def patch(
        self,
        resource: kubeapi.Resource,
        namespace: str | None,
        name: str,
        body: object,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> JSON:
        self._call("patch", resource, subresource)
        current = self._found(resource, namespace, name)
        if patch_type not in ("merge", "strategic", "apply"):
            raise NotImplementedError(
                f"the fake API applies merge, strategic and apply patches, not {patch_type}"
            )
        # A server-side apply is merged as a strategic patch: field ownership is not played here.
        patched = _merged(current, body, strategic=patch_type != "merge")
        return copy.deepcopy(self._store((resource.plural, namespace or "", name), patched))

    def delete(self, resource: kubeapi.Resource, namespace: str | None, name: str) -> None:
        self._call("delete", resource)
        self._found(resource, namespace, name)
        del self.objects[(resource.plural, namespace or "", name)]

    def list_page(
        self,
        resource: kubeapi.Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        continue_token: str = "",
    ) -> bytes:
        self._call("list", resource, selector=label_selector)
        if self.lists:
            items = self.lists.pop(0)
            if isinstance(items, Exception):
                raise items
            version = str(len(self.log))  # a scripted list's version: the number of its call
        else:
            version = str(self.version_counter)
            items = [
                copy.deepcopy(body)
                for (plural, ns, _), body in sorted(self.objects.items())
                if plural == resource.plural
                and (namespace is None or ns == namespace)
                and _selected(body, label_selector)
            ]
        return orjson.dumps({"metadata": {"resourceVersion": version}, "items": items})

    def pages(
        self, resource: kubeapi.Resource, namespace: str | None, label_selector: str = ""
    ) -> Iterator[Any]:
        yield orjson.loads(self.list_page(resource, namespace, label_selector=label_selector))

    def watch(
        self,
        resource: kubeapi.Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str = "",
        field_selector: str = "",
        server_timeout: int = 300,
        inactivity_timeout: float = 90.0,
    ) -> ScriptedStream:
        self._call(f"watch {resource.plural}@{resource_version}")
        if not self.watches:
            self.watches_done()
            return ScriptedStream(())
        return self.watches.pop(0)

    # ----- inside --------------------------------------------------------------------------------------
    def _call(
        self,
        verb: str,
        resource: kubeapi.Resource | None = None,
        subresource: str | None = None,
        *,
        selector: str = "",
    ) -> None:
        what = verb if resource is None else f"{verb} {resource.plural}"
        what += f"/{subresource}" if subresource else ""
        self.log.append(what + (f" {selector}" if selector else ""))
        if self.gate is not None:
            self.gate.wait()
        if self.failure is not None:
            raise self.failure

    def _found(self, resource: kubeapi.Resource, namespace: str | None, name: str) -> JSON:
        try:
            return self.objects[(resource.plural, namespace or "", name)]
        except KeyError:
            raise kubeapi.NotFound(f"{resource.plural} {name!r} not found", status=404) from None

    def _store(self, key: ObjectKey, body: JSON) -> JSON:
        self.version_counter += 1
        stored = copy.deepcopy(body)
        stored.setdefault("metadata", {})["resourceVersion"] = str(self.version_counter)
        self.objects[key] = stored
        return stored


def _selected(body: JSON, selector: str) -> bool:
    """Whether an object's labels match an equality selector (`a=b,c`: c present)."""
    labels = (body.get("metadata") or {}).get("labels") or {}
    for term in filter(None, selector.split(",")):
        name, _, value = term.partition("=")
        if name not in labels or (value and labels[name] != value):
            return False
    return True


def _merged(current: object, patch: object, *, strategic: bool) -> Any:
    """A JSON merge patch (RFC 7386) of `current`; `strategic`: lists of named entries merged by name, as
    the API server merges a Pod's containers."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    merged = copy.deepcopy(current) if isinstance(current, dict) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif strategic and _named_list(value) and _named_list(merged.get(key)):
            merged[key] = _merged_by_name(merged[key], value)
        else:
            merged[key] = _merged(merged.get(key), value, strategic=strategic)
    return merged


def _named_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, dict) and "name" in v for v in value)


def _merged_by_name(current: list[JSON], patch: list[JSON]) -> list[JSON]:
    by_name = {entry["name"]: entry for entry in patch}
    merged = [
        _merged(entry, by_name.pop(entry["name"]), strategic=True) if entry["name"] in by_name else entry
        for entry in current
    ]
    return merged + list(by_name.values())


def as_kube_api(api: FakeApi) -> kubeapi.KubeApi:
    """Where the product wants a `KubeApi`, the fake is one: `make lint` type-checks this module, so a call
    the protocol gains and the fake lacks fails there, not in a test."""
    return api
