"""The approvers trust store: a directory of ``<approver>.pem`` Ed25519 public keys, read once
at start (a file that is not such a key stops the service, naming it)."""

from __future__ import annotations

from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import load_pem_public_key


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
