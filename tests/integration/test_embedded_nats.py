"""The embedded nats-server: a client port taken between choosing it and binding it."""

from __future__ import annotations

import shutil
import socket
import tempfile
from pathlib import Path

from lockstep_devstack.nats import NatsServer


def test_a_port_taken_between_choosing_it_and_binding_it_is_chosen_again() -> None:
    base = Path(tempfile.mkdtemp(prefix="lockstep-nats-race-"))
    server = NatsServer(base / "nats", sync_always=False)
    chosen = server.port
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        squatter.bind(("127.0.0.1", chosen))
        squatter.listen()
        try:
            server.start(timeout_s=30)
            assert server.port != chosen
            assert f":{server.port}" in server.url
        finally:
            server.stop()
            shutil.rmtree(base, ignore_errors=True)
