"""The ``multipart/form-data`` body of a push to ``MultipartHttpPushUri`` (pure).

Two parts, as DMTF ``redfish_utilities``, NVIDIA ``libredfish`` and ``open-nvfwupd`` send them
(standards.md 1.1): ``UpdateParameters`` (``application/json``) and ``UpdateFile``
(``application/octet-stream``, with a filename). The body is built once as bytes (RFC 7578),
so the same bytes can be sent again after a refusal, and the image inside it can be hashed
right before each send: the bytes hashed are the bytes on the wire.
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
    data: bytes
    content_type: str
    image_start: int  # data[image_start:image_end] is the image, byte for byte
    image_end: int

    def image(self) -> memoryview:
        return memoryview(self.data)[self.image_start : self.image_end]


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
    return MultipartBody(
        data=head + image + tail,
        content_type=f"multipart/form-data; boundary={boundary}",
        image_start=len(head),
        image_end=len(head) + len(image),
    )
