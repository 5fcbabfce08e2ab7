"""The one module that talks to the Kubernetes API.

Everything else in the project gets plain data from here: decoded JSON dicts for small objects, raw
bytes for lists and watch events (which can carry inventories of 100,000 entries and are counted
without being decoded whole). Client errors are translated at this boundary into a small set of our
own exceptions. Authentication, TLS and kubeconfig handling come from the `kubernetes` client.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import quote

import orjson
import urllib3
from kubernetes import client as k8s_client
from kubernetes import config as k8s_config

JSON = dict[str, Any]


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None, name: str | None = None, subresource: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{quote(namespace)}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name)}"
        if subresource:
            base += f"/{subresource}"
        return base


ROOTSYNC = Resource("configsync.gke.io", "v1beta1", "rootsyncs", "RootSync")
REPOSYNC = Resource("configsync.gke.io", "v1beta1", "reposyncs", "RepoSync")
RESOURCEGROUP = Resource("kpt.dev", "v1alpha1", "resourcegroups", "ResourceGroup")
DEPLOYMENT = Resource("apps", "v1", "deployments", "Deployment")
POD = Resource("", "v1", "pods", "Pod")
NAMESPACE = Resource("", "v1", "namespaces", "Namespace")
NODE = Resource("", "v1", "nodes", "Node")
LEASE = Resource("coordination.k8s.io", "v1", "leases", "Lease")
CRD = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition")
EVENT = Resource("events.k8s.io", "v1", "events", "Event")
# The metrics API (metrics-server): a reconciler container's working set, for calibration.
POD_METRICS = Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
# VPA v1's object (the `vpa` target writes its status as a recommender).
VPA = Resource("autoscaling.k8s.io", "v1", "verticalpodautoscalers", "VerticalPodAutoscaler")
RSYNC_RESOURCES = {"RootSync": ROOTSYNC, "RepoSync": REPOSYNC}
MUTATING_WEBHOOKS = Resource(
    "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration"
)


_AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


class ApiError(Exception):
    """An API call failed; `reason` is the server's reason or the transport error; `retry_after` the
    seconds the server asked to wait (`Retry-After` of a 429 or 503), None when it said nothing; `causes`
    the types of the Status's `details.causes` (each cause's `reason`; for example `NodeCapacity`:
    Kubernetes 1.36+'s PodResizeValidator refusing a resize larger than the node's allocatable)."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        retry_after: float | None = None,
        causes: tuple[str, ...] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.retry_after = retry_after
        self.causes = causes


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """The resourceVersion asked for is too old (410): re-list."""


class Forbidden(ApiError):
    """Authentication or authorization refused the call (401 or 403)."""


class Invalid(ApiError):
    """The server rejected the request itself (400, 413 too large, 422 validation or a webhook)."""


class Transient(ApiError):
    """Connection problems, timeouts, throttling and server errors: retry with backoff."""


class WatchSilent(Transient):
    """A watch stream said nothing for longer than the client's inactivity timeout (ours, not a 504 of
    the server's): resume it from the last resourceVersion."""


_BY_STATUS: dict[int, type[ApiError]] = {
    400: Invalid,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    413: Invalid,
    422: Invalid,
}

PATCH_TYPES = {
    "merge": "application/merge-patch+json",
    "json": "application/json-patch+json",
    "strategic": "application/strategic-merge-patch+json",
    "apply": "application/apply-patch+yaml",
}


def error_from_status(status: int, body: bytes, what: str, retry_after: str | None = None) -> ApiError:
    reason, message = "", body[:300].decode(errors="replace")
    causes: tuple[str, ...] = ()
    try:
        decoded = orjson.loads(body)
        reason, message = decoded.get("reason", ""), decoded.get("message", message)
        causes = _cause_types(decoded.get("details"))
    except (orjson.JSONDecodeError, AttributeError):
        pass
    kind = _BY_STATUS.get(status, Transient)
    text = f"{what}: HTTP {status} {reason}: {message}"
    return kind(text, status=status, reason=reason, retry_after=_seconds(retry_after), causes=causes)


