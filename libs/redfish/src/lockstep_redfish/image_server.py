"""Where a BMC pulls an image from for ``SimpleUpdate`` (it takes an ``ImageURI``, not bytes).

A BMC without ``MultipartHttpPushUri`` can only pull (UpdateService v1_0_0 ``SimpleUpdate``),
so the provenance rule (design.md non-negotiable 7: the bytes that leave are re-hashed right
before) moves here: :meth:`ImageServer.offer` hashes the image when it becomes fetchable, and
only those immutable bytes are ever served, under an unguessable path (128 random bits), until
:meth:`ImageServer.withdraw`. Plain HTTP: what a BMC installs is checked by the BMC against the
package's own signature; the path only keeps strangers from pulling it.
"""

from __future__ import annotations

import re
import secrets
import socket
from types import TracebackType
from typing import Self

from aiohttp import web

from lockstep_redfish.image import FirmwareImage

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


class ImageServer:
    """``async with ImageServer("10.0.0.5") as server: url = server.offer(image)``.

    ``host`` is the address to listen on and the one put into URLs (``advertise`` overrides
    it, e.g. behind NAT); ``port`` 0 picks a free one. ``fetches`` counts GETs per URL.
    """

    def __init__(self, host: str, port: int = 0, *, advertise: str | None = None) -> None:
        self.host = host
        self.port = port
        self.advertise = advertise or host
        self.fetches: dict[str, int] = {}
        self.urls: dict[str, str] = {}  # path -> URL as offered
        self._images: dict[str, FirmwareImage] = {}  # path -> image, while offered
        self._paths: dict[str, str] = {}  # digest -> path, while offered
        self._runner: web.AppRunner | None = None

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/images/{token}/{name}", self._serve)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            await web.SockSite(runner, sock).start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self.port = sock.getsockname()[1]
        self._runner = runner

    async def stop(self) -> None:
        self._images.clear()
        self._paths.clear()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def offer(self, image: FirmwareImage) -> str:
        """Check the image's digest now and make it fetchable; returns its URL (the same URL
        while the same digest stays offered)."""
        if self._runner is None:
            raise RuntimeError("the image server is not started")
        image.check()
        path = self._paths.get(image.digest)
        if path is None:
            name = _UNSAFE.sub("_", image.filename) or "image"
            path = f"/images/{secrets.token_hex(16)}/{name}"
            host = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
            self._paths[image.digest] = path
            self._images[path] = image
            self.urls[path] = f"http://{host}:{self.port}{path}"
            self.fetches.setdefault(self.urls[path], 0)
        return self.urls[path]

    def withdraw(self, image: FirmwareImage) -> None:
        """Stop serving ``image`` (a BMC fetching it later gets 404)."""
        path = self._paths.pop(image.digest, None)
        if path is not None:
            del self._images[path]

    async def _serve(self, request: web.Request) -> web.StreamResponse:
        image = self._images.get(request.path)
        if image is None:
            raise web.HTTPNotFound
        self.fetches[self.urls[request.path]] += 1
        return web.Response(body=image.data, content_type="application/octet-stream")
