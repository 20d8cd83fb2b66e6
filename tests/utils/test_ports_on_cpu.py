"""The rendezvous port: outside the kernel's ephemeral range (where outgoing connections take their local
port) and Ray's worker ports, so it is not taken between picking it and rank 0 binding it."""

from __future__ import annotations

import socket

from hybridrl.utils import ports


def test_free_port_is_between_ray_worker_ports_and_the_ephemeral_range():
    floor = ports._ephemeral_port_floor()
    for _ in range(20):
        port = ports.free_port()
        assert 20000 <= port < min(32768, floor), port
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("", port))  # and it is bindable


def test_free_port_skips_a_taken_port_and_falls_back_when_the_range_is_full(monkeypatch):
    taken = []
    real_can_bind = ports._can_bind

    def refuse_first(port: int) -> bool:
        if not taken:
            taken.append(port)
        return port != taken[0] and real_can_bind(port)  # the first port picked stays "in use"

    monkeypatch.setattr(ports, "_can_bind", refuse_first)
    assert ports.free_port() != taken[0]
    monkeypatch.setattr(ports, "_can_bind", lambda port: False)
    port = ports.free_port()  # nothing bindable in the range: an OS-assigned port
    assert port >= ports._ephemeral_port_floor() or port > 32767