def _cause_types(details: object) -> tuple[str, ...]:
    """The type of each cause a Status's `details` lists (none where it lists none, or not as a list). A
    StatusCause's type is serialized as `reason` (its Go field `Type` carries `json:"reason"`)."""
    causes = details.get("causes") if isinstance(details, dict) else None
    if not isinstance(causes, list):
        return ()
    return tuple(str(c["reason"]) for c in causes if isinstance(c, dict) and isinstance(c.get("reason"), str))


def _seconds(retry_after: str | None) -> float | None:
    """`Retry-After` in seconds (the API server sends whole seconds; an HTTP date or garbage is ignored),
    at most an hour."""
    try:
        seconds = float(retry_after) if retry_after is not None else None
    except ValueError:
        return None
    return None if seconds is None or not seconds >= 0 else min(seconds, 3600.0)  # NaN too


class Stream(Protocol):
    """An open watch: its raw events, one JSON document per line; `shutdown` ends it from another thread."""

    def __iter__(self) -> Iterator[bytes]: ...

    def shutdown(self) -> None: ...

    def close(self) -> None: ...


class KubeApi(Protocol):
    """The calls the product makes to the API server: `KubeClient` makes them over the network; the unit
    tests' in-memory fake (tests/fake_api.py) answers them from memory."""

    @property
    def server(self) -> str: ...

    def close(self) -> None: ...

    def api_resource_types(self) -> int: ...

    def server_version(self) -> str: ...

    def serves_pod_resize(self) -> bool: ...

    def get(
        self, resource: Resource, namespace: str | None, name: str, subresource: str | None = None
    ) -> JSON: ...

    def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON: ...

    def replace(
        self, resource: Resource, namespace: str | None, name: str, body: JSON, subresource: str | None = None
    ) -> JSON: ...

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: object,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> JSON: ...

    def delete(self, resource: Resource, namespace: str | None, name: str) -> None: ...

    def list_page(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        continue_token: str = "",
    ) -> bytes: ...

    def pages(self, resource: Resource, namespace: str | None, label_selector: str = "") -> Iterator[Any]: ...

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str = "",
        field_selector: str = "",
        server_timeout: int = 300,
        inactivity_timeout: float = 90.0,
    ) -> Stream: ...


