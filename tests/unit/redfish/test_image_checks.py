"""The re-hash before each push runs off the event loop, on at most one thread per core but one:
pushes to many BMCs at once do not hash all their images at the same time."""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading

import pytest

from lockstep_redfish.errors import ImageDigestMismatch
from lockstep_redfish.image import CHECK_THREADS, FirmwareImage, off_loop

pytestmark = pytest.mark.unit
DATA = b"\x5a" * 4096


async def test_checks_asked_at_once_leave_a_core_to_the_event_loop() -> None:
    release = threading.Event()
    threads: list[str] = []

    def check() -> None:
        threads.append(threading.current_thread().name)
        release.wait(timeout=30)  # a guard against a hang only: released below

    checks = [asyncio.create_task(off_loop(check)) for _ in range(CHECK_THREADS + 1)]
    await asyncio.sleep(0)  # each task's first step: every check has been asked for
    release.set()
    await asyncio.gather(*checks)
    assert len(threads) == CHECK_THREADS + 1
    # One waited for a thread instead of taking its own: every core but one, at least one.
    assert len(set(threads)) <= max(1, (os.cpu_count() or 1) - 1)
    assert all(name.startswith("lockstep-image-check") for name in threads)  # not the loop


async def test_a_mismatch_found_off_the_loop_reaches_the_caller() -> None:
    image = FirmwareImage(DATA, hashlib.sha384(DATA).hexdigest(), "gpu.fwpkg")
    await off_loop(image.check)  # the attested bytes pass
    with pytest.raises(ImageDigestMismatch, match="nothing was sent"):
        await off_loop(lambda: image.check(DATA[:-1] + b"\x00"))


def test_an_image_is_hashed_once_per_object_and_checked_every_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 29: the executor's read, the preflight and the push of one image hash it once;
    every check still compares with the attested digest, and other bytes are hashed."""
    image = FirmwareImage(DATA, hashlib.sha384(DATA).hexdigest(), "gpu.fwpkg")
    hashed: list[int] = []
    real = hashlib.new

    def counting(name: str, data: bytes | memoryview = b"") -> object:
        hashed.append(len(data))
        return real(name, data)

    monkeypatch.setattr(hashlib, "new", counting)
    assert image.actual() == image.digest
    image.check()  # the preflight
    image.check(DATA)  # the push: the very object
    assert hashed == [len(DATA)]
    with pytest.raises(ImageDigestMismatch):
        image.check(DATA[:-1] + b"\x00")  # another object: hashed, refused
    with pytest.raises(ImageDigestMismatch):
        image.check(memoryview(bytearray(DATA[:-1] + b"\x00")))  # mutable: never remembered
    buffer = bytearray(DATA)
    image.check(memoryview(buffer))
    image.check(memoryview(buffer))
    assert len(hashed) == 5
    wrong = FirmwareImage(DATA, hashlib.sha384(b"other").hexdigest(), "gpu.fwpkg")
    assert wrong.actual() == image.digest
    with pytest.raises(ImageDigestMismatch):  # the digest remembered is still compared
        wrong.check(DATA)
