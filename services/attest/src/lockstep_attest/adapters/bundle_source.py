"""Where the attest worker may read bundles from, and how much.

A ``bundle.submitted`` event names a path; nothing is trusted because the event says so. A
bundle is read only when its real path (symbolic links resolved) lies below one of the configured
roots, is a regular file (a tar) or a directory, and is no larger than the limit: a FIFO or a
device named by a hostile submission would otherwise block the worker forever on ``open``, and
``/etc`` or another service's data would be read and reported on (reliability.md 7 H).
"""

from __future__ import annotations

import os
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse


class BundleRefused(ValueError):
    """The submission names something the worker may not read; the message says why."""


@dataclass(frozen=True, slots=True)
class BundleSource:
    """Bundles are read from below ``roots`` only, up to ``max_bytes`` each (a tar's size, or
    the sum of a directory's files, or a tar's members once extracted)."""

    roots: tuple[Path, ...]
    max_bytes: int

    @classmethod
    def of(cls, roots: list[Path], max_bytes: int) -> BundleSource:
        """Roots as configured, resolved once: a root that is a link counts as its target."""
        return cls(tuple(r.resolve() for r in roots), max_bytes)

    def locate(self, uri: str) -> Path:
        """The bundle's real path, once every rule holds.

        Raises:
            BundleRefused: naming the rule broken.
        """
        if not self.roots:
            raise BundleRefused(
                "no bundle roots configured: set LOCKSTEP_ATTEST_BUNDLE_ROOTS to the directories "
                "bundles may be read from (attest fails closed)"
            )
        path = _path_of(uri)
        if not path.is_absolute():
            raise BundleRefused("a bundle path must be absolute")
        try:
            real = path.resolve(strict=True)
            mode = real.stat().st_mode
        except OSError as exc:
            raise BundleRefused(f"cannot read: {exc.strerror}") from None
        if not any(real.is_relative_to(root) for root in self.roots):
            raise BundleRefused("outside the configured bundle roots")
        if stat.S_ISDIR(mode):
            self._check_size(_directory_bytes(real))
        elif stat.S_ISREG(mode):
            self._check_size(real.stat().st_size)
            if tarfile.is_tarfile(real):
                self._check_size(_extracted_bytes(real))
        else:
            raise BundleRefused("not a regular file or directory (a FIFO or device is refused)")
        return real

    def _check_size(self, size: int) -> None:
        if size > self.max_bytes:
            raise BundleRefused(f"{size} bytes exceeds the {self.max_bytes}-byte bundle limit")


def _path_of(uri: str) -> Path:
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise BundleRefused(f"file URI names another host ({parsed.netloc})")
        return Path(unquote(parsed.path))
    if parsed.scheme == "":
        return Path(uri)
    raise BundleRefused(f"unsupported bundle URI scheme {parsed.scheme!r} (use a file path)")


def _directory_bytes(root: Path) -> int:
    total = 0
    for dirpath, _, filenames in os.walk(root, followlinks=False):
        for name in filenames:
            info = os.lstat(os.path.join(dirpath, name))  # noqa: PTH118 - os.walk's strings
            if stat.S_ISREG(info.st_mode):
                total += info.st_size
    return total


def _extracted_bytes(path: Path) -> int:
    """What extracting the tar would write: a small compressed tar may expand enormously."""
    try:
        with tarfile.open(path) as tar:
            return sum(member.size for member in tar.getmembers() if member.isreg())
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:  # truncated or corrupt
        raise BundleRefused(f"unreadable tar: {exc}") from None
