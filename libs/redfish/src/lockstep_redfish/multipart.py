"""The ``multipart/form-data`` body of a push to ``MultipartHttpPushUri`` (pure).

Two parts, as DMTF ``redfish_utilities``, NVIDIA ``libredfish`` and ``open-nvfwupd`` send them
(standards.md 1.1): ``UpdateParameters`` (``application/json``) and ``UpdateFile``
(``application/octet-stream``, with a filename). The body is built once (RFC 7578) as three
pieces sent one after the other: the parts' headers, the image, and the closing boundary. The
image piece is the image's own ``bytes`` object, not a copy: bytes are immutable, so the
object hashed right before each send is the object on the wire, byte for byte, and the same
body can be sent again after a refusal. Not copying matters: a body joined per push (which
aiohttp then joined again with the request headers) took the client's event loop longer than
sending it (``lockstep bench update``, docs/updater.md).
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class MultipartBody:
    """The body as sent: ``head``, then ``image`` (the very object given, never a copy), then
    ``tail``; ``content_type`` carries the boundary."""

    head: bytes
    image: bytes
    tail: bytes
    content_type: str

    @property
    def pieces(self) -> tuple[bytes, bytes, bytes]:
        """What goes on the wire, in order (``transport.request`` sends them as one body)."""
        return (self.head, self.image, self.tail)


def _boundary(image: bytes) -> str:
    # RFC 2046 5.1.1: the boundary must not occur in the content; 128 random bits make that
    # all but certain, and the check makes it certain.
    while True:
        boundary = f"lockstep-{secrets.token_hex(16)}"
        if boundary.encode() not in image:
            return boundary


def multipart_body(parameters: dict[str, Any], image: bytes, filename: str) -> MultipartBody:
    """``UpdateParameters`` (JSON) then ``UpdateFile`` (``image`` named ``filename``, reduced to
    ``[A-Za-z0-9._-]`` so that it cannot break the header)."""
    image = bytes(image)  # the same object when it is bytes; a mutable buffer is copied once
    boundary = _boundary(image)
    name = _UNSAFE.sub("_", filename) or "image"
    head = (
        f"--{boundary}\r\n"
        'Content-Disposition: form-data; name="UpdateParameters"\r\n'
        "Content-Type: application/json\r\n\r\n"
        f"{json.dumps(parameters, separators=(',', ':'))}\r\n"
        f"--{boundary}\r\n"
        f'Content-Disposition: form-data; name="UpdateFile"; filename="{name}"\r\n'
        "Content-Type: application/octet-stream\r\n\r\n"
    ).encode()
    tail = f"\r\n--{boundary}--\r\n".encode()
    return MultipartBody(head, image, tail, f"multipart/form-data; boundary={boundary}")
