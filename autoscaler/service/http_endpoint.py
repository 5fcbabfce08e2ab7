"""What our HTTP endpoints (the service's probes and metrics, the webhook) answer with in common."""

from __future__ import annotations

from http.server import BaseHTTPRequestHandler
from typing import Any


class QuietHandler(BaseHTTPRequestHandler):
    """Sends a whole body with its type and length; logs nothing per request (probes come every few
    seconds, and each admission is logged once by the webhook itself)."""

    def _send(self, status: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return
