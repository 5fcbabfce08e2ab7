"""Watch the rendered source on the reconciler's shared volume and count its objects.

Config Sync syncs each commit into its own directory and swaps a `rev` symlink to it atomically
(`/repo/source/rev`, and `/repo/hydrated/rev` for rendered output). The counter resolves the link once,
counts inside the resolved directory (which never changes), then checks that the link still points
there; if it moved during the count, it counts again. A half-swapped checkout is never counted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from inventory.core.tally import Tally
from inventory.source.source_count import CountCache, SourceCount, SourceError, count_directory, rejection

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceLayout:
    """Where the reconciler pod's shared volume keeps the source (DESIGN.md 2.4)."""

    repo_root: Path = Path("/repo")
    sync_dir: str = ""

    @property
    def hydrated_link(self) -> Path:
        return self.repo_root / "hydrated" / "rev"

    @property
    def source_link(self) -> Path:
        return self.repo_root / "source" / "rev"

    def current_root(self) -> tuple[Path, Path]:
        """(symlink, directory to count): hydrated output when present, else the source's sync dir."""
        link = self.hydrated_link if self.hydrated_link.exists() else self.source_link
        if not link.exists():
            if link.is_symlink():
                raise SourceError(f"{link} points to {os.readlink(link)}, which does not exist (removed?)")
            raise SourceError(f"neither {self.hydrated_link} nor {self.source_link} exists yet")
        return link, Path(os.path.realpath(link))


def count_source(layout: SourceLayout, attempts: int = 3, cache: CountCache | None = None) -> SourceCount:
    """Count the objects of the commit the `rev` link points to, consistently across a swap."""
    for _ in range(attempts):
        link, commit_dir = layout.current_root()
        root = commit_dir / layout.sync_dir if layout.sync_dir else commit_dir
        try:
            result = count_directory(root, commit_dir, cache)
        except FileNotFoundError as error:
            # The commit directory was removed under us (an old one after a swap): look again.
            last_error: SourceError = SourceError(f"{root} disappeared while being counted: {error}")
            continue
        except OSError as error:
            raise SourceError(f"cannot read {root}: {error}") from error
        if Path(os.path.realpath(link)) == commit_dir:
            # Config Sync's reconciler names the commit it syncs the same way (pkg/parse/source.go).
            return replace(result, commit=commit_dir.name)
        last_error = SourceError(f"{link} moved while {root} was being counted")
    raise last_error


@dataclass
class SourceWatcher:
    """Recounts when the `rev` link moves (polled: a readlink per interval) and reports good counts.

    On an error the last good count stands: the callback is not called, the error is logged with the
    file it is about and counted in a metric, and the count is tried again on the next change or after
    `retry_interval`.
    """

    layout: SourceLayout
    on_count: Callable[[SourceCount], None]
    tally: Tally = field(kw_only=True)  # the commits not fully counted, for /metrics
    # Told the commit a moved link names before it is counted (a large commit takes seconds to count,
    # while the reconciler may be parsing it already).
    on_linked: Callable[[str], None] = lambda commit: None
    interval: float = 1.0
    retry_interval: float = 30.0
    clock: Callable[[], float] = time.monotonic
    stopping: threading.Event = field(default_factory=threading.Event)
    last_error: str | None = None
    cache: CountCache = field(default_factory=CountCache)
    _last_attempt: float = float("-inf")
    heartbeat: float = field(default_factory=time.monotonic)
    _thread: threading.Thread | None = None

    def start(self) -> SourceWatcher:
        self._thread = threading.Thread(target=self.run, name="source-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.stopping.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _link_target(self) -> tuple[Path, Path] | None:
        try:
            return self.layout.current_root()
        except SourceError:
            return None

    def poll_once(self, previous: tuple[Path, Path] | None) -> tuple[Path, Path] | None:
        """Count when the link target differs from `previous`; return the target counted (or tried)."""
        target = self._link_target()
        if target == previous and (
            self.last_error is None or self.clock() - self._last_attempt < self.retry_interval
        ):
            return previous
        if target is not None and target != previous:
            self.on_linked(target[1].name)  # named as `count_source` names the commit it counts
        self._last_attempt = self.clock()
        try:
            result = count_source(self.layout, cache=self.cache)
        except SourceError as error:
            if str(error) != self.last_error:
                self.tally.source_error("unreadable")
                log.error("source count failed, keeping the last good count: %s", error)
            self.last_error = str(error)
            return target
        self.last_error = None
        self._report(result)
        self.on_count(result)
        return target

    def _report(self, count: SourceCount) -> None:
        """Say once per commit what Config Sync rejects, and what we could not read."""
        if count.rejected:
            self.tally.source_error("rejected")
            log.error("%s; it syncs none of it", rejection(count, listed=10))
        if count.unread:
            self.tally.source_error("unread")
            for reason in count.unread[:10]:
                log.warning(
                    "commit %s: not read (its objects are not counted, nothing is lowered): %s",
                    count.commit,
                    reason,
                )

    def run(self) -> None:
        previous: tuple[Path, Path] | None = None
        while not self.stopping.is_set():
            self.heartbeat = time.monotonic()
            try:
                previous = self.poll_once(previous)
            except Exception as error:
                # Whatever went wrong (a bug, an OS error we did not foresee), the watcher lives on with
                # the last good count, says so, and tries again after `retry_interval`.
                self.tally.source_error("crashed")
                log.exception("source count crashed, keeping the last good count")
                self.last_error = f"crashed: {error!r}"
            self.stopping.wait(self.interval)

    @property
    def alive(self) -> bool:
        """The thread runs and its loop turned recently (a count of a huge commit may take a while)."""
        running = self._thread is not None and self._thread.is_alive()
        return running and time.monotonic() - self.heartbeat < max(300.0, 10 * self.interval)
