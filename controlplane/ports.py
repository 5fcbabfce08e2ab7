"""Free loopback ports for the servers the stack and the tests start on the host."""

from __future__ import annotations

import contextlib
import functools
import secrets
import socket
from pathlib import Path

from controlplane.errors import ControlPlaneError

# Ports for servers on the host's loopback are drawn below the kernel's ephemeral range: a port the
# kernel hands out (bind to 0) can be taken, before our server binds it, as the source port of any
# client connection, which in one CI run made etcd fail with "address already in use".
_SERVER_PORTS = range(20000, 32768)


def free_port() -> int:
    """A loopback port nothing listens on now, outside the ephemeral range (see _SERVER_PORTS)."""
    choices = _server_ports()
    for _ in range(100):
        port = secrets.choice(choices)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise ControlPlaneError(f"no free loopback port in {_SERVER_PORTS} after 100 tries")


@functools.cache
def _server_ports() -> list[int]:
    """_SERVER_PORTS below the start of the kernel's ephemeral range (read once)."""
    low = 32768
    with contextlib.suppress(OSError, ValueError, IndexError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    return [port for port in _SERVER_PORTS if port < low] or list(_SERVER_PORTS)
