"""One aiohttp app served on many loopback addresses, all on one port (the BMC layout)."""

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


async def serve_on(app: web.Application, socks: Sequence[socket.socket]) -> web.AppRunner:
    """Serve ``app`` on ``socks``; ``cleanup()`` of the returned runner stops it."""
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.1)
    await runner.setup()
    for sock in socks:
        await web.SockSite(runner, sock).start()
    return runner