class KubeClient:
    """Thin, typed access to the API server over the `kubernetes` client's authenticated connection."""

    def __init__(
        self, api_client: k8s_client.ApiClient, *, timeout: float = 30.0, default_namespace: str = "default"
    ) -> None:
        self._client = api_client
        self._timeout = timeout
        self.default_namespace = default_namespace

    @classmethod
    def connect(
        cls, kubeconfig: str | None = None, *, context: str | None = None, service: bool = False
    ) -> KubeClient:
        """In-cluster credentials when running in a pod and no kubeconfig is given, else the kubeconfig.

        `service`: the connection of a long-running service, whose one retry policy is its own (the
        watches' backoff, the work queue's): urllib3 retries nothing below it. Otherwise (a command
        run once, a test's setup) urllib3 retries, as kubectl does, a 429 or 503 that says when to come
        back (up to three times) and a connection error (at once)."""
        try:
            return cls._connect(kubeconfig, context, service)
        except (k8s_config.ConfigException, OSError, ValueError) as error:
            raise ApiError(
                f"cannot load cluster credentials ({kubeconfig or 'default kubeconfig'}): {error}"
            ) from error

    @classmethod
    def _connect(cls, kubeconfig: str | None, context: str | None, service: bool) -> KubeClient:
        configuration = k8s_client.Configuration()
        if service:
            configuration.retries = False
        if kubeconfig is None and "KUBERNETES_SERVICE_HOST" in os.environ:
            k8s_config.load_incluster_config(client_configuration=configuration)
            namespace_file = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
            namespace = namespace_file.read_text().strip() if namespace_file.exists() else "default"
        else:
            k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
            contexts, active = k8s_config.list_kube_config_contexts(config_file=kubeconfig)
            chosen = next((c for c in contexts if c["name"] == context), active) if context else active
            namespace = (chosen or {}).get("context", {}).get("namespace") or "default"
        return cls(k8s_client.ApiClient(configuration), default_namespace=namespace)

    @property
    def server(self) -> str:
        host: str = self._client.configuration.host
        return host

    def close(self) -> None:
        self._client.close()

    # ----- raw requests --------------------------------------------------------------------------------
    def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int | bool] | None = None,
        body: object = None,
        content_type: str = "application/json",
        accept: str = "application/json",
        timeout: float | tuple[float, float] | None = None,
    ) -> Any:
        params = [(k, str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (query or {}).items()]
        headers = {"Accept": accept, "Content-Type": content_type}
        method, url, headers, body = self._client.param_serialize(
            method, path, query_params=params, header_params=headers, body=body, auth_settings=["BearerToken"]
        )[:4]
        what = f"{method} {path}"
        try:
            response = self._client.call_api(
                method, url, header_params=headers, body=body, _request_timeout=timeout or self._timeout
            )
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise Transient(f"{what}: {error}", reason=type(error).__name__) from error
        if not 200 <= response.status <= 299:
            try:
                data = response.read()
            except (urllib3.exceptions.HTTPError, OSError):
                data = b""
            raise error_from_status(response.status, data, what, response.headers.get("Retry-After"))
        return response

    def request(self, method: str, path: str, **kwargs: Any) -> bytes:
        """One request, the whole response body as bytes."""
        response = self._send(method, path, **kwargs)
        try:
            data: bytes = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise Transient(f"{method} {path}: {error}", reason=type(error).__name__) from error
        return data

    def request_json(self, method: str, path: str, **kwargs: Any) -> JSON:
        decoded: JSON = orjson.loads(self.request(method, path, **kwargs))
        return decoded

    def api_resource_types(self) -> int:
        """How many resource types the API server serves (the preferred version of every group, core
        included; subresources not counted): the API surface a reconciler discovers. From aggregated
        discovery, two requests any authenticated user may make (no RBAC of ours)."""
        total = 0
        for path in ("/api", "/apis"):
            listing = self.request_json("GET", path, accept=_AGGREGATED_DISCOVERY)
            if listing.get("kind") != "APIGroupDiscoveryList":
                raise ApiError(f"GET {path}: no aggregated discovery (kind {listing.get('kind')!r})")
            for group in listing.get("items") or []:
                versions = group.get("versions") or []
                total += len(versions[0].get("resources") or []) if versions else 0
        return total

    def server_version(self) -> str:
        """The API server's `gitVersion` (`/version`, readable by every authenticated user)."""
        return str(self.request_json("GET", "/version").get("gitVersion") or "")

    def serves_pod_resize(self) -> bool:
        """Whether the API server serves `pods/resize`, the subresource of in-place resizes (from
        Kubernetes 1.32 with InPlacePodVerticalScaling on; on by default from 1.33), from aggregated
        discovery."""
        listing = self.request_json("GET", "/api", accept=_AGGREGATED_DISCOVERY)
        for group in listing.get("items") or []:
            for version in group.get("versions") or []:
                for resource in version.get("resources") or []:
                    if resource.get("resource") == "pods":
                        subresources = resource.get("subresources") or []
                        return any(s.get("subresource") == "resize" for s in subresources)
        return False

    # ----- objects -----------------------------------------------------------------------------------
    def get(
        self, resource: Resource, namespace: str | None, name: str, subresource: str | None = None
    ) -> JSON:
        return self.request_json("GET", resource.path(namespace, name, subresource))

    def create(self, resource: Resource, namespace: str | None, body: JSON) -> JSON:
        return self.request_json("POST", resource.path(namespace), body=body)

    def replace(
        self, resource: Resource, namespace: str | None, name: str, body: JSON, subresource: str | None = None
    ) -> JSON:
        return self.request_json("PUT", resource.path(namespace, name, subresource), body=body)

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: object,
        *,
        patch_type: str = "merge",
        subresource: str | None = None,
        field_manager: str | None = None,
        force: bool = False,
    ) -> JSON:
        query: dict[str, str | int | bool] = {}
        if field_manager:
            query["fieldManager"] = field_manager
        if force:
            query["force"] = True
        path = resource.path(namespace, name, subresource)
        return self.request_json("PATCH", path, query=query, body=body, content_type=PATCH_TYPES[patch_type])

    def delete(self, resource: Resource, namespace: str | None, name: str) -> None:
        self.request("DELETE", resource.path(namespace, name))

    def list_page(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 500,
        continue_token: str = "",
    ) -> bytes:
        """One page of a list, as the raw JSON body (the caller decodes what it needs)."""
        query: dict[str, str | int | bool] = {"limit": limit}
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        if continue_token:
            query["continue"] = continue_token
        return self.request("GET", resource.path(namespace), query=query)

    def pages(self, resource: Resource, namespace: str | None, label_selector: str = "") -> Iterator[Any]:
        """Every page of a list, decoded, one at a time (the continue token followed to the end)."""
        token = ""
        while True:
            page = orjson.loads(
                self.list_page(resource, namespace, label_selector=label_selector, continue_token=token)
            )
            yield page
            token = (page.get("metadata") or {}).get("continue") or ""
            if not token:
                return

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str = "",
        field_selector: str = "",
        server_timeout: int = 300,
        inactivity_timeout: float = 90.0,
    ) -> WatchStream:
        """Open a watch; iterate the returned stream for raw events, one JSON document per line.

        `inactivity_timeout` is the socket read timeout: a stream that stays silent longer (bookmarks are
        requested, so a healthy stream is never silent for long) raises Transient and the caller
        reconnects.
        """
        query: dict[str, str | int | bool] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": True,
            "timeoutSeconds": server_timeout,
        }
        if label_selector:
            query["labelSelector"] = label_selector
        if field_selector:
            query["fieldSelector"] = field_selector
        path = resource.path(namespace)
        response = self._send("GET", path, query=query, timeout=(10.0, inactivity_timeout))
        return WatchStream(response.response, path)


