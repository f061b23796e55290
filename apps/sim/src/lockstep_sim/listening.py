"""One aiohttp app served on many loopback addresses, all on one port (the BMC layout), or on
all interfaces, one port each (``bind_ports``: a simulator reached from other containers)."""

from __future__ import annotations

import socket
from collections.abc import Sequence

from aiohttp import web


def _listen(address: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.setblocking(False)
    return sock


def bind_all(addresses: Sequence[str], port: int) -> tuple[list[socket.socket], int]:
    """A bound socket per address, all on one port (``0``: a free port of the first address),
    and that port: bound before the app is built, since the app names it (``/fleet.json``)."""
    first = _listen(addresses[0], port)
    port = first.getsockname()[1]
    return [first, *(_listen(a, port) for a in addresses[1:])], port


ALL_INTERFACES = "0.0.0.0"  # noqa: S104 - only with --advertise, for a container network


def bind_ports(address: str, first: int, count: int) -> list[socket.socket]:
    """``count`` bound sockets on ``address``, on ports ``first``, ``first + 1`` ... (``first``
    0: any free port each)."""
    return [_listen(address, first + i if first else 0) for i in range(count)]


async def serve_on(app: web.Application, socks: Sequence[socket.socket]) -> web.AppRunner:
    """Serve ``app`` on ``socks``; ``cleanup()`` of the returned runner stops it."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    for sock in socks:
        await web.SockSite(runner, sock).start()
    return runner
