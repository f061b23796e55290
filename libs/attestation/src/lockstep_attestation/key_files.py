"""Reading verification keys from files: a public key file, a directory of review-provider keys.

The domain parses bytes (``domain.keys.parse_public_key``) and holds keys (``domain.safe.
SrpKeySet``); this module is where the file system is read, and errors name the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from types import MappingProxyType

from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes

from lockstep_attestation.keys import KeyLoadError, parse_public_key
from lockstep_attestation.safe import KNOWN_SRP_KIDS, SfrError, SrpKeySet


def load_public_key(path: str | PathLike[str]) -> PublicKeyTypes:
    """Load a public key from a PEM ``PUBLIC KEY`` file or a JWK (JSON) file.

    Raises:
        KeyLoadError: unreadable file or no public key in it; the message names the file.
    """
    file = Path(path)
    try:
        data = file.read_bytes()
    except OSError as exc:
        raise KeyLoadError(f"{file}: cannot read: {exc}") from None
    try:
        return parse_public_key(data)
    except KeyLoadError as exc:
        raise KeyLoadError(f"{file}: {exc}") from None


def load_srp_keys(
    path: str | PathLike[str], *, kid_table: Mapping[str, str] = KNOWN_SRP_KIDS
) -> SrpKeySet:
    """Every ``*.pub`` / ``*.pem`` public key below ``path``, named by its relative path (a
    missing directory gives an empty set, which verifies nothing).

    Raises:
        SfrError: a key file that is not a public key, naming the file.
    """
    root, keys = Path(path), {}
    files = sorted(root.rglob("*")) if root.is_dir() else []
    for file in (f for f in files if f.suffix.lower() in (".pub", ".pem") and f.is_file()):
        name = file.relative_to(root).as_posix()
        try:
            keys[name] = load_public_key(file)
        except KeyLoadError as exc:
            raise SfrError(f"SRP key {exc}") from None
    return SrpKeySet(MappingProxyType(keys), kid_table, str(root))