class WatchStream:
    """An open watch response. `shutdown()` may be called from another thread to end it at once."""

    def __init__(self, raw: urllib3.BaseHTTPResponse, path: str) -> None:
        self._raw = raw
        self._path = path
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from _lines(self._raw)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            if self._closed:
                return
            silent = isinstance(error, urllib3.exceptions.ReadTimeoutError | TimeoutError)
            kind = WatchSilent if silent else Transient
            raise kind(f"watch {self._path}: {error}", reason=type(error).__name__) from error
        finally:
            self.close()

    def shutdown(self) -> None:
        """Unblock a pending read from another thread (stopping the service)."""
        self._closed = True
        # Already closed or released (the stream ended on its own): nothing to unblock.
        with contextlib.suppress(ValueError, RuntimeError, OSError):
            self._raw.shutdown()

    def close(self) -> None:
        self._closed = True
        self._raw.release_conn()
        self._raw.close()


def _lines(raw: urllib3.BaseHTTPResponse) -> Iterator[bytes]:
    """Split a streamed body into lines without copying a large event more than once."""
    pending: list[bytes] = []
    for chunk in raw.stream(1 << 16):
        start = 0
        while (end := chunk.find(b"\n", start)) >= 0:
            if pending:
                pending.append(chunk[start:end])
                line = b"".join(pending)
                pending.clear()  # before the yield: the pieces are not kept while the line is decoded
                yield line
            elif end > start:
                yield chunk[start:end]
            start = end + 1
        if start < len(chunk):
            pending.append(chunk[start:])
    if pending:
        yield b"".join(pending)
