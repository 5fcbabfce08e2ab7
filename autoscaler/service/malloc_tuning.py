"""The C allocator's settings for a long-running sidecar (glibc only; elsewhere nothing is changed).

Why: every watch event of a large inventory is one multi-megabyte line, decoded by simdjson into
buffers of a few times its size. glibc serves such buffers with mmap and unmaps them when freed, but
after the first one is freed it raises its mmap threshold to that size, so the next ones come from the
heap and stay resident; and each thread that allocates gets its own arena. Measured with
`python -m profiles.bench_service` (BENCHMARKS.md), a fixed threshold and two arenas keep a 30,000-entry
sidecar about 15 MiB smaller under load, for a little more CPU per large event.
"""

from __future__ import annotations

import ctypes
import logging

log = logging.getLogger(__name__)

# mallopt(3) parameters, from glibc's malloc.h.
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8

MMAP_THRESHOLD_BYTES = 128 * 1024  # glibc's initial value, now fixed
ARENA_MAX = 2


def tune_for_large_events() -> bool:
    """Fix the mmap threshold and cap the arenas; True when glibc accepted both."""
    try:
        # The interpreter's own symbols, libc's among them. Not ctypes.util.find_library: without
        # ldconfig it runs a compiler through a temporary file, which fails on a read-only root filesystem.
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): leave the allocator alone
        log.debug("no mallopt; allocator left at its defaults")
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    accepted = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(mallopt(M_ARENA_MAX, ARENA_MAX))
    if not accepted:
        log.warning("glibc refused the allocator settings; memory under load may be higher")
    return accepted
