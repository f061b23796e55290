"""The approvers trust store: a directory of ``<approver>.pem`` Ed25519 public keys.

Read at start (a file that is not such a key stops the service, naming it), and again whenever
the directory changes: each approval's verification reads the directory first (a few small
files; approvals are rare), so an approver added by copying in a ``.pem`` can approve
without a restart, and one whose file is removed is refused from the next approval on. A change
that leaves an unreadable or foreign key file fails closed: no approval verifies, and the log
names the file, until the directory is put right.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key

log = logging.getLogger(__name__)


class ApproversError(ValueError):
    """The trust store cannot be read; the message names the file."""


def load_approvers(directory: Path) -> dict[str, Ed25519PublicKey]:
    """Approver name (the file's stem) -> public key."""
    if not directory.is_dir():
        raise ApproversError(f"{directory}: not a directory")
    keys: dict[str, Ed25519PublicKey] = {}
    for file in sorted(directory.glob("*.pem")):
        try:
            key = load_pem_public_key(file.read_bytes())
        except (OSError, ValueError) as exc:
            raise ApproversError(f"{file}: not a PEM public key: {exc}") from None
        if not isinstance(key, Ed25519PublicKey):
            raise ApproversError(f"{file}: not an Ed25519 key ({type(key).__name__})")
        keys[file.stem] = key
    return keys


Fingerprint = tuple[tuple[str, bytes], ...] | None


def _fingerprint(directory: Path) -> Fingerprint:
    """The key files' names and bytes, None when the directory cannot be read. Bytes, not
    modification times: a key replaced within one timestamp tick is still seen (a few small
    files, read once per approval)."""
    try:
        return tuple((f.name, f.read_bytes()) for f in sorted(directory.glob("*.pem")))
    except OSError:
        return None


class TrustStore(Mapping[str, Ed25519PublicKey]):
    """The approvers directory as a mapping that is current on every lookup."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._seen = _fingerprint(directory)
        self._keys = load_approvers(directory)  # at start: a bad store stops the service

    def _current(self) -> dict[str, Ed25519PublicKey]:
        seen = _fingerprint(self.directory)
        if seen != self._seen:
            self._seen = seen
            try:
                self._keys = load_approvers(self.directory)
            except ApproversError as exc:
                self._keys = {}
                log.error("approvers trust store: %s; no approval verifies until fixed", exc)
            else:
                log.info("approvers trust store reloaded: %s", ", ".join(self._keys) or "empty")
        return self._keys

    def __getitem__(self, name: str) -> Ed25519PublicKey:
        return self._current()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())
