"""Leader election on a `coordination.k8s.io/v1` Lease, so two cluster-mode replicas never both act.

The same protocol as client-go's: the holder renews `renewTime` every `duration / 3`; another replica
takes the Lease over only when it has not been renewed for `duration`. Every write is a replace with the
Lease's resourceVersion, so two candidates can never both win. A leader that cannot renew within
`duration * 2 / 3` steps down before anyone else may take over.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from inventory.core.times import micro_time, timestamp
from inventory.kube import kubeapi

log = logging.getLogger(__name__)


def _renewed(spec: dict[str, Any]) -> float:
    """When the Lease was last renewed (0: never). A time that cannot be read is an error, not an
    expiry: its holder may be renewing it."""
    text = spec.get("renewTime")
    renewed = timestamp(text) if text else 0.0
    if renewed is None:
        raise ValueError(f"the Lease's renewTime {text!r} is not a time")
    return renewed


@dataclass
class LeaderElector:
    api: kubeapi.KubeApi
    namespace: str
    name: str
    identity: str
    duration: float = 15.0
    clock: Callable[[], float] = time.time
    is_leader: threading.Event = field(default_factory=threading.Event)

    def _spec(self, previous: dict[str, Any], now: float, acquired: bool) -> dict[str, Any]:
        spec = dict(previous)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=max(1, round(self.duration)),
            renewTime=micro_time(now),
        )
        if acquired:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(previous.get("leaseTransitions", 0)) + (1 if previous else 0)
        return spec

    def try_acquire_or_renew(self) -> bool:
        """One attempt; True when this replica holds the Lease afterwards."""
        now = self.clock()
        try:
            lease = self.api.get(kubeapi.LEASE, self.namespace, self.name)
        except kubeapi.NotFound:
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec({}, now, acquired=True),
            }
            try:
                self.api.create(kubeapi.LEASE, self.namespace, body)
            except kubeapi.Conflict:
                return False
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        expired = _renewed(spec) + float(spec.get("leaseDurationSeconds", 0)) < now
        if holder != self.identity and holder and not expired:
            return False
        lease["spec"] = self._spec(spec, now, acquired=holder != self.identity)
        try:
            self.api.replace(kubeapi.LEASE, self.namespace, self.name, lease)
        except kubeapi.Conflict:
            return False
        return True

    def run(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        """Acquire, then keep renewing until `stop`; call `on_lost` if leadership is lost. Whatever ends
        this loop other than `stop`, this replica is no longer the leader when it returns."""
        try:
            self._run(stop, on_lost)
        finally:
            if self.is_leader.is_set() and not stop.is_set():
                log.error("leader election ended unexpectedly: stepping down")
                self.is_leader.clear()
                on_lost()

    def _run(self, stop: threading.Event, on_lost: Callable[[], None]) -> None:
        last_renewed = 0.0
        while not stop.is_set():
            try:
                held = self.try_acquire_or_renew()
            except Exception as error:
                # An API error, or a Lease another tool wrote in a form we cannot read: not renewed.
                log.warning("lease %s/%s: %s", self.namespace, self.name, error)
                held = False
            now = self.clock()
            if held:
                if not self.is_leader.is_set():
                    log.info(
                        "became the leader (lease %s/%s, identity %s)",
                        self.namespace,
                        self.name,
                        self.identity,
                    )
                    self.is_leader.set()
                last_renewed = now
            elif self.is_leader.is_set() and now - last_renewed > self.duration * 2 / 3:
                log.error("lost the lease %s/%s: stepping down", self.namespace, self.name)
                self.is_leader.clear()
                on_lost()
                return
            stop.wait(self.duration / 3 if self.is_leader.is_set() else self.duration / 5)

    def release(self) -> None:
        """Hand the Lease over at once on a clean shutdown (the next replica need not wait it out)."""
        if not self.is_leader.is_set():
            return
        try:
            lease = self.api.get(kubeapi.LEASE, self.namespace, self.name)
            if (lease.get("spec") or {}).get("holderIdentity") == self.identity:
                lease["spec"]["holderIdentity"] = ""
                lease["spec"]["leaseDurationSeconds"] = 1
                self.api.replace(kubeapi.LEASE, self.namespace, self.name, lease)
        except kubeapi.ApiError as error:
            log.warning("could not release the lease: %s", error)
        self.is_leader.clear()
