"""A firmware image as the write side receives it: the bytes and the digest they must have.

The caller (the updater) fetches the bytes from an attested bundle and passes the digest its
manifest attests, in the manifest's own algorithm (SHA-384, docs/updater.md), so that the check
is against the attested digest itself, not one derived from the bytes later;
:meth:`FirmwareImage.check` runs right before every send, and a mismatch fails closed, before
anything is sent (design.md non-negotiable 7). The bytes are hashed once per ``bytes`` object
(they are immutable): the executor's read of the bundle hashes them, and the preflight and the
push that send that very object compare that digest with the attested one again instead of
hashing it twice more (issue 29: three SHA-384s of each image per push cost push throughput).
SHA-256 is accepted too, for images whose publisher gives only that.

:func:`off_loop` runs a check on the image-check threads: one per core but one (at least one),
first asked, first hashed. The default executor's threads (cores + 4) hashed up to six
concurrent pushes' images at once: on two cores the first body left only once several hashes had
ended, and the hashes took the core the event loop needed to send the bodies already checked
(``lockstep bench update``: push_ratio, docs/updater.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from lockstep_redfish.errors import ImageDigestMismatch

DigestAlgorithm = Literal["sha256", "sha384"]
_DIGESTS = {"sha256": (64, "SHA-256"), "sha384": (96, "SHA-384")}  # hex digits, name in messages
_HEX = re.compile(r"[0-9a-f]*")
CHECK_THREADS = max(1, (os.cpu_count() or 1) - 1)  # a core is left to the event loop
_CHECKS = ThreadPoolExecutor(CHECK_THREADS, thread_name_prefix="lockstep-image-check")


async def off_loop(check: Callable[[], object]) -> None:
    """Run ``check`` (a :meth:`FirmwareImage.check`) on the image-check threads and wait for
    it: off the event loop, so that other BMCs' requests go on meanwhile (hashlib releases
    the GIL), in the order asked, at most ``CHECK_THREADS`` at once."""
    await asyncio.get_running_loop().run_in_executor(_CHECKS, check)


@dataclass(frozen=True, slots=True, repr=False)
class FirmwareImage:
    """``data`` with the ``digest`` it must have (lower-case hex of ``algorithm``, by default
    SHA-384: the bundle manifest's) and a ``filename`` for the multipart ``UpdateFile`` part."""

    data: bytes
    digest: str
    filename: str = "image.fwpkg"
    algorithm: DigestAlgorithm = field(default="sha384", kw_only=True)
    _hashed: list[Any] = field(default_factory=list, init=False, compare=False)
    """[the ``bytes`` object last hashed, its digest]: bytes are immutable, so the same object
    has the same digest; the reference keeps it alive (its ``id`` is never reused meanwhile)."""

    def __post_init__(self) -> None:
        known = _DIGESTS.get(self.algorithm)
        if known is None:
            raise ValueError(f"digest algorithm must be one of {', '.join(_DIGESTS)}")
        digits, label = known
        if len(self.digest) != digits or not _HEX.fullmatch(self.digest):
            raise ValueError(f"a {label} digest must be {digits} lower-case hex digits")

    def __repr__(self) -> str:  # never the bytes
        return (
            f"FirmwareImage({self.filename!r}, {len(self.data)} bytes, "
            f"{self.algorithm}={self.digest})"
        )

    def actual(self, data: bytes | memoryview | None = None) -> str:
        """The digest of ``data`` (default: this image's bytes) in ``algorithm``. Hashed once
        per ``bytes`` object: the same immutable object asked again (the executor's read of the
        bundle, then preflight, then the push of that very object) gives the digest already
        computed; anything else (another object, a mutable buffer or a view) is hashed now."""
        obj = self.data if data is None else data
        memo = self._hashed
        if memo and type(obj) is bytes and memo[0] is obj:
            return str(memo[1])
        actual = hashlib.new(self.algorithm, obj).hexdigest()
        if type(obj) is bytes:
            memo[:] = [obj, actual]
        return actual

    def check(self, data: bytes | memoryview | None = None) -> None:
        """:class:`ImageDigestMismatch` unless ``data`` (default: this image's bytes) has
        ``digest``, the attested one: compared on every call, right before every send; the
        bytes hashed once per object (:meth:`actual`), so one push hashes its image once."""
        actual = self.actual(data)
        if actual != self.digest:
            label = _DIGESTS[self.algorithm][1]
            raise ImageDigestMismatch(
                f"image {self.filename}: {label} {actual} is not the expected {self.digest}; "
                "nothing was sent",
                filename=self.filename,
            )
