"""Source count: the Kubernetes objects of a commit that the reconciler will apply, counted as Config
Sync v1.24.3's reconciler reads them (the rules: `inventory.core.manifest_reader`), and which of its files
Config Sync rejects (then it syncs nothing of that commit) or we could not read (then the count is a lower
bound).

The files are listed as the reconciler lists them (pkg/parse): every file under the sync directory,
hidden ones too, but not inside a directory named `.git`, in lexical order; a symbolic link is read where
it points (its target's suffix decides), a broken one fails the listing and so the commit; paths with a
`.github`, `.gitlab` or `.gitlab-ci.yml` element are skipped. Unlike the reconciler we never read outside
the commit (a link out of it), anything but a regular file, or a file over MAX_FILE_BYTES: those files are
"unread". Counts of file contents already seen are cached by digest, so a new commit re-parses only
changed files.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
import sys
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from inventory.core.counts import ObjectCounts, kinds_of
from inventory.core.manifest_reader import SUFFIXES, SYNTAX, FileRead, KindCounter, Problem, read_manifest

# Path elements the reconciler's reader skips (CI configuration of git hosts).
_SKIPPED_ELEMENTS = frozenset((".github", ".gitlab", ".gitlab-ci.yml"))


class SourceError(Exception):
    """The source cannot be counted at all (its directory is missing or unreadable to us)."""


def kib_of(size: int) -> int:
    """Bytes to whole KiB, rounded up (a size estimate's input is never rounded down)."""
    return -(-size // 1024)


@dataclass(frozen=True)
class SourceCount:
    """What a commit holds: objects, the manifest files read, and what the size estimate uses: the
    bytes of the files that hold objects (their serialized form as committed) and the objects by kind.

    `rejected`: what Config Sync reports for the files it rejects (it then applies nothing of the
    commit). `unread`: the files we did not read (why, each): their objects are not in the count."""

    objects: int
    files: int
    root: Path
    bytes: int = 0
    kinds: Mapping[str, int] = field(default_factory=dict)
    commit: str = ""  # the directory `rev` points to, named by its commit (as Config Sync reads it)
    rejected: tuple[Problem, ...] = ()
    unread: tuple[str, ...] = ()
    crd_path_steps: int = 0  # its CRDs' fields, each counted at its depth
    workload_path_steps: int = 0  # the same of its objects with a Pod template

    def object_counts(self, commit: str | None = None) -> ObjectCounts:
        """The source's side of the counts a size is decided from: every input the model reads of a
        commit, in one place, so no caller forgets one (`commit`: a name for it other than its own)."""
        return ObjectCounts(
            self.objects,
            source_kib=kib_of(self.bytes),
            source_kinds=kinds_of(self.kinds),
            source_commit=commit or self.commit or None,
            source_partial=bool(self.unread),
            source_crd_path_steps=self.crd_path_steps,
            source_workload_path_steps=self.workload_path_steps,
        )


MAX_REASON = 1024  # what is kept of a rejection's reason (an annotation, an Event's note)


def rejection(count: SourceCount, listed: int = 1) -> str:
    """Why Config Sync syncs nothing of the commit: its first `listed` errors, and how many more."""
    shown = "; ".join(f"{p.code} {p.message}" for p in count.rejected[:listed])
    more = f" (and {len(count.rejected) - listed} more)" if len(count.rejected) > listed else ""
    commit = f"commit {count.commit[:12]}" if count.commit else "the source"
    return f"Config Sync rejects {commit}: {shown}{more}"[:MAX_REASON]


# ----- listing, as the reconciler lists -------------------------------------------------------------------
def listed_files(root: Path) -> list[str]:
    """The files under `root` (resolved) as the reconciler lists them: sorted, none inside a `.git`
    directory, each symbolic link resolved. A broken or looping link fails the whole listing
    (ListingError naming it, as the reconciler's own listing fails): Config Sync then syncs nothing."""
    found: list[str] = []
    _walk(os.fspath(root), found)
    return found


def _walk(directory: str, found: list[str]) -> None:
    with os.scandir(directory) as entries:
        ordered = sorted(entries, key=lambda entry: os.fsencode(entry.name))
    for entry in ordered:
        if entry.is_dir(follow_symlinks=False):
            if entry.name != ".git":
                _walk(entry.path, found)
        elif entry.is_symlink():
            try:
                found.append(os.fspath(Path(entry.path).resolve(strict=True)))
            except (OSError, RuntimeError) as error:
                message = f"listing files in the configs directory: {entry.path}: {error}"
                raise ListingError(message) from error
        else:
            found.append(entry.path)


class ListingError(Exception):
    """The reconciler's listing of the commit fails (a broken or looping symbolic link)."""


def read_by_reconciler(path: Path | str) -> bool:
    """Whether the reconciler parses this listed file (by its resolved path)."""
    text = os.fspath(path)
    return text.endswith(SUFFIXES) and not _SKIPPED_ELEMENTS.intersection(text.split(os.sep))


class CountCache:
    """What file contents already seen hold, keyed by a content digest and the suffix that decides how
    they are read (bounded, least recent dropped). Only clean reads are kept: a rejection names its file.

    A new commit is a new directory, but most of its files are byte-identical to the last commit's:
    only the changed ones are parsed again.
    """

    def __init__(self, max_entries: int = 50_000) -> None:
        self._entries: OrderedDict[tuple[bytes, bool], FileRead] = OrderedDict()
        self._max = max_entries

    def read(self, data: bytes, name: str) -> FileRead:
        """The file's read (callers must not change its Counter: it is the cached one)."""
        key = (hashlib.blake2b(data, digest_size=16).digest(), name.endswith(".json"))
        cached = self._entries.get(key)
        if cached is not None:
            self._entries.move_to_end(key)
            return cached
        result = read_manifest(data, name)
        if not result.rejected and result.unread is None:
            self._entries[key] = result
            if len(self._entries) > self._max:
                self._entries.popitem(last=False)
        return result


# No manifest file Config Sync can apply comes near this (an object is at most 1.5 MiB in etcd); a larger
# one is not read into memory.
MAX_FILE_BYTES = 64 << 20


class Unread(Exception):
    """A file we do not read (the reconciler might): its objects are unknown, not none."""


def read_file(path: Path | str, commit: Path | str, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of one listed (resolved) manifest file. `Unread` for a file out of the commit (a link
    led there), anything that is not a regular file (a FIFO would block, a device never end) and a file
    over the cap. Opened without following a link and without blocking, and checked on the open
    descriptor, so nothing can be swapped in between."""
    text, inside = os.fspath(path), os.fspath(commit)
    if not text.startswith(inside.rstrip(os.sep) + os.sep):
        raise Unread(f"{name}: a symbolic link out of the commit ({text}): not read")
    try:
        descriptor = os.open(text, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
    except OSError as error:
        raise Unread(f"{name}: cannot open: {error.strerror}") from error
    status = os.fstat(descriptor)
    if stat.S_ISDIR(status.st_mode):
        os.close(descriptor)
        raise IsADirectoryError(f"{name}: read {text}: is a directory")
    try:
        if not stat.S_ISREG(status.st_mode):
            raise Unread(f"{name}: not a regular file (a FIFO, device or socket): not read")
        if status.st_size > max_bytes:
            raise Unread(f"{name}: {status.st_size} bytes, over the {max_bytes}-byte limit: not read")
        data = _read_all(descriptor, status.st_size, max_bytes + 1)
    finally:
        os.close(descriptor)
    if len(data) > max_bytes:
        raise Unread(f"{name}: over the {max_bytes}-byte limit: not read")
    return data


def _read_all(descriptor: int, expected: int, limit: int) -> bytes:
    """Up to `limit` bytes: one read when the file is no longer than it said, more if it grew."""
    data = os.read(descriptor, min(expected + 1, limit))
    while expected < len(data) < limit:
        more = os.read(descriptor, limit - len(data))
        if not more:
            break
        data += more
    return data


def count_directory(
    root: Path, names_relative_to: Path | None = None, cache: CountCache | None = None
) -> SourceCount:
    """Count every object under `root` (an immutable commit directory) as the reconciler reads them.
    Files are named relative to `names_relative_to` (default: `root`), which is also the commit: no
    file outside it is read."""
    base = os.path.realpath(names_relative_to or root)
    root = Path(os.path.realpath(root))
    kinds: KindCounter = Counter()
    rejected: list[Problem] = []
    unread: list[str] = []
    size = files = crd_path_steps = workload_path_steps = 0
    try:
        listed = listed_files(root)
    except ListingError as error:
        return SourceCount(0, 0, root, rejected=(Problem(SYNTAX, str(error)),))
    prefix = base.rstrip(os.sep) + os.sep
    with quiet_rapidyaml():
        for path in filter(read_by_reconciler, listed):
            name = path.removeprefix(prefix)
            files += 1
            try:
                data = read_file(path, base, name)
            except Unread as error:
                unread.append(str(error))
                continue
            except IsADirectoryError as error:
                rejected.append(Problem(SYNTAX, str(error)))
                continue
            found = cache.read(data, name) if cache else read_manifest(data, name)
            rejected.extend(found.rejected)
            unread.extend([found.unread] if found.unread else [])
            kinds.update(found.kinds)
            size += len(data) if found.kinds else 0
            crd_path_steps += found.crd_path_steps
            workload_path_steps += found.workload_path_steps
    return SourceCount(
        kinds.total(),
        files,
        root,
        size,
        dict(kinds),
        "",
        tuple(rejected),
        tuple(unread),
        crd_path_steps,
        workload_path_steps,
    )


_STDERR_LOCK = threading.Lock()
_RAPIDYAML_LINE = re.compile(rb"^line=\d+ col=\d+ .*ERROR: |c4/yml/")


@contextlib.contextmanager
def quiet_rapidyaml() -> Iterator[None]:
    """rapidyaml reports a parse error by printing to the process's stderr (file descriptor 2, where our
    JSON log lines go) before it raises, for some text libyaml accepts (an indented top-level mapping,
    a flow collection as a key). So a count runs with descriptor 2 pointed at a memory file; whatever
    else reached it meanwhile (another thread's log line) is copied to the real stderr afterwards, less
    rapidyaml's own lines. Counts are serialized by a lock."""
    with _STDERR_LOCK:
        sys.stderr.flush()
        saved = os.dup(2)
        capture = os.memfd_create("rapidyaml-stderr", os.MFD_CLOEXEC)
        os.dup2(capture, 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.lseek(capture, 0, os.SEEK_SET)
            with os.fdopen(capture, "rb") as captured:
                others = [line for line in captured if not _RAPIDYAML_LINE.search(line)]
            if others:
                os.write(2, b"".join(others))
