"""Structured logs: one JSON object per line (or text), each carrying the RSync it is about."""

from __future__ import annotations

import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime

import orjson

# The RSync being reconciled by the current thread ("" outside a reconcile).
CURRENT_RSYNC: ContextVar[str] = ContextVar("current_rsync", default="")


class _RSyncFilter(logging.Filter):
    def __init__(self, default: str) -> None:
        super().__init__()
        self.default = default

    def filter(self, record: logging.LogRecord) -> bool:
        record.rsync = CURRENT_RSYNC.get() or self.default
        return True


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "rsync": getattr(record, "rsync", ""),
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return orjson.dumps(entry).decode()


def configure(level: str, fmt: str, default_rsync: str = "") -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(_RSyncFilter(default_rsync))
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s [%(rsync)s] %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # The HTTP client's connection chatter is noise at INFO.
    logging.getLogger("urllib3").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
