"""What our HTTP endpoints (the service's probes and metrics, the webhook) answer with in common."""

from __future__ import annotations

import logging
from http.server import BaseHTTPRequestHandler
from typing import Any

log = logging.getLogger(__name__)


class QuietHandler(BaseHTTPRequestHandler):
    """Sends a whole body with its type and length; logs nothing per request (probes come every few
    seconds, and each admission is logged once by the webhook itself)."""

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        """Answer; a client gone before it (a probe that timed out on a busy node) is no error of ours:
        said at debug, not as the traceback socketserver would print."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError) as error:
            log.debug("%s %s: the client left before the answer (%s)", self.command, self.path, error)

    def log_message(self, format: str, *args: Any) -> None:
        return
