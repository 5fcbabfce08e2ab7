"""The reflector's recovery logic, driven by a scripted stand-in for the API (no server involved).

Each watch call plays the next script entry: a list of raw event lines, optionally ending in an error.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import orjson

from inventory.core.backoff import Backoff
from inventory.kube import kubeapi
from inventory.kube.watch import ObjectCodec, Reflector, WatchSettings


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def line(kind: str, body: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": body})


class ScriptedApi:
    def __init__(
        self,
        lists: list[list[dict[str, Any]]],
        watches: list[tuple[list[bytes], Exception | None]],
        stop: threading.Event,
    ) -> None:
        self.lists, self.watches, self.stop = lists, watches, stop
        self.calls: list[str] = []

    def list_page(self, resource: Any, namespace: Any, **kwargs: Any) -> bytes:
        items = self.lists.pop(0)
        self.calls.append("list")
        return orjson.dumps({"metadata": {"resourceVersion": str(len(self.calls))}, "items": items})

    def watch(
        self, resource: Any, namespace: Any, *, resource_version: str, **kwargs: Any
    ) -> Iterator[bytes]:
        self.calls.append(f"watch@{resource_version}")
        if not self.watches:
            self.stop.set()
            return _Stream(iter(()))
        lines, error = self.watches.pop(0)

        def stream() -> Iterator[bytes]:
            yield from lines
            if error is not None:
                raise error

        return _Stream(stream())


class _Stream:
    def __init__(self, inner: Iterator[bytes]) -> None:
        self.inner = inner

    def __iter__(self) -> Iterator[bytes]:
        return self.inner

    def close(self) -> None: ...

    def shutdown(self) -> None: ...


def run(api: ScriptedApi, stop: threading.Event) -> tuple[Reflector[Any], list[tuple[str, str]]]:
    changes: list[tuple[str, str]] = []
    reflector: Reflector[Any] = Reflector(
        api,
        kubeapi.ROOTSYNC,
        ObjectCodec(),
        lambda change, key, o: changes.append((change, key[1])),  # type: ignore[arg-type]
        settings=WatchSettings(backoff_initial=0.0, backoff_max=0.0),
        stopping=stop,
    )
    reflector.run()
    return reflector, changes


def test_relists_on_410_and_reports_what_changed_meanwhile() -> None:
    stop = threading.Event()
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})
    api = ScriptedApi(
        lists=[[obj("a", "1"), obj("b", "1")], [obj("a", "5"), obj("c", "5")]],
        watches=[([line("MODIFIED", obj("a", "2")), gone], None)],
        stop=stop,
    )
    reflector, changes = run(api, stop)
    assert api.calls[:3] == ["list", "watch@1", "list"]
    assert changes == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("MODIFIED", "a"),
        ("ADDED", "c"),
    ]
    assert set(reflector.store) == {("ns", "a"), ("ns", "c")}
    assert reflector.synced.is_set()


def test_resumes_from_the_last_resource_version_after_a_timeout_or_a_closed_stream() -> None:
    stop = threading.Event()
    timeout = kubeapi.Transient("read timed out", reason="ReadTimeoutError")
    api = ScriptedApi(
        lists=[[obj("a", "1")]],
        watches=[
            ([line("MODIFIED", obj("a", "7"))], timeout),
            ([line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})], None),
            ([line("DELETED", obj("a", "10"))], None),
        ],
        stop=stop,
    )
    reflector, changes = run(api, stop)
    assert api.calls == ["list", "watch@1", "watch@7", "watch@9", "watch@10"]
    assert changes == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert reflector.store == {}


def test_backoff_is_exponential_with_full_jitter_and_capped() -> None:
    backoff = Backoff(0.2, 5.0, random=lambda: 1.0)
    assert [backoff.next_delay() for _ in range(7)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    backoff.reset()
    assert backoff.next_delay() == 0.2
    assert Backoff(0.2, 5.0, random=lambda: 0.5).next_delay() == 0.1
