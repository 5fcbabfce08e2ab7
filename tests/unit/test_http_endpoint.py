"""Our HTTP endpoints' common answer: a client gone before it is not an error."""

from __future__ import annotations

import io
import logging

import pytest

from autoscaler.service.http_endpoint import QuietHandler


class GoneClient(io.RawIOBase):
    """The socket of a probe that timed out: every write fails as a closed connection does."""

    def writable(self) -> bool:
        return True

    def write(self, b: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def handler(wfile: io.IOBase) -> QuietHandler:
    """A handler as the server builds it for one GET, without a socket (its attributes set by hand)."""
    h = QuietHandler.__new__(QuietHandler)
    h.wfile = wfile  # type: ignore[assignment]
    h.request_version, h.command, h.path = "HTTP/1.1", "GET", "/healthz"
    h.requestline = "GET /healthz HTTP/1.1"
    return h


def test_an_answer_is_sent_whole_with_its_length() -> None:
    out = io.BytesIO()
    handler(out)._send(200, b"ok\n")
    sent = out.getvalue()
    assert sent.startswith(b"HTTP/1.0 200 OK\r\n")  # one answer per connection
    assert b"Content-Length: 3\r\n" in sent
    assert sent.endswith(b"\r\n\r\nok\n")


def test_a_client_gone_before_the_answer_is_said_at_debug_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG, logger="autoscaler.service.http_endpoint"):
        handler(GoneClient())._send(200, b"ok\n")
    assert [r.levelname for r in caplog.records] == ["DEBUG"]
    assert "GET /healthz: the client left before the answer" in caplog.records[0].getMessage()
