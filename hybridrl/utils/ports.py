"""A free TCP port for the ``torch.distributed`` rendezvous (``MASTER_PORT``).

The rendezvous port is picked, then bound by rank 0 seconds later, after Ray has started processes that
open many connections. Outgoing connections take their local port from the kernel's ephemeral range
(ip_local_port_range, usually 32768-60999), and Ray's workers listen on 10002-19999; a port picked from
either can be taken in between (seen here as EADDRINUSE in the TCPStore). Pick between the two ranges.

Socket-only (no torch): the worker group's driver side imports it.
"""

from __future__ import annotations

import random
import socket

__all__ = ["free_port"]

_RENDEZVOUS_PORTS = (20000, 32767)
_PORT_TRIES = 64


def _ephemeral_port_floor() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return _RENDEZVOUS_PORTS[1] + 1


def _can_bind(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free TCP port outside the kernel's ephemeral range and Ray's worker ports (see the module docstring).

    Falls back to an OS-assigned (ephemeral) port when no candidate in the range can be bound.
    """
    low, high = _RENDEZVOUS_PORTS[0], min(_RENDEZVOUS_PORTS[1], _ephemeral_port_floor() - 1)
    rng = random.SystemRandom()  # independent picks in concurrent processes
    for _ in range(_PORT_TRIES if high > low else 0):
        port = rng.randint(low, high)
        if _can_bind(port):
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return int(sock.getsockname()[1])
